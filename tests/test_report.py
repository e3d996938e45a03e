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
