"""The run summary's lines: each count names the step it follows (`pipeline.report`)."""

from __future__ import annotations

from pipeline.report import summary_lines


def test_targets_the_model_stages_dropped_are_counted_with_the_samples_not_the_trajectories():
    manifest = {
        "counts": {
            "records": {"read": 20, "quarantined": 0},
            "trajectories": {"normalized": 20, "kept": 20},
            "filtered": {"llm_below_threshold": 12, "min_turns": 0, "sample_over_context_limit": 1},
            "turns_stripped": {"retry_cycle": 3},
            "samples": {"sft": 27},
            "pools": {"trajectories_in_shards": 14},
        },
        "shards": [{"path": "shards/sft/part-00000.parquet", "rows": 27}],
    }
    lines = summary_lines(manifest)
    assert lines[1] == "filter: 20 trajectories, 0 filtered → 20 kept; 3 turns stripped (retry_cycle 3)"
    assert lines[3] == "samples: cpt 0, sft 27, rl 0, eval 0 (filtered: llm_below_threshold 12, sample_over_context_limit 1)"
    assert lines[4] == "shards: 14 trajectories, 27 samples in 1 file"
    manifest["counts"]["turns_stripped"] = {"retry_cycle": 1}
    assert summary_lines(manifest)[1] == "filter: 20 trajectories, 0 filtered → 20 kept; 1 turn stripped (retry_cycle 1)"


def test_the_shards_line_names_the_trajectories_that_got_no_sample():
    manifest = {
        "config": {"pools": {"eval_subsample": 0.5}},
        "counts": {
            "records": {"read": 20, "quarantined": 0},
            "trajectories": {"normalized": 20, "kept": 20},
            "dedup": {"removed": 3},
            "filtered": {"rl_prompt_cap": 1},
            "samples": {"cpt": 10, "rl": 2, "eval": 5},
            "pools": {"eval": {"trajectories": 4, "unsampled": 2}, "trajectories_without_samples": 3,
                      "trajectories_in_shards": 14},
        },
        "shards": [{"path": "shards/cpt/part-00000.parquet", "rows": 17}],
    }
    lines = summary_lines(manifest)
    assert lines[2].endswith("→ 17 trajectories")
    # 17 after dedup = 14 in the shards + 3 without a sample: 2 eval ones with no turn drawn, 1 whose samples were filtered
    assert lines[4] == ("shards: 14 trajectories, 17 samples in 1 file; 3 trajectories got no sample "
                        "(eval_subsample 2, samples_filtered 1)")


def test_the_run_summary_adds_up_from_dedup_to_shards(tmp_path):
    from tests.helpers import lwm_in_process

    assert lwm_in_process("demo", "-d", "android", "-o", str(tmp_path / "demo"), "-n", "40").returncode == 0
    proc = lwm_in_process("run", "-i", str(tmp_path / "demo"), "-o", str(tmp_path / "out"), "--executor", "local",
                          "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    lines = {line.split(":", 1)[0]: line for line in proc.stderr.splitlines()}
    after_dedup = int(lines["dedup"].rsplit("→ ", 1)[1].split()[0])
    shipped = int(lines["shards"].removeprefix("shards: ").split()[0])
    assert shipped < after_dedup  # this demo has an eval trajectory whose turns eval_subsample all left out
    without = int(lines["shards"].split("; ")[1].split()[0])
    assert shipped + without == after_dedup, lines["shards"]
    assert "eval_subsample" in lines["shards"]


def test_a_run_without_samples_warns_with_its_largest_loss():
    from pipeline.report import no_samples_warning

    manifest = {
        "counts": {"records": {"read": 21, "quarantined": 2}, "trajectories": {"normalized": 19, "kept": 0},
                   "filtered": {"no_turns": 15, "min_turns": 4}},
        "shards": [{"path": "shards/cpt/part-00000.parquet", "rows": 0}],
    }
    assert no_samples_warning(manifest) == ("warning: no samples were written; the largest loss: filter no_turns "
                                            "(15 trajectories)")
    manifest["shards"][0]["rows"] = 1
    assert no_samples_warning(manifest) is None


def test_a_run_that_writes_no_sample_exits_0_with_a_warning_on_stderr(tmp_path):
    from tests.helpers import lwm_in_process, make_traj, write_jsonl

    write_jsonl(tmp_path / "one_turn.jsonl", [make_traj(1, seed=i).to_dict() for i in range(3)])  # min_turns is 2
    proc = lwm_in_process("run", "-i", str(tmp_path / "one_turn.jsonl"), "-o", str(tmp_path / "out"),
                          "--executor", "local", "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == ("warning: no samples were written; the largest loss: filter min_turns "
                                            "(3 trajectories)")
