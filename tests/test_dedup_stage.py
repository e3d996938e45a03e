"""The distributed dedup stage: planted duplicates go, distinct runs stay, the same answer everywhere.

One local Ray session (2 CPUs, no dashboard) serves the module. The corpus: 40 distinct terminal
trajectories sharing one long system prompt, plus exact copies (other timestamps, PIDs, whitespace) and
near copies (one word per turn replaced by another of the same length, ~1% of the words).
"""

from __future__ import annotations

import copy
import json
import logging
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import resolve
from pipeline.dedup_stage import EDGE_SCHEMA, dedup_settings, reduce_groups
from pipeline.executors import LocalExecutor
from pipeline.run import run_pipeline
from schemas.errors import ConfigError
from schemas.stats import Stats
from stages import dedup
from stages.dedup_removals import removed_rows

SYSTEM_PROMPT = "You operate a Linux shell in a sandbox. " * 30  # shared boilerplate, ~200 words
EXACT_COPIES = {"t003": ["u-exact-003a", "u-exact-003b"], "t011": ["u-exact-011"]}
NEAR_COPIES = {"t005": "u-near-005", "t017": "u-near-017", "t029": "u-near-029"}
CONFIG = {"pools": {"ratios": {"cpt": 0.7, "sft": 0.2, "rl": 0.1}}}  # no eval pool: dedup only here


def _corpus() -> list[dict]:
    rnd = random.Random(7)
    vocab = [f"{rnd.choice('bcdfghklmnprst')}{rnd.choice('aeiou')}{rnd.randrange(10**4):04d}" for _ in range(6000)]
    trajs = []
    for i in range(40):
        turns = []
        for t in range(3 + i % 3):
            words = " ".join(rnd.choice(vocab) for _ in range(70))
            turns.append({"action": json.dumps([{"keystrokes": f"run {rnd.choice(vocab)}\n"}]),
                          "observation": f"[2024-05-01T10:0{t}:00Z] worker[{3000 + i}]: {words}\ndone in 0.{t}4s"})
        trajs.append({"traj_id": f"t{i:03d}", "domain": "terminal", "split_key": f"task-{i:03d}",
                      "system": {"task_description": SYSTEM_PROMPT, "action_space": "keystrokes"}, "turns": turns})
    by_id = {t["traj_id"]: t for t in trajs}
    for orig, copies in EXACT_COPIES.items():
        for n, cid in enumerate(copies):
            dup = copy.deepcopy(by_id[orig])
            dup.update(traj_id=cid, split_key=f"task-{cid}")
            for t in dup["turns"]:
                t["observation"] = (t["observation"].replace("2024-05-01T10", f"2025-0{n + 2}-11T23")
                                    .replace("worker[", "worker[9").replace(" ", "  "))
            trajs.append(dup)
    for orig, cid in NEAR_COPIES.items():
        dup = copy.deepcopy(by_id[orig])
        dup.update(traj_id=cid, split_key=f"task-{cid}")
        for t in dup["turns"]:
            words = t["observation"].split(" ")
            words[20] = "x" * len(words[20])
            t["observation"] = " ".join(words)
        trajs.append(dup)
    rnd.shuffle(trajs)
    return trajs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dedup") / "runs.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in _corpus()))
    return path


def _config(corpus: Path, out: Path, buckets: int = 0) -> dict:
    cfg = resolve(CONFIG, {"run": {"input": [str(corpus)], "out": str(out)}, "executor": {"kind": "local",
                                                                                           "progress": "off"}})
    cfg["dedup"]["buckets"] = buckets  # not a user key: forces the number of reduce buckets
    return cfg


def _removed(out: Path) -> list[dict]:
    return pq.read_table(out / "dedup" / "removed.parquet").to_pylist()


@pytest.fixture(scope="module")
def cli_run(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "out"
    toml = out.parent / "cfg.toml"
    toml.write_text("[pools.ratios]\ncpt = 0.7\nsft = 0.2\nrl = 0.1\n")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--executor", "local", "--config", str(toml),
                           "-i", str(corpus), "-o", str(out), "--progress", "off"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def test_planted_copies_are_removed_and_distinct_runs_kept(cli_run):
    rows = _removed(cli_run)
    expected = sorted([(c, "exact_duplicate", o) for o, cs in EXACT_COPIES.items() for c in cs]
                      + [(c, "near_duplicate", o) for o, c in NEAR_COPIES.items()])
    assert [(r["traj_id"], r["reason"], r["survivor"]) for r in rows] == expected
    assert len({r["cluster_id"] for r in rows}) == 5
    counts = json.loads((cli_run / "manifest.json").read_text())["counts"]["dedup"]
    assert (counts["exact_removed"], counts["near_removed"], counts["clusters"], counts["removed"]) == (3, 3, 5, 6)
    assert counts["example_clusters"][0] == rows[0]["cluster_id"]  # the largest cluster: t003 and its two copies


def test_shards_hold_every_kept_trajectory_and_no_removed_one(cli_run):
    in_shards = {t for p in (cli_run / "shards").rglob("*.parquet") for t in pq.read_table(p, columns=["traj_id"])
                 .column("traj_id").to_pylist()}
    removed = {r["traj_id"] for r in _removed(cli_run)}
    kept = {f"t{i:03d}" for i in range(40)}
    assert in_shards == kept and not (in_shards & removed)


def _in_memory_reference(out: Path, cfg: dict) -> list[tuple[str, str, str]]:
    """All pairs, no LSH: exact keys, estimated Jaccard ≥ threshold, components, the survivor rule."""
    rows = [r for p in sorted((out / "trajectories").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    signer = dedup.Signer.from_config(cfg["dedup"])
    ids = [r["traj_id"] for r in rows]
    contents = [dedup.exact_content(r["domain"], r["system"], r["turns"]) for r in rows]
    keys = [dedup.exact_key(c) for c in contents]
    sigs = np.stack([signer.signature(dedup.words_of(dedup.turn_texts(r["turns"]))) for r in rows])
    sim = dedup.pairwise_jaccard(sigs)
    every, exact = dedup.UnionFind(), dedup.UnionFind()
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            if keys[i] == keys[j]:
                exact.union(ids[i], ids[j])
                every.union(ids[i], ids[j])
            if sim[i, j] >= cfg["dedup"]["threshold"]:
                every.union(ids[i], ids[j])
    size = {i: (len(r["turns"]), len(c)) for i, r, c in zip(ids, rows, contents)}
    out_rows = []
    for members in every.groups():
        ranked = sorted(members, key=lambda n: dedup.survivor_rank(n, *size[n]))
        firsts = {}
        for n in ranked:
            firsts.setdefault(exact.find(n), n)
        out_rows += [(n, "exact_duplicate" if firsts[exact.find(n)] != n else "near_duplicate", ranked[0])
                     for n in ranked[1:]]
    return sorted(out_rows)


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_ADDRESS", raising=False)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
        yield
        ray.shutdown()


def test_map_reduce_equals_in_memory_all_pairs_and_ray_equals_local(corpus, tmp_path, ray_session):
    from pipeline.ray_executor import RayExecutor

    local_cfg = _config(corpus, tmp_path / "local", buckets=7)
    run_pipeline(local_cfg, echo=lambda m: None, executor=LocalExecutor())
    local = [(r["traj_id"], r["reason"], r["survivor"]) for r in _removed(tmp_path / "local")]
    assert local == _in_memory_reference(tmp_path / "local", local_cfg)
    assert len(local) == 6

    ray_cfg = _config(corpus, tmp_path / "ray", buckets=1)
    executor = RayExecutor()
    run_pipeline(ray_cfg, echo=lambda m: None, executor=executor)
    # Same rows (cluster ids and survivors included) whatever the executor, workers and bucket count.
    assert _removed(tmp_path / "ray") == _removed(tmp_path / "local")


def test_rerun_resumes_and_gives_identical_output(corpus, tmp_path):
    cfg = _config(corpus, tmp_path / "out", buckets=3)
    run_pipeline(cfg, echo=lambda m: None, executor=LocalExecutor())
    first = (tmp_path / "out" / "dedup" / "removed.parquet").read_bytes()
    run_pipeline(cfg, echo=lambda m: None, executor=LocalExecutor())
    timings = json.loads((tmp_path / "out" / "_timings.json").read_text())
    assert timings["dedup-map"]["ran"] == 0 and timings["dedup-reduce"]["ran"] == 0
    assert (tmp_path / "out" / "dedup" / "removed.parquet").read_bytes() == first


def test_reduce_outputs_of_another_format_are_made_again(corpus, tmp_path, monkeypatch):
    """A run resumed over reduce outputs an earlier version wrote (its tag in the reduce spec differs) runs the
    reduce again instead of mixing two formats of evidence; the map's outputs are kept."""
    from pipeline import dedup_stage

    cfg = _config(corpus, tmp_path / "out", buckets=3)
    monkeypatch.setattr(dedup_stage, "REDUCE_OUTPUT", "an earlier format")
    run_pipeline(cfg, echo=lambda m: None, executor=LocalExecutor())
    monkeypatch.undo()
    run_pipeline(cfg, echo=lambda m: None, executor=LocalExecutor())
    timings = json.loads((tmp_path / "out" / "_timings.json").read_text())
    assert timings["dedup-map"]["ran"] == 0
    assert timings["dedup-reduce"]["ran"] == timings["dedup-reduce"]["tasks"] >= 1


def test_map_outputs_of_another_format_are_made_again(corpus, tmp_path, monkeypatch):
    """A run resumed over map outputs an earlier version wrote (Parquet bucket files; its tag in the map spec
    differs) maps again, so the reduce reads only files of the format it reads; the outputs are the same."""
    from pipeline import dedup_map

    cfg = _config(corpus, tmp_path / "out", buckets=3)
    monkeypatch.setattr(dedup_map, "BUCKET_FILES", "an earlier format")
    run_pipeline(cfg, echo=lambda m: None, executor=LocalExecutor())
    first = (tmp_path / "out" / "dedup" / "removed.parquet").read_bytes()
    monkeypatch.undo()
    run_pipeline(cfg, echo=lambda m: None, executor=LocalExecutor())
    timings = json.loads((tmp_path / "out" / "_timings.json").read_text())
    assert timings["dedup-map"]["ran"] == timings["dedup-map"]["tasks"] >= 1
    assert timings["dedup-reduce"]["ran"] == timings["dedup-reduce"]["tasks"]
    assert (tmp_path / "out" / "dedup" / "removed.parquet").read_bytes() == first


def test_reduce_tasks_take_consecutive_buckets_up_to_the_byte_budget():
    assert reduce_groups({0: 50, 1: 50, 2: 50, 3: 10}, budget=100) == [[0, 1], [2, 3]]
    assert reduce_groups({4: 300, 1: 20, 9: 90}, budget=100) == [[1], [4], [9]]  # a large bucket alone, in order
    assert reduce_groups({}, budget=100) == []


def test_one_bucket_per_reduce_task_or_all_in_one_give_the_same_removals(corpus, tmp_path, monkeypatch):
    from pipeline import dedup_stage

    cfg = _config(corpus, tmp_path / "together", buckets=5)
    run_pipeline(cfg, echo=lambda m: None, executor=LocalExecutor())
    monkeypatch.setattr(dedup_stage, "BYTES_PER_BUCKET", 1)
    cfg = _config(corpus, tmp_path / "apart", buckets=5)
    run_pipeline(cfg, echo=lambda m: None, executor=LocalExecutor())
    tasks = {name: json.loads((tmp_path / name / "_timings.json").read_text())["dedup-reduce"]["tasks"]
             for name in ("together", "apart")}
    assert tasks == {"together": 1, "apart": 5}
    assert (tmp_path / "apart" / "dedup" / "removed.parquet").read_bytes() == \
        (tmp_path / "together" / "dedup" / "removed.parquet").read_bytes()
    assert len(_removed(tmp_path / "apart")) == 6


class _RecordingExecutor(LocalExecutor):
    """Runs in process and keeps the JSON of every task and result that crosses the driver."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def map(self, fn, tasks, progress, threads=1, small=False):
        results = super().map(fn, tasks, progress, threads=threads, small=small)
        self.seen += [json.dumps(x, default=str) for x in [*tasks, *results]]
        return results


def test_removed_ids_never_cross_the_driver_and_a_lost_removed_file_is_rebuilt(corpus, tmp_path):
    cfg = _config(corpus, tmp_path / "out", buckets=3)
    executor = _RecordingExecutor()
    run_pipeline(cfg, echo=lambda m: None, executor=executor)
    removed_file = tmp_path / "out" / "dedup" / "removed.parquet"
    removed = [r["traj_id"] for r in _removed(tmp_path / "out")]
    assert sorted(removed) == sorted([c for cs in EXACT_COPIES.values() for c in cs] + list(NEAR_COPIES.values()))
    # No task payload or result names a removed trajectory: the clusters task writes removed.parquet and
    # the sample tasks read it themselves.
    leaked = [t for t in removed if any(f'"{t}"' in s for s in executor.seen)]
    assert leaked == []
    timings = json.loads((tmp_path / "out" / "_timings.json").read_text())
    assert timings["dedup-clusters"]["ran"] == 1
    first = removed_file.read_bytes()
    removed_file.unlink()
    run_pipeline(cfg, echo=lambda m: None, executor=LocalExecutor())
    assert removed_file.read_bytes() == first


def test_disabled_dedup_removes_nothing(corpus, tmp_path):
    cfg = _config(corpus, tmp_path / "out")
    cfg["dedup"].update(exact=False, near=False)
    manifest = run_pipeline(cfg, echo=lambda m: None, executor=LocalExecutor())
    assert _removed(tmp_path / "out") == []
    assert manifest["counts"]["dedup"]["clusters"] == 0
    assert "dedup-map" not in json.loads((tmp_path / "out" / "_timings.json").read_text())


def _edges(*rows: tuple) -> pa.Table:
    cols = list(zip(*rows))
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, EDGE_SCHEMA)], schema=EDGE_SCHEMA)


SETTINGS = {"ngram_overlap": 0.5, "ngram_min_shared": 10, "near_specific_share": 0.2}


def test_removed_rows_from_edges():
    edges = _edges(
        ("exact", "a", "b", 1.0, 3, 100, 3, 100, 0),
        ("near", "b", "c", 0.9, 3, 100, 4, 90, 0),  # c has more turns: the survivor of {a, b, c}
        ("near", "d", "e", 0.85, 2, 50, 2, 60, 0),
        # ref:x#1 has 40 specific n-grams (two buckets); e holds 24 of them (60%), g holds 12 (30%).
        ("decontam_total", "ref:x#1", "", 0.0, 0, 0, 0, 0, 30),
        ("decontam_total", "ref:x#1", "", 0.0, 0, 0, 0, 0, 10),
        ("decontam_shared", "e", "ref:x#1", 0.0, 0, 0, 0, 0, 20),
        ("decontam_shared", "e", "ref:x#1", 0.0, 0, 0, 0, 0, 4),
        ("decontam_shared", "g", "ref:x#1", 0.0, 0, 0, 0, 0, 12),
        # f near-copies ref:x#2, which has too few specific n-grams to check: the near copy decides.
        ("decontam_total", "ref:x#2", "", 0.0, 0, 0, 0, 0, 3),
        ("decontam_near", "f", "ref:x#2", 0.9, 0, 0, 0, 0, 0),
        ("decontam_shared", "f", "ref:x#1", 0.0, 0, 0, 0, 0, 40),  # near wins over n-gram for the reason
        # h near-copies ref:x#1 (same screens) but holds none of its task-specific n-grams: it stays.
        ("decontam_near", "h", "ref:x#1", 0.93, 0, 0, 0, 0, 0),
    )
    rows, counts = removed_rows(edges, SETTINGS)
    assert [(r["traj_id"], r["reason"], r["matched"], r["overlap"]) for r in rows] == [
        ("a", "near_duplicate", None, None), ("b", "exact_duplicate", None, None),
        ("e", "decontaminated_ngram", "ref:x#1", 0.6), ("f", "decontaminated_near", "ref:x#2", 0.9)]
    assert [r["survivor"] for r in rows] == ["c", "c", "ref:x#1", "ref:x#2"]
    # d's only partner was decontaminated, so d stands alone and stays.
    assert counts == {"exact_removed": 1, "near_removed": 1, "decontaminated_near": 1, "decontaminated_ngram": 1,
                      "clusters": 1, "example_clusters": [dedup.cluster_id(["a", "b", "c"])]}
    # Fewer shared n-grams than ngram_min_shared never count, whatever the share.
    rows, _ = removed_rows(edges, {**SETTINGS, "ngram_min_shared": 25})
    assert "e" not in {r["traj_id"] for r in rows}


@pytest.mark.parametrize(("key", "value", "message"), [("threshold", 1.5, "dedup.threshold"), ("bands", 200, "dedup.bands"),
                                                       ("shingle", 0, "dedup.shingle")])
def test_bad_dedup_settings_are_config_errors(key, value, message):
    with pytest.raises(ConfigError, match=message):  # the config schema, or the cross-key check of the stage
        dedup_settings(resolve({"dedup": {key: value}}), Stats())


def test_reduce_buckets_are_sized_by_bytes_including_signatures():
    cfg = resolve({"pools": {"ratios": {"cpt": 0.9, "sft": 0.1}}}, {"run": {"input": ["x"], "out": "/tmp/x"}})
    stats = Stats()
    stats.add("trajectories.kept", 300_000)
    stats.add("chars.kept", 2_000_000_000)
    settings = dedup_settings(cfg, stats)
    assert not settings["decontam"]
    # Each trajectory has `bands` band rows of a 128 x 4-byte signature each: ~1.4 GB here in all.
    signature_bytes = 300_000 * settings["bands"] * 128 * 4
    assert signature_bytes / settings["buckets"] <= 128 << 20
