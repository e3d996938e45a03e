"""Decontamination: evaluation records planted in the training input leave every training pool, counted."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.stats import Stats
from stages.decontam import (
    ROLE_EVAL,
    ROLE_TRAIN,
    exact_group_edges,
    iter_references,
    ngram_group_edges,
    reference_units,
    role_of,
)
from stages.pools import pool_of

RATIOS = {"cpt": 0.6, "sft": 0.15, "rl": 0.1, "eval": 0.15}
POOLS = {"ratios": RATIOS, "seed": 0}


def test_ngram_group_edges():
    assert ngram_group_edges(["t2", "e1", "t1", "r9"], [0, 1, 0, 2]) == [
        ("decontam_ngram", "t1", "e1", 1.0), ("decontam_ngram", "t2", "e1", 1.0)]
    assert ngram_group_edges(["t1", "t2"], [0, 0]) == []  # no evaluation record holds it
    assert ngram_group_edges(["e1", "e2"], [1, 2]) == []  # eval is never removed
    many = [f"t{i}" for i in range(21)]
    assert ngram_group_edges([*many, "e"], [0] * 21 + [1]) == []  # boilerplate: in more than 20 training runs
    assert len(ngram_group_edges([*many, "e"], [0] * 21 + [1], max_docs=21)) == 21


def test_exact_group_edges():
    edges = exact_group_edges(["t3", "t1", "e2", "e1", "t2"], [0, 0, 1, 1, 0], exact=True)
    assert sorted(edges) == [
        ("decontam_near", "t1", "e1", 1.0), ("decontam_near", "t2", "e1", 1.0), ("decontam_near", "t3", "e1", 1.0),
        ("exact", "e1", "e2", 1.0), ("exact", "t1", "t2", 1.0), ("exact", "t1", "t3", 1.0)]
    assert exact_group_edges(["t1", "t2"], [0, 0], exact=False) == []


def test_role_follows_the_pool_of_the_split_key():
    keys = [f"task-{i}" for i in range(200)]
    roles = [role_of(k, POOLS) for k in keys]
    assert roles == [ROLE_EVAL if pool_of(k, RATIOS, 0) == "eval" else ROLE_TRAIN for k in keys]
    assert 10 < roles.count(ROLE_EVAL) < 50


def test_agentworldbench_rows_are_rebuilt_into_reference_trajectories(fixtures_dir):
    units = reference_units([str(fixtures_dir / "agentworldbench")])
    assert [Path(u).name for u in units] == ["bad.jsonl", "eval.jsonl"]
    stats = Stats()
    refs = list(iter_references(units[1], stats))
    # Six rows: two terminal rows of one run merge, the rest are one trajectory each.
    assert sorted(len(t["turns"]) for _, t in refs) == [2, 2, 2, 3]
    assert all(rid.startswith(f"ref:{units[1]}#") for rid, _ in refs)
    stats = Stats()
    assert len(list(iter_references(units[0], stats))) == 1
    assert stats.to_dict() == {"decontam.references": 1, "decontam.references_invalid": 7}


# --- end to end -----------------------------------------------------------------------------------------------


def _words(rnd: random.Random, n: int) -> str:
    return " ".join(f"{rnd.choice('bdfgklmnprstvz')}{rnd.choice('aeiou')}{rnd.randrange(10**5):05d}" for _ in range(n))


def _turn_prompt(n: int, action: str) -> str:
    return f"### Turn {n}\n**Action:**\n```json\n{action}\n```"


INSTRUCTION = ("\n\nThink about what the environment will show, then write the observation inside "
               "<predicted_observation></predicted_observation>.")


def _eval_row(row_id: str, turns: list[tuple[str, str]]) -> dict:
    """The AgentWorldBench row that evaluates the last turn (its history holds the others)."""
    prompt = []
    for n, (action, obs) in enumerate(turns[:-1], 1):
        prompt += [{"role": "user", "content": _turn_prompt(n, action)},
                   {"role": "assistant", "content": f"**Environment Observation:**\n{obs}"}]
    return {"task": "terminal", "id": row_id, "prompt": prompt,
            "response": [f"<predicted_observation>\n{turns[-1][1]}\n</predicted_observation>"],
            "current_prompt": _turn_prompt(len(turns), turns[-1][0]) + INSTRUCTION,
            "system_str": "You simulate a Linux terminal.", "turn_idx": len(turns), "total_turns": len(turns)}


def _edited(turns: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The turns with two words of the first observation replaced (about 1% of the words)."""
    words = turns[0][1].split(" ")
    words[5] = words[40] = "edited"
    return [(turns[0][0], " ".join(words)), *turns[1:]]


def _traj(tid: str, split_key: str, turns: list[tuple[str, str]]) -> dict:
    return {"traj_id": tid, "domain": "terminal", "split_key": split_key,
            "system": {"task_description": "Work in the shell.", "action_space": "keystrokes"},
            "turns": [{"action": a, "observation": o} for a, o in turns]}


def _keys_in(pool: str, count: int, prefix: str) -> list[str]:
    keys = (f"{prefix}-{i}" for i in range(10_000))
    return [k for k in keys if pool_of(k, RATIOS, 0) == pool][:count]


@pytest.fixture(scope="module")
def decontaminated(tmp_path_factory) -> tuple[Path, dict]:
    rnd = random.Random(3)
    tmp = tmp_path_factory.mktemp("decontam")
    evals = {f"bench-{i}": [(json.dumps({"cmd": f"step {i}-{t}"}), _words(rnd, 90)) for t in range(3)] for i in range(3)}
    (tmp / "bench.jsonl").write_text("".join(json.dumps(_eval_row(k, v)) + "\n" for k, v in evals.items()))
    train_keys = iter(_keys_in("cpt", 20, "k") + _keys_in("sft", 6, "k") + _keys_in("rl", 6, "k"))
    trajs = [_traj(f"clean-{i:02d}", next(train_keys),
                   [(json.dumps({"cmd": f"ls {i}-{t}"}), _words(rnd, 60)) for t in range(3)]) for i in range(24)]
    planted = {}
    # A slightly edited copy of benchmark trajectory 0 (near duplicate), in each training pool.
    for pool, key in zip(("cpt", "sft", "rl"), (_keys_in(p, 1, "near")[0] for p in ("cpt", "sft", "rl"))):
        tid = f"planted-near-{pool}"
        trajs.append(_traj(tid, key, _edited(evals["bench-0"])))
        planted[tid] = "decontaminated_near"
    # Other work that quotes 20 words of benchmark 1's reference observation: a shared 13-gram, not a near copy.
    quote = " ".join(evals["bench-1"][2][1].split(" ")[30:50])
    turns = [(json.dumps({"cmd": "cat notes"}), _words(rnd, 50) + " " + quote)] + \
            [(json.dumps({"cmd": f"x {t}"}), _words(rnd, 60)) for t in range(2)]
    trajs.append(_traj("planted-ngram", next(train_keys), turns))
    planted["planted-ngram"] = "decontaminated_ngram"
    # The run's own eval pool is protected too: a training copy of an eval-pool trajectory goes, the original stays.
    own = [(json.dumps({"cmd": f"own {t}"}), _words(rnd, 80)) for t in range(3)]
    trajs.append(_traj("own-eval", _keys_in("eval", 1, "own")[0], own))
    trajs.append(_traj("planted-own", next(train_keys), _edited(own)))
    planted["planted-own"] = "decontaminated_near"
    (tmp / "train.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trajs))
    (tmp / "cfg.toml").write_text(
        f'[dedup]\ndecontaminate = ["{tmp / "bench.jsonl"}"]\n[pools.ratios]\n'
        + "".join(f"{k} = {v}\n" for k, v in RATIOS.items()))
    out = tmp / "out"
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--executor", "local", "--config",
                           str(tmp / "cfg.toml"), "-i", str(tmp / "train.jsonl"), "-o", str(out), "--progress", "off"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, planted


def test_planted_eval_records_are_removed_with_their_reason(decontaminated):
    out, planted = decontaminated
    rows = pq.read_table(out / "dedup" / "removed.parquet").to_pylist()
    assert {r["traj_id"]: r["reason"] for r in rows} == planted
    by_id = {r["traj_id"]: r for r in rows}
    assert by_id["planted-own"]["survivor"] == "own-eval"
    # The witness of a removal is the evaluation record it matched: here the rebuilt benchmark trajectories.
    bench = {json.loads(t["meta"])["row_ids"][0]: rid for rid, t in iter_references(str(out.parent / "bench.jsonl"),
                                                                                    Stats())}
    assert by_id["planted-ngram"]["survivor"] == bench["bench-1"]
    assert {by_id[f"planted-near-{p}"]["survivor"] for p in ("cpt", "sft", "rl")} == {bench["bench-0"]}


def test_no_training_pool_holds_them_and_the_eval_original_stays(decontaminated):
    out, planted = decontaminated
    pools: dict[str, set[str]] = {}
    for p in (out / "shards").rglob("*.parquet"):
        pools.setdefault(p.parent.name, set()).update(pq.read_table(p, columns=["traj_id"]).column("traj_id").to_pylist())
    for pool in ("cpt", "sft", "rl"):
        assert not (pools.get(pool, set()) & set(planted)), pool
    assert "own-eval" in pools["eval"]
    assert {f"clean-{i:02d}" for i in range(24)} <= set().union(*pools.values())


def test_manifest_counts_decontamination(decontaminated):
    out, _ = decontaminated
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]["dedup"]
    assert (counts["decontaminated_near"], counts["decontaminated_ngram"]) == (4, 1)
    assert (counts["exact_removed"], counts["near_removed"]) == (0, 0)
    assert manifest["dedup"]["references"] == 3


def test_another_runs_eval_pool_is_a_reference(decontaminated):
    out, _ = decontaminated
    stats = Stats()
    refs = dict(iter_references(str(out), stats))
    trajs = [r for p in (out / "trajectories").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    expected = {f"ref:{out}#{t['traj_id']}" for t in trajs if pool_of(t["split_key"], RATIOS, 0) == "eval"}
    assert set(refs) == expected and f"ref:{out}#own-eval" in expected
    assert stats.get("decontam.references") == len(expected)
