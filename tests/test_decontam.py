"""Decontamination: evaluation records planted in the training input leave every training pool, counted."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import dedup_map
from pipeline.config import load_config_file, resolve
from pipeline.dedup_map import FILL_NOTICE
from pipeline.dedup_stage import EVIDENCE_BUCKETS_PER_PART, evidence_parts
from pipeline.outputs import out_fs, read_ipc_tables
from schemas.stats import Stats
from stages.decontam import (
    ROLE_EVAL,
    ROLE_TRAIN,
    common_limit,
    exact_group_edges,
    iter_references,
    near_is_contamination,
    ngram_group_pairs,
    ngram_verdicts,
    reference_units,
    role_of,
)
from stages.dedup_graph import BUCKET_FILE_SCHEMA, KIND_NGRAM, gram_keys
from stages.dedup_removals import KIND_TOTAL, evidence_key
from stages.gram_filter import GramFilter
from stages.pools import pool_of
from tests.helpers import lwm_in_process

RATIOS = {"cpt": 0.6, "sft": 0.15, "rl": 0.1, "eval": 0.15}
POOLS = {"ratios": RATIOS, "seed": 0}


def test_ngram_group_pairs():
    assert ngram_group_pairs(["t2", "e1", "t1", "r9"], [0, 1, 0, 2]) == [
        ("t1", "e1"), ("t1", "r9"), ("t2", "e1"), ("t2", "r9")]
    assert ngram_group_pairs(["t1", "t2"], [0, 0]) == []  # no evaluation record holds it
    assert ngram_group_pairs(["e1", "e2"], [1, 2]) == []  # eval is never removed


def test_common_limit_is_a_share_of_all_trajectories_with_a_floor():
    assert common_limit(55, 0.01, 5) == 5  # a small corpus: the floor
    assert common_limit(100_000, 0.01, 5) == 1000
    assert common_limit(1679, 0.01, 5) == 16


def test_ngram_verdicts_take_the_best_share():
    totals = {"e1": 100, "e2": 20, "e3": 8}
    shared = {("t1", "e1"): 60, ("t1", "e2"): 15, ("t2", "e1"): 49, ("t3", "e3"): 8, ("t4", "e2"): 10,
              ("t4", "e1"): 50}
    assert ngram_verdicts(totals, shared, 0.5, 10) == {
        "t1": (0.75, "e2", 15),  # 75% of e2 beats 60% of e1
        "t4": (0.5, "e1", 50),  # a tie on the share goes to the smaller id
    }  # t2: 49% is below the threshold; t3: all of e3, but only 8 n-grams (fewer than 10)


def test_a_near_copy_must_also_share_task_specific_content():
    settings = {"ngram_min_shared": 10, "near_specific_share": 0.2}
    assert near_is_contamination(30, 15, settings)
    assert not near_is_contamination(30, 0, settings)  # same screens, another task
    assert near_is_contamination(9, 0, settings)  # nothing task-specific to check: the near copy decides


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


BANNER = ("harness v2.1 ready: commands run in a fresh bash shell with a sixty second timeout per command "
          "and every output is truncated at ten thousand characters before it is shown to the agent")


def _eval_row(row_id: str, turns: list[tuple[str, str]]) -> dict:
    """The official AgentWorldBench row that evaluates the last turn (every turn's prompt and response)."""
    prompts = [_turn_prompt(n, action) for n, (action, _) in enumerate(turns, 1)]
    prompts[-1] += INSTRUCTION
    return {"task": "terminal", "id": row_id, "prompt": prompts,
            "response": [f"**Environment Observation:**\n{obs}" for _, obs in turns],
            "current_prompt": _turn_prompt(len(turns), turns[-1][0]),
            "system_str": "You simulate a Linux terminal.", "turn_idx": len(turns), "total_turns": len(turns)}


def _edited(turns: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The turns with two words of the first observation replaced (about 1% of the words)."""
    words = turns[0][1].split(" ")
    words[5] = words[40] = "edited"
    return [(turns[0][0], " ".join(words)), *turns[1:]]


def _lightly_edited(rnd: random.Random, turns: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A copy with three words changed in each of the last two observations, inside longer work (two more
    turns of other text): too different for a near copy, most of the record's content is there."""
    out = [turns[0]]
    for action, obs in turns[1:]:
        words = obs.split(" ")
        for i in (20, 50, 80):
            words[i] = "changed"
        out.append((action, " ".join(words)))
    return out + [(json.dumps({"cmd": f"more {t}"}), f"{BANNER} {_words(rnd, 250)}") for t in range(2)]


def _traj(tid: str, split_key: str, turns: list[tuple[str, str]], task: str = "Work in the shell.") -> dict:
    return {"traj_id": tid, "domain": "terminal", "split_key": split_key,
            "system": {"task_description": task, "action_space": "keystrokes"},
            "turns": [{"action": a, "observation": o} for a, o in turns]}


def _keys_in(pool: str, count: int, prefix: str) -> list[str]:
    keys = (f"{prefix}-{i}" for i in range(10_000))
    return [k for k in keys if pool_of(k, RATIOS, 0) == pool][:count]


def _task_turns(rnd: random.Random, name: str, words: int) -> list[tuple[str, str]]:
    """Three turns of one task: the harness banner (shared by every trajectory) and task-specific text."""
    return [(json.dumps({"cmd": f"{name} {t}"}), f"{BANNER} {_words(rnd, words)}") for t in range(3)]


@pytest.fixture(scope="module")
def decontaminated(tmp_path_factory) -> tuple[Path, dict]:
    rnd = random.Random(3)
    tmp = tmp_path_factory.mktemp("decontam")
    evals = {f"bench-{i}": _task_turns(rnd, f"step {i}", 90) for i in range(3)}
    (tmp / "bench.jsonl").write_text("".join(json.dumps(_eval_row(k, v)) + "\n" for k, v in evals.items()))
    train_keys = iter(_keys_in("cpt", 20, "k") + _keys_in("sft", 6, "k") + _keys_in("rl", 6, "k"))
    # Distinct tasks of one harness: every observation starts with the same 30-word banner.
    trajs = [_traj(f"clean-{i:02d}", next(train_keys), _task_turns(rnd, f"ls {i}", 60)) for i in range(24)]
    planted = {}
    # A slightly edited copy of benchmark trajectory 0 (near duplicate), in each training pool.
    for pool, key in zip(("cpt", "sft", "rl"), (_keys_in(p, 1, "near")[0] for p in ("cpt", "sft", "rl"))):
        tid = f"planted-near-{pool}"
        trajs.append(_traj(tid, key, _edited(evals["bench-0"])))
        planted[tid] = "decontaminated_near"
    # A rephrased task with a few words changed in some observations, inside longer work.
    trajs.append(_traj("planted-ngram", next(train_keys), _lightly_edited(rnd, evals["bench-1"]),
                       task="Please do the shell work described."))
    planted["planted-ngram"] = "decontaminated_ngram"
    # Other work that quotes 20 words of benchmark 1's reference observation: a few shared 13-grams, kept.
    quote = " ".join(evals["bench-1"][2][1].split(" ")[40:60])
    turns = [(json.dumps({"cmd": "cat notes"}), f"{BANNER} {_words(rnd, 50)} {quote}")] + \
            [(json.dumps({"cmd": f"x {t}"}), f"{BANNER} {_words(rnd, 60)}") for t in range(2)]
    trajs.append(_traj("quotes-bench", next(train_keys), turns))
    # The run's own eval pool is protected too: training copies of an eval-pool trajectory go, the original stays.
    own = [(json.dumps({"cmd": f"own {t}"}), f"{BANNER} {_words(rnd, 80)}") for t in range(3)]
    trajs.append(_traj("own-eval", _keys_in("eval", 1, "own")[0], own))
    trajs.append(_traj("planted-own", next(train_keys), _edited(own)))
    planted["planted-own"] = "decontaminated_near"
    trajs.append(_traj("planted-own-ngram", next(train_keys), _lightly_edited(rnd, own), task="Shell work, reworded."))
    planted["planted-own-ngram"] = "decontaminated_ngram"
    (tmp / "train.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trajs))
    (tmp / "cfg.toml").write_text(
        f'[dedup]\ndecontaminate = ["{tmp / "bench.jsonl"}"]\n[pools.ratios]\n'
        + "".join(f"{k} = {v}\n" for k, v in RATIOS.items()))
    out = tmp / "out"
    proc = lwm_in_process("run", "--executor", "local", "--config", str(tmp / "cfg.toml"), "-i", str(tmp / "train.jsonl"),
                          "-o", str(out), "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    return out, planted, proc.stderr


def test_planted_eval_records_are_removed_with_their_reason(decontaminated):
    out, planted, _ = decontaminated
    rows = pq.read_table(out / "dedup" / "removed.parquet").to_pylist()
    assert {r["traj_id"]: r["reason"] for r in rows} == planted
    by_id = {r["traj_id"]: r for r in rows}
    assert by_id["planted-own"]["matched"] == by_id["planted-own-ngram"]["matched"] == "own-eval"
    # The evaluation record a removal matched is named: here the benchmark rows they were rebuilt from.
    bench = str(out.parent / "bench.jsonl")
    assert by_id["planted-ngram"]["matched"] == f"ref:{bench}#line 2"
    assert {by_id[f"planted-near-{p}"]["matched"] for p in ("cpt", "sft", "rl")} == {f"ref:{bench}#line 1"}
    # The overlap figure: the Jaccard estimate of a near copy, the share of the record's specific n-grams
    # found (two of its three observations lost 3 words each: at most 2 x 3 x 13 of ~270 n-grams).
    assert all(by_id[f"planted-near-{p}"]["overlap"] > 0.9 for p in ("cpt", "sft", "rl"))
    assert 0.6 < by_id["planted-ngram"]["overlap"] < 0.95
    assert 0.6 < by_id["planted-own-ngram"]["overlap"] < 0.95


def test_no_training_pool_holds_them_and_the_eval_original_stays(decontaminated):
    out, planted, _ = decontaminated
    pools: dict[str, set[str]] = {}
    for p in (out / "shards").rglob("*.parquet"):
        pools.setdefault(p.parent.name, set()).update(pq.read_table(p, columns=["traj_id"]).column("traj_id").to_pylist())
    for pool in ("cpt", "sft", "rl"):
        assert not (pools.get(pool, set()) & set(planted)), pool
    assert "own-eval" in pools["eval"]
    # Precision: distinct tasks sharing the harness banner, and work quoting a short passage, all stay.
    assert {f"clean-{i:02d}" for i in range(24)} | {"quotes-bench"} <= set().union(*pools.values())


def test_manifest_and_summary_count_removals_per_reason(decontaminated):
    out, _, stderr = decontaminated
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]["dedup"]
    assert (counts["decontaminated_near"], counts["decontaminated_ngram"]) == (4, 2)
    assert "decontaminated: 4 near copies and 2 by shared task n-grams" in stderr
    hist = lwm_in_process("hist", str(out))
    assert hist.returncode == 0, hist.stderr
    assert ("removed before sampling (dedup/removed.parquet): 0 exact_duplicate, 0 near_duplicate, "
            "4 decontaminated_near, 2 decontaminated_ngram") in hist.stderr
    assert (counts["exact_removed"], counts["near_removed"]) == (0, 0)
    assert manifest["dedup"]["references"] == 3


def test_only_candidate_pairs_are_counted_and_every_removal_is_one(decontaminated):
    out, _, _ = decontaminated
    candidates = pq.read_table(out / "_work" / "dedup" / "candidates.parquet")
    pairs = set(zip(candidates.column("train").to_pylist(), candidates.column("record").to_pylist()))
    assert json.loads((out / "manifest.json").read_text())["dedup"]["candidate_pairs"] == len(pairs)
    removed = [r for r in pq.read_table(out / "dedup" / "removed.parquet").to_pylist() if r["matched"]]
    assert len(removed) == 6 and {(r["traj_id"], r["matched"]) for r in removed} <= pairs
    shared = [r for p in (out / "_work" / "dedup" / "evidence").glob("p*/s*.parquet")
              for r in pq.read_table(p).to_pylist()]
    assert shared and all(r["kind"] == "decontam_shared" and (r["a"], r["b"]) in pairs for r in shared)


def test_another_runs_eval_pool_is_a_reference(decontaminated):
    out, _, _ = decontaminated
    stats = Stats()
    refs = dict(iter_references(str(out), stats))
    trajs = [r for p in (out / "trajectories").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    expected = {f"ref:{out}#{t['traj_id']}" for t in trajs if pool_of(t["split_key"], RATIOS, 0) == "eval"}
    assert set(refs) == expected and f"ref:{out}#own-eval" in expected
    assert stats.get("decontam.references") == len(expected)


def test_the_same_verdicts_whatever_the_buckets_and_evidence_partitions(decontaminated):
    out, _, _ = decontaminated
    tmp = out.parent
    # The evaluation records with evidence in the one-bucket run; their ids hold this run's temporary path, so
    # the bucket count is chosen to put them in at least two partitions (a fixed count could put all in one).
    one = pq.read_table(out / "_work" / "dedup" / "evidence" / "p00000")
    ids = sorted(set(evidence_key(one).to_pylist()))
    assert len(ids) == 4 and "own-eval" in ids
    keys = pa.table({"kind": [KIND_TOTAL] * len(ids), "a": ids, "b": ids})
    buckets = next(b for b in range(9, 200, EVIDENCE_BUCKETS_PER_PART)
                   if len(set(evidence_parts(keys, math.ceil(b / EVIDENCE_BUCKETS_PER_PART)).tolist())) >= 2)
    expected = {f"p{q:05d}" for q in evidence_parts(keys, math.ceil(buckets / EVIDENCE_BUCKETS_PER_PART)).tolist()}
    cfg = (tmp / "cfg.toml").read_text().replace("[dedup]\n", f"[dedup]\nbuckets = {buckets}\n")
    (tmp / "cfg9.toml").write_text(cfg)
    out9 = tmp / "out9"
    proc = lwm_in_process("run", "--executor", "local", "--config", str(tmp / "cfg9.toml"), "-i",
                          str(tmp / "train.jsonl"), "-o", str(out9), "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    # The evidence about the four evaluation records is split over the partitions their ids hash to, each
    # summed by its own task; the verdicts and the removal file are those of the one-bucket run.
    parts = sorted(p.name for p in (out9 / "_work" / "dedup" / "evidence").iterdir())
    assert len(parts) >= 2 and set(parts) == expected
    assert json.loads((out9 / "_timings.json").read_text())["dedup-decontam"]["tasks"] == len(parts)
    assert (out9 / "dedup" / "removed.parquet").read_bytes() == (out / "dedup" / "removed.parquet").read_bytes()


def _bucket_rows(out: Path) -> pa.Table:
    files = [str(p.relative_to(out)) for p in (out / "_work" / "dedup").glob("b*/*.arrow")]
    assert files  # the map's bucket files, as the reduce reads them
    return read_ipc_tables(out_fs(str(out))[0], str(out), files, BUCKET_FILE_SCHEMA)


def test_training_ngram_rows_no_evaluation_record_holds_are_left_out(decontaminated):
    """The map keeps a training trajectory's n-gram rows only where an evaluation record (eval pool or
    reference) holds the same key: all of those, and few others (the filter's false "maybe")."""
    out, _, _ = decontaminated
    trajs = [r for p in (out / "trajectories").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    refs = [row for _, row in iter_references(str(out.parent / "bench.jsonl"), Stats())]
    evaluation = refs + [t for t in trajs if role_of(t["split_key"], POOLS) == ROLE_EVAL]
    training = [t for t in trajs if role_of(t["split_key"], POOLS) == ROLE_TRAIN]
    eval_keys = set(np.concatenate(gram_keys(evaluation, 13)).tolist())
    train_keys = {t["traj_id"]: set(k.tolist()) for t, k in zip(training, gram_keys(training, 13), strict=True)}
    rows = _bucket_rows(out)
    written: dict[str, set[int]] = {}
    for tid, kind, role, key in zip(*(rows.column(c).to_pylist() for c in ("traj_id", "kind", "role", "key"))):
        if kind == KIND_NGRAM and role == ROLE_TRAIN:
            written.setdefault(tid, set()).add(key)
    needed = sum(len(k & eval_keys) for k in train_keys.values())
    extra = sum(len(written.get(t, set()) - eval_keys) for t in train_keys)
    assert needed > 100  # the planted copies share many n-grams with their records
    assert all(k & eval_keys <= written.get(t, set()) for t, k in train_keys.items())
    assert all(written.get(t, set()) <= k for t, k in train_keys.items())
    unshared = sum(len(k - eval_keys) for k in train_keys.values())
    assert unshared > 5_000 and extra <= 0.1 * unshared
    # every map task read one bitmap of the evaluation keys, made once
    (made,) = [json.loads(p.read_text()) for p in (out / "_tasks" / "dedup-evalfilter").glob("*.json")]
    bitmap = (out / made["filter"]).read_bytes()
    assert len(bitmap) == 2 ** made["gram_bits"] // 8
    assert GramFilter.of_bitmap(made["gram_bits"], bitmap).holds(np.array(sorted(eval_keys), np.uint64)).all()
    manifest = json.loads((out / "manifest.json").read_text())["dedup"]
    assert manifest["bucket_rows"] == rows.num_rows
    assert manifest["eval_ngram_keys"] >= len(eval_keys)  # distinct per source (a part, a reference file), summed
    # the bitmap's fill, as the manifest gives it, is the share of its bits set (here small: nothing reported)
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8))
    assert manifest["eval_filter_bits"] == made["gram_bits"]
    assert manifest["eval_filter_fill"] == pytest.approx(bits.mean(), abs=1e-4) and 0 < bits.mean() < FILL_NOTICE
    assert "n-gram bitmap" not in decontaminated[2]


def test_a_resume_over_an_older_filter_marker_gives_the_manifest_of_a_fresh_run(decontaminated, tmp_path):
    """Markers written before the bitmap's fill was reported lack it; the manifest must not depend on that."""
    out, _, _ = decontaminated
    args = ["run", "--executor", "local", "--config", str(out.parent / "cfg.toml"), "-i", str(out.parent / "train.jsonl"),
            "-o", str(tmp_path / "out"), "--progress", "off"]
    assert lwm_in_process(*args).returncode == 0
    (marker,) = (tmp_path / "out" / "_tasks" / "dedup-evalfilter").glob("*.json")
    made = json.loads(marker.read_text())
    del made["fill"]
    marker.write_text(json.dumps(made))
    again = lwm_in_process(*args)
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "out" / "_timings.json").read_text())["dedup-evalfilter"]["ran"] == 0
    assert (tmp_path / "out" / "manifest.json").read_bytes() == (out / "manifest.json").read_bytes()


def test_a_bitmap_too_full_to_leave_much_out_is_reported(decontaminated, tmp_path, monkeypatch):
    out, _, _ = decontaminated
    monkeypatch.setattr(dedup_map, "FILL_NOTICE", 0.0)  # any bit set counts as too full
    proc = lwm_in_process("run", "--executor", "local", "--config", str(out.parent / "cfg.toml"),
                          "-i", str(out.parent / "train.jsonl"), "-o", str(tmp_path / "out"), "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    fill = json.loads((tmp_path / "out" / "manifest.json").read_text())["dedup"]["eval_filter_fill"]
    assert f"the evaluation n-gram bitmap is {fill:.0%} full" in proc.stderr


def test_leaving_out_unshared_training_ngrams_changes_no_evidence(decontaminated, monkeypatch):
    """With the filter answering "maybe" for every key (every training n-gram row written, as before it),
    the reduce's evidence and the removal file are the same."""
    out, _, _ = decontaminated
    tmp = out.parent
    monkeypatch.setattr(GramFilter, "holds", lambda self, keys: np.ones(len(keys), bool))
    proc = lwm_in_process("run", "--executor", "local", "--config", str(tmp / "cfg.toml"), "-i",
                          str(tmp / "train.jsonl"), "-o", str(tmp / "unfiltered"), "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    assert _bucket_rows(tmp / "unfiltered").num_rows > 2 * _bucket_rows(out).num_rows

    def evidence(run: Path) -> list[dict]:
        rows = [r for p in (run / "_work" / "dedup" / "evidence").glob("p*/*.parquet") for r in pq.read_table(p).to_pylist()]
        return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))

    assert evidence(tmp / "unfiltered") == evidence(out) != []
    assert (tmp / "unfiltered" / "dedup" / "removed.parquet").read_bytes() == (out / "dedup" / "removed.parquet").read_bytes()


def test_a_folder_rerun_under_other_bucket_settings_and_back_equals_a_fresh_run(decontaminated, tmp_path, monkeypatch):
    """A reduce task's buckets depend on the settings; a run resumed after a run with other settings in the same
    folder must read only its own tasks' work files (its skipped tasks' groups were once overwritten)."""
    from pipeline import dedup_stage

    out, _, _ = decontaminated
    src = out.parent
    monkeypatch.setattr(dedup_stage, "BYTES_PER_BUCKET", 210_000)  # several buckets per task, as at scale

    def run(buckets: int, dest: Path) -> None:
        cfg = tmp_path / f"cfg{buckets}.toml"
        cfg.write_text((src / "cfg.toml").read_text().replace("[dedup]\n", f"[dedup]\nbuckets = {buckets}\n"))
        proc = lwm_in_process("run", "--executor", "local", "--config", str(cfg), "-i", str(src / "train.jsonl"),
                              "-o", str(dest), "--progress", "off")
        assert proc.returncode == 0, proc.stderr

    run(4, tmp_path / "fresh")
    for buckets in (4, 6, 4):
        run(buckets, tmp_path / "again")
    reduce = json.loads((tmp_path / "again" / "_timings.json").read_text())["dedup-reduce"]
    assert reduce["tasks"] >= 2 and reduce["skipped"] >= 1  # tasks of the first run were kept
    fresh, again = (tmp_path / d / "dedup" / "removed.parquet" for d in ("fresh", "again"))
    assert again.read_bytes() == fresh.read_bytes()
    assert len(pq.read_table(fresh)) == 6


def test_a_reduce_task_takes_its_buckets_in_order_whatever_order_its_json_has(decontaminated, tmp_path):
    """Ray ships a task as JSON with sorted keys ("10" before "2"): the work files must not depend on it."""
    from pipeline.dedup_stage import run_dedup_reduce_task
    from pipeline.executors import LocalExecutor
    from pipeline.run import run_pipeline

    out, _, _ = decontaminated
    src = out.parent
    seen: list[dict] = []

    class Recording(LocalExecutor):
        def map(self, fn, tasks, progress, threads=1, small=False):
            if fn.args[1] == "dedup-reduce":  # fn: the engine's run_and_mark with the stage's task and name
                seen.extend(tasks)
            return super().map(fn, tasks, progress, threads=threads, small=small)

    cfg_path = tmp_path / "cfg.toml"
    cfg_path.write_text((src / "cfg.toml").read_text().replace("[dedup]\n", "[dedup]\nbuckets = 12\n"))
    cfg = resolve(load_config_file(str(cfg_path)), {"run": {"input": [str(src / "train.jsonl")], "out": str(tmp_path / "o")},
                                        "executor": {"kind": "local", "progress": "off"}})
    run_pipeline(cfg, echo=lambda m: None, executor=Recording())
    (task,) = seen
    assert list(task["buckets"]) == [str(b) for b in range(12)]
    shipped = json.loads(json.dumps({**task, "task_id": "b99999"}, sort_keys=True))
    assert list(shipped["buckets"])[:4] == ["0", "1", "10", "11"]
    ours, theirs = run_dedup_reduce_task(task), run_dedup_reduce_task(shipped)
    work = tmp_path / "o"
    assert (work / ours["edges"]).read_bytes() == (work / theirs["edges"]).read_bytes()
    assert ours["evidence"].keys() == theirs["evidence"].keys()
    for q in ours["evidence"]:
        assert (work / ours["evidence"][q]).read_bytes() == (work / theirs["evidence"][q]).read_bytes()


def test_without_an_eval_pool_only_the_references_are_read_for_evaluation_keys(decontaminated, tmp_path):
    out, planted, _ = decontaminated
    src = out.parent
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[dedup]\ndecontaminate = ["{src / "bench.jsonl"}"]\n[pools.ratios]\ncpt = 0.7\nsft = 0.2\nrl = 0.1\n')
    proc = lwm_in_process("run", "--executor", "local", "--config", str(cfg), "-i", str(src / "train.jsonl"),
                          "-o", str(tmp_path / "o"), "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "_timings.json").read_text())["dedup-evalkeys"]["tasks"] == 1
    removed = {r["traj_id"]: r["reason"] for r in pq.read_table(tmp_path / "o" / "dedup" / "removed.parquet").to_pylist()}
    from_bench = {t: r for t, r in planted.items() if not t.startswith("planted-own")}
    assert len(from_bench) == 4 and from_bench.items() <= removed.items()
