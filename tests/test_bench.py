"""The benchmark harness's helpers on tiny inputs (no timing assertions): corpus, CLI runs, naive script, tables."""

import json
import tomllib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench import corpus, expansion, large_run, scaling
from bench.cli_runs import DEDUP_OFF, SFT_ALL, executor_choice, lwm_run, naive_run, samples_written, write_config
from bench.common import Figure, not_measured
from bench.results import (
    LARGE_HEADING,
    LOSS_HEADING,
    SCALING_HEADING,
    figure_row,
    render_results,
    replace_section,
    sections,
)


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "c.jsonl"
    count, size = corpus.write_corpus(str(path), 150_000, per_seed=2)
    return path, count, size


def test_corpus_interleaves_all_seven_domains_with_unique_ids(tiny_corpus):
    path, count, size = tiny_corpus
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == count and size == path.stat().st_size and size >= 150_000
    assert [r["domain"] for r in records[:7]] == list(corpus.DOMAINS)
    ids = [r["traj_id"] for r in records]
    assert len(set(ids)) == len(ids)
    assert any(i.endswith("-s0") for i in ids) and any(i.endswith("-s1") for i in ids)  # more than one seed


def test_prefix_is_whole_lines_reaching_the_size(tiny_corpus, tmp_path):
    path, _, _ = tiny_corpus
    lines, size = corpus.prefix(str(path), str(tmp_path / "p.jsonl"), 20_000)
    text = (tmp_path / "p.jsonl").read_text(encoding="utf-8")
    assert size == len(text.encode()) and size >= 20_000
    assert text.endswith("\n") and len(text.splitlines()) == lines
    assert path.read_text(encoding="utf-8").startswith(text)
    assert size - len(text.splitlines()[-1].encode()) - 1 < 20_000  # no line more than needed


def test_config_is_all_turn_sft_without_dedup(tmp_path):
    path = write_config(str(tmp_path / "c.toml"), SFT_ALL, DEDUP_OFF)
    cfg = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    assert cfg["pools"]["sft_turns"] == "all"
    assert cfg["pools"]["ratios"] == {"cpt": 0.0, "sft": 1.0, "rl": 0.0, "eval": 0.0}
    assert cfg["dedup"] == {"exact": False, "near": False}


def test_run_output_parsing():
    stderr = "sniffed format: lwm-jsonl (1 unit)\nexecutor: local (input 1.0 MB below 32 MB)\n" \
             "samples: cpt 0, sft 2,257, rl 3, eval 0\nshards: 10 trajectories\n"
    assert executor_choice(stderr) == "executor: local (input 1.0 MB below 32 MB)"
    assert executor_choice("samples: cpt 1\n") == "(no executor line printed)"
    assert samples_written(stderr) == 2260
    assert samples_written("nothing") == 0


def test_cli_run_and_naive_script_build_the_same_all_turn_samples(tiny_corpus, tmp_path):
    path, _, _ = tiny_corpus
    small = tmp_path / "small.jsonl"
    corpus.prefix(str(path), str(small), 15_000)
    turns = sum(len(json.loads(line)["turns"]) for line in small.read_text(encoding="utf-8").splitlines())
    config = write_config(str(tmp_path / "c.toml"), SFT_ALL, DEDUP_OFF)
    run = lwm_run([str(small)], str(tmp_path / "out"), config, "--executor", "local")
    seconds, naive_samples = naive_run([str(small)], str(tmp_path / "naive"))
    assert run.seconds > 0 and seconds > 0
    assert naive_samples == turns  # one sample per turn of every trajectory
    assert run.samples == turns  # the demo trajectories all pass the filters
    table = pq.read_table(tmp_path / "naive" / "samples.parquet")
    assert table.num_rows == turns
    assert [len(x) for x in table["input_ids"].to_pylist()] == [len(x) for x in table["loss_weight"].to_pylist()]


def test_expansion_benchmark_gives_one_ratio_per_run_and_length():
    figures = expansion.run((3,), count=2, runs=2)
    assert [f.name for f in figures] == ["expansion: all-turn / 1-turn characters tokenized, 3 turns",
                                         "expansion: all-turn / 1-turn time inside the tokenizer, 3 turns",
                                         "expansion: all-turn / 1-turn total build time, 3 turns"]
    assert [f.target for f in figures] == [1.3, 1.3, None]
    assert figures[0].ratios[0] == figures[0].ratios[1]  # characters are a deterministic measure
    assert all(len(f.ratios) == 2 and all(r > 0 for r in f.ratios) for f in figures)


def test_long_trajectories_have_the_asked_length():
    trajs = expansion.long_trajectories(7, 3)
    assert [len(t.turns) for t in trajs] == [7, 7, 7]
    assert len({t.observation for t in trajs[0].turns}) > 1


def test_rows_say_met_and_not_met_against_the_target_and_the_run_count():
    lower = Figure("a", [1.0, 3.0, 1.5], 2.0, False, measured="full 2026-12-01")
    higher = Figure("b", [1.0, 3.0, 1.5], 2.0, True)
    assert figure_row(lower) == "| a | 1.50× | 1.00× – 3.00× | 3 | ≤ 2.00× | met | full 2026-12-01 |  |"
    assert figure_row(higher) == "| b | 1.50× | 1.00× – 3.00× | 3 | ≥ 2.00× | not met |  |  |"
    assert figure_row(Figure("c", [4.0], 1.2, False)) == "| c | 4.00× | 4.00× – 4.00× | 1 | ≤ 1.20× | not met |  |  |"


def test_results_page_lists_machine_versions_corpus_and_unmeasured_figures():
    text = render_results(
        [Figure("x", [0.25], 0.2, True, unit="%"), not_measured("y", 1000, True, "absent", "/s")],
        "python -m bench --quick", "3", {"x": "ncalls tottime"},
        host={"cores": "2"}, libs={"pyarrow": "1"}, corpus="demo of seven domains",
        other_figures=[Figure("z", [2.0], None, True)],
    )
    assert "- cores: 2" in text and "- pyarrow: 1" in text
    assert "Corpus: demo of seven domains." in text
    assert "| x | 25% | 25% – 25% | 1 | ≥ 20% | met |" in text
    assert "| y | — | — | 0 | ≥ 1,000/s | not measured: absent |" in text
    assert "| z | 2.00× |" in text.split("## Other SPEC")[1]
    assert "### x" in text


def test_a_rewrite_keeps_the_loss_large_run_and_scaling_sections():
    previous = (f"# Benchmark results\n\n## Figures\n\nold rows\n\n{LARGE_HEADING}\n\nlarge table\n\n"
                f"{SCALING_HEADING}\n\nscaling table\n\n{LOSS_HEADING}\n\nloss table\n")
    text = render_results([Figure("new", [1.0], None, True)], "python -m bench", "1", {},
                          host={}, libs={}, previous=previous)
    assert "old rows" not in text and "| new |" in text
    assert f"{LARGE_HEADING}\n\nlarge table" in text and f"{LOSS_HEADING}\n\nloss table" in text
    assert f"{SCALING_HEADING}\n\nscaling table" in text
    assert sections(text)[LOSS_HEADING] == f"{LOSS_HEADING}\n\nloss table"


def test_replace_section_changes_only_its_own_section(tmp_path):
    path = tmp_path / "R.md"
    path.write_text(f"# T\n\n## A\n\na\n\n{LARGE_HEADING}\n\nold\n\n## C\n\nc\n", encoding="utf-8")
    replace_section(str(path), f"{LARGE_HEADING}\n\nnew")
    assert path.read_text(encoding="utf-8") == f"# T\n\n## A\n\na\n\n{LARGE_HEADING}\n\nnew\n\n## C\n\nc\n"
    replace_section(str(path), "## D\n\nd")
    assert path.read_text(encoding="utf-8").endswith("## C\n\nc\n\n## D\n\nd\n")


def test_large_run_summary_and_targets():
    peak = {1: 550.0, 2: 900.0, 3: 700.0, 4: 300.0, 5: 2000.0, 6: 650.0}
    names = {1: {"python"}, 2: {"ray::IDLE", "ray::Map(run_row)"}, 3: {"ray::run_row"}, 4: {"ray::IDLE"},
             5: {"ray::DashboardAgent"}, 6: {"ray::_StatsActor"}}
    timings = {"ingest": {"seconds": 40.0}, "dedup-map": {"seconds": 20.0}, "dedup-reduce": {"seconds": 10.0},
               "samples": {"seconds": 30.0}}
    large = large_run.summarize(0, 120.0, peak, names, 1, timings)
    assert large["workers"] == [900.0, 700.0] and large["driver"] == 550.0
    assert large["worker_names"] == ["ray::Map(run_row)", "ray::run_row"]
    assert large["dedup_share"] == pytest.approx(0.25)
    small = large_run.summarize(0, 20.0, {1: 200.0, 2: 600.0}, {1: {"python"}, 2: {"ray::run_row"}}, 1,
                                {"ingest": {"seconds": 5.0}})
    large.update(bytes=2_000_000_000, trajectories=1000)
    small.update(bytes=200_000_000, trajectories=100)
    text = large_run.render(small, large)
    assert text.startswith(LARGE_HEADING)
    assert "| 4. dedup stages' share of wall, 2.0 GB | 25% | ≤ 25% | met |" in text
    assert "| 4. driver peak RSS, 2.0 GB | 550 MiB | ≤ 600 MiB | met |" in text
    assert "| 5. peak RSS per worker, 10× input | 1.50× | ≤ 1.2× | not met |" in text
    assert "| 120 s | ≤ 300 s | met |" in text
    assert "| 0.2 GB | 100 | 0 | 20.0 s | — | — | 5.0 s | — | 0% | 200 MiB | 600 MiB |" in text
    assert "2.0 GB: ray::Map(run_row) / ray::run_row" in text
    tiny = large_run.render({**small, "bytes": 5_000_000}, {**large, "bytes": 20_000_000})
    assert "| 0.005 GB | 100 |" in tiny and "| 6. wall, 0.02 GB on " in tiny


def _rows():
    obs = ["Listing files in the project folder: alpha beta gamma", "Error: permission denied for folder gamma"]
    return [{"traj_id": f"t{i}", "split_key": f"k{i}", "domain": "terminal",
             "turns": [{"action": "ls gamma", "observation": o} for o in obs]} for i in range(3)]


def test_real_copies_vary_ids_and_observation_words_but_not_size_or_actions():
    rows = _rows()
    by_length = corpus._permutations(rows)
    first, second = corpus.varied_copy(rows, 0, by_length), corpus.varied_copy(rows, 1, by_length)
    assert [r["traj_id"] for r in first + second] == ["t0-c0", "t1-c0", "t2-c0", "t0-c1", "t1-c1", "t2-c1"]
    assert len({r["split_key"] for r in first + second}) == 6
    assert [t["observation"] for t in first[0]["turns"]] == [t["observation"] for t in rows[0]["turns"]]
    for a, b in zip(rows[0]["turns"], second[0]["turns"], strict=True):
        assert b["action"] == a["action"]
        assert len(b["observation"]) == len(a["observation"])
    words = {w for t in rows[0]["turns"] for w in corpus.WORD.findall(t["observation"])}
    changed = [t["observation"] for t in second[0]["turns"]] != [t["observation"] for t in rows[0]["turns"]]
    assert changed and {w for t in second[0]["turns"] for w in corpus.WORD.findall(t["observation"])} <= words
    assert rows[0]["turns"][0]["observation"].startswith("Listing")  # the input rows are not modified


def test_real_corpus_reaches_the_size_with_unique_ids(tmp_path):
    count, size = corpus.write_real_corpus(str(tmp_path / "r.jsonl"), 2_000, _rows())
    records = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == count and size >= 2_000 and size == (tmp_path / "r.jsonl").stat().st_size
    assert len({r["traj_id"] for r in records}) == count > 3


def test_a_failed_group_becomes_a_not_measured_row():
    from bench.__main__ import _guarded

    def fail():
        raise RuntimeError("lwm run --executor ray failed (1): timed out\nmore")

    rows, info = _guarded(fail, "1–7a. small inputs", ([], {}))
    assert info == {} and [r.name for r in rows] == ["1–7a. small inputs"]
    assert rows[0].note == "not measured: a run failed: lwm run --executor ray failed (1): timed out"
    assert _guarded(lambda: [Figure("ok", [1.0], None, True)], "g", [])[0].name == "ok"


def test_naive_script_weights_a_token_by_the_observation_span_it_starts_in():
    import numpy as np

    from bench.naive import offset_weights

    starts = np.array([0, 2, 3, 8, 9, 10, 13, 14, 30])
    weights = offset_weights(starts, [(3, 9, 0.5), (10, 14, 1.0)])
    assert weights.dtype == np.float32
    assert weights.tolist() == [0.0, 0.0, 0.5, 0.5, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert offset_weights(starts[:2], []).tolist() == [0.0, 0.0]


def test_scaling_section_gives_both_ratios_per_size_and_the_machine_ceiling():
    sizes = [{"bytes": 41_000_000, "samples": 1_200, "local": [30.0], "ray1": [40.0], "ray2": [25.0],
              "processes": [20.0], "2a": [1.6], "2b": [1.2], "pl": [1.5], "pr": [1.25]},
             {"bytes": 164_000_000, "samples": 4_800, "local": [120.0, 130.0], "ray1": [140.0, 150.0],
              "ray2": [70.0, 76.0], "processes": [65.0, 66.0], "2a": [2.0, 1.9], "2b": [1.71, 1.61],
              "pl": [1.85, 1.97], "pr": [1.08, 1.15]}]
    top = {"ratios": [1.93, 1.81, 1.88], "one": [8.0, 8.2, 8.1], "two": [8.3, 9.0, 8.6]}
    text = scaling.render(sizes, top, 35.1, 1)
    assert text.startswith(SCALING_HEADING)
    assert "| 41 MB | 1,200 | 30.0 s | 40.0 s | 25.0 s | 20.0 s | 1.60× not met | 1.20× not met | 1.50× | 1.25× |" in text
    assert ("| 164 MB | 4,800 | 120.0–130.0 s | 140.0–150.0 s | 70.0–76.0 s | 65.0–66.0 s | 1.95× (1.90–2.00) met "
            "| 1.66× (1.61–1.71) met | 1.91× (1.85–1.97) | 1.11× (1.08–1.15) |") in text
    assert "ceiling: 1.88×** (1.81–1.93, 3 runs)" in text
    assert "35.1 MB ChatML text" in text and "8.3–9.0 s, against 8.0–8.2 s" in text


def test_the_ceiling_starts_its_encoding_processes_together_and_reads_their_seconds(tmp_path):
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps(["a tool call and its observation, 42 lines"] * 300), encoding="utf-8")
    seconds = scaling.encode_seconds(str(texts), 2)
    assert len(seconds) == 2 and all(0 < s < 60 for s in seconds)
    top = scaling.ceiling(str(texts), 1)
    assert len(top["ratios"]) == 1 and top["ratios"][0] == 2 * top["one"][0] / top["two"][0]
