"""Sample ids are unique in every run: trajectories sharing a traj_id (in one file or across files)
are told apart by their occurrence, and a run without shared ids keeps the plain ids."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.demo import DOMAINS, write_demo
from stages.pools import sample_id
from tests.helpers import lwm_in_process


def lwm(*args: str) -> subprocess.CompletedProcess:
    proc = lwm_in_process(*args)  # the run's ids are checked, not its process
    assert proc.returncode == 0, proc.stderr
    return proc


def shard_rows(out: Path) -> list[dict]:
    rows = []
    for p in sorted((out / "shards").rglob("*.parquet")):
        rows += pq.read_table(p, columns=["sample_id", "traj_id", "pool", "turn_idx", "template"]).to_pylist()
    return rows


def traj(traj_id: str, i: int, turns: int = 3) -> dict:
    return {"traj_id": traj_id, "domain": "terminal", "split_key": f"task-{i % 7}",
            "system": {"task_description": f"task {i}", "action_space": "keys"},
            "turns": [{"action": f'[{{"keystrokes": "echo {i}-{j}\\n"}}]', "observation": f"out {i} {j} " * (i % 5 + 1)}
                      for j in range(turns)]}


def test_shared_traj_ids_give_unique_sample_ids(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    # 40 valid records sharing one id, plus ids repeated across two files
    (src / "same.jsonl").write_text("".join(json.dumps(traj("same", i)) + "\n" for i in range(40)))
    (src / "a.jsonl").write_text("".join(json.dumps(traj(f"t{i}", 100 + i)) + "\n" for i in range(10)))
    (src / "b.jsonl").write_text("".join(json.dumps(traj(f"t{i}", 200 + i)) + "\n" for i in range(10)))
    (src / "u.jsonl").write_text("".join(json.dumps(traj(f"solo{i}", 300 + i)) + "\n" for i in range(5)))
    out = tmp_path / "out"
    lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--format", "lwm-jsonl", "--sft-turns", "all")
    rows = shard_rows(out)
    ids = [r["sample_id"] for r in rows]
    assert len(ids) == len(set(ids))
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(rows) == sum(v for k, v in manifest["counts"]["samples"].items() if k in ("cpt", "sft", "rl", "eval"))
    # all 40 trajectories sharing "same" reached the shards: 40 cpt rows, or turn rows of 40 distinct ids
    same = [r for r in rows if r["traj_id"] == "same"]
    assert len({(r["pool"], r["turn_idx"], r["template"]) for r in same}) < len(same)
    assert len(same) >= 40
    # a traj_id nobody else carries keeps the plain id (runs without collisions are unchanged)
    solo = [r for r in rows if r["traj_id"].startswith("solo")]
    assert solo
    for r in solo:
        assert r["sample_id"] == sample_id(r["traj_id"], r["pool"], r["turn_idx"], r["template"])


@pytest.mark.parametrize("executor", ["local"])
def test_sample_ids_unique_over_every_demo_corpus(tmp_path, executor):
    src = tmp_path / "demo"
    for domain in DOMAINS:
        write_demo(domain, str(src / domain), seed=5, n=24)
    out = tmp_path / "out"
    lwm("run", "--executor", executor, "-i", str(src), "-o", str(out), "--sft-turns", "all")
    ids = [r["sample_id"] for r in shard_rows(out)]
    assert len(ids) > 100 and len(ids) == len(set(ids))


def removed_rows(out: Path) -> list[dict]:
    return pq.read_table(out / "dedup" / "removed.parquet",
                         columns=["traj_id", "occurrence", "reason", "survivor"]).to_pylist()


def test_a_file_given_twice_is_deduplicated_to_one_copy(tmp_path):
    """The same records under two folders share their ids: the second copy of each is an exact duplicate of
    the first (dedup's nodes are trajectories, not ids), and the shards are those of one copy."""
    one, both = tmp_path / "one", tmp_path / "both"
    (one / "x").mkdir(parents=True)
    records = "".join(json.dumps(traj(f"t{i}", i, turns=3 + i % 4)) + "\n" for i in range(12))
    (one / "x" / "logs.jsonl").write_text(records)
    for folder in ("x", "backup"):
        (both / folder).mkdir(parents=True)
        (both / folder / "logs.jsonl").write_text(records)
    lwm("run", "--executor", "local", "-i", str(one), "-o", str(tmp_path / "o1"), "--format", "lwm-jsonl")
    lwm("run", "--executor", "local", "-i", str(both), "-o", str(tmp_path / "o2"), "--format", "lwm-jsonl")
    first = removed_rows(tmp_path / "o1")
    removed = removed_rows(tmp_path / "o2")
    copies = [r for r in removed if r["occurrence"] == 2]
    assert sorted(r["traj_id"] for r in copies) == sorted(f"t{i}" for i in range(12)
                                                          if f"t{i}" not in {r["traj_id"] for r in first})
    assert all(r["reason"] == "exact_duplicate" and r["survivor"] == r["traj_id"] for r in copies)
    assert [r for r in removed if r["occurrence"] == 1] == [{**r, "occurrence": 1} for r in first]

    def shard_bytes(out: Path) -> dict[str, bytes]:
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "shards").rglob("*.parquet"))}

    assert shard_bytes(tmp_path / "o2") == shard_bytes(tmp_path / "o1")


def test_only_the_duplicated_trajectory_of_a_shared_id_is_removed(tmp_path):
    """Two different trajectories carrying one id, the second a copy of a third trajectory: the copy is removed
    and the first, which copies nothing, reaches the shards (a removal names its occurrence, not the id)."""
    src = tmp_path / "in"
    src.mkdir()
    original, other = traj("orig", 1, turns=4), traj("shared", 2, turns=4)
    copy = {**original, "traj_id": "shared"}
    (src / "a.jsonl").write_text(json.dumps(other) + "\n" + json.dumps(original) + "\n")
    (src / "b.jsonl").write_text(json.dumps(copy) + "\n")
    out = tmp_path / "out"
    lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--format", "lwm-jsonl")
    (removed,) = removed_rows(out)
    assert removed["traj_id"] == "shared" and removed["occurrence"] == 2
    assert removed["reason"] == "exact_duplicate" and removed["survivor"] == "orig"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["dedup"]["exact_removed"] == 1
    # the survivor and the other trajectory carrying "shared" reach the pools, the copy does not
    assert manifest["counts"]["pools"]["trajectories_in_shards"] == 2
    assert {r["traj_id"] for r in shard_rows(out)} == {"orig", "shared"}


def test_occurrence_keys_read_back_only_as_sample_key_writes_them():
    from stages.sample_rows import key_parts, sample_key

    for traj_id in ("t", "a\x1fb", "x#2"):
        for n in (1, 2, 10, 123):
            assert key_parts(sample_key(traj_id, n)) == (traj_id, n)
    for odd in ("a\x1f#1", "a\x1f#0", "a\x1f#02", "a\x1f#", "a\x1f#x"):  # ids a log may carry: plain ids
        assert key_parts(odd) == (odd, 1)
