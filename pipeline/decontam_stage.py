"""The decontamination rounds of the dedup stage, between the reduce and the verdicts (`pipeline.dedup_stage`).

The reduce writes, per bucket, the specific n-gram groups that hold both kinds of member
(``_work/dedup/groups/b<NNNNN>-<task>.parquet``) and, per evidence partition, one row per (group, evaluation member)
(``_work/dedup/grams/p<QQQQQ>/b<NNNNN>.parquet``). Then, by `stages.decontam_select`'s prefix filter:

1. **select** (``dedup-select``, one task per evidence partition): sums each record's total and chooses the
   groups whose training members can still pass its n-gram thresholds; writes them per bucket
   (``_work/dedup/selected/b<NNNNN>/p<QQQQQ>.parquet``) and the partition's near copies as candidate pairs.
2. **candidates** (``dedup-candidates``, one task per `BUCKETS_PER_TASK` buckets with chosen groups): the
   training members of the chosen groups, paired with the record that chose the group.
3. **gather** (``dedup-gather``, one task): every candidate pair of the run, without repeats, in one file.
4. **count** (``dedup-count``, one task per `BUCKETS_PER_TASK` buckets with groups): the shared count of each
   candidate pair in the buckets' groups, written as evidence of its record's partition, beside the reduce's
   totals and near copies.

The verdict tasks then sum the evidence as before; only pairs that cannot pass are never counted.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.engine import RunContext, Stage
from pipeline.outputs import out_fs, read_tables, write_parts, write_table
from stages.decontam_select import (
    CANDIDATE_SCHEMA,
    SELECTED_SCHEMA,
    CandidateIndex,
    candidate_pairs,
    distinct_pairs,
    select_groups,
)
from stages.dedup_edges import EDGE_SCHEMA
from stages.dedup_graph import GRAM_SCHEMA, GROUP_SCHEMA
from stages.dedup_removals import evidence_key

GRAM_FILE_SCHEMA = GRAM_SCHEMA.append(pa.field("bucket", pa.int32()))
CANDIDATES = "_work/dedup/candidates.parquet"
# The candidates and count rounds take several buckets per task: a bucket's share of either is a fraction of a
# second, less than what a task costs to ship, start and read the run's candidates for.
BUCKETS_PER_TASK = 8


def evidence_parts(edges: pa.Table, parts: int) -> np.ndarray:
    """The partition (``0 … parts-1``) of each decontamination row: a stable hash of its evaluation record's id,
    so all the evidence about one record, from every bucket, meets in one verdict task."""
    return record_parts(evidence_key(edges), parts)


def record_parts(records: pa.ChunkedArray | pa.Array, parts: int) -> np.ndarray:
    """The evidence partition of each evaluation record id (`evidence_parts`)."""
    if isinstance(records, pa.ChunkedArray):
        records = records.combine_chunks()
    encoded = records.dictionary_encode()
    part_of = np.array([int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") % parts
                        for name in encoded.dictionary.to_pylist()], dtype=np.int64)
    return part_of[encoded.indices.to_numpy(zero_copy_only=False)] if len(part_of) else np.zeros(0, np.int64)


def groups_path(bucket: int, task_id: str) -> str:
    """The groups of one bucket, as the reduce task `task_id` wrote them (named by both: the buckets a reduce task
    takes depend on the run's settings, so another run in the same folder may reduce the bucket in another task)."""
    return f"_work/dedup/groups/b{bucket:05d}-{task_id}.parquet"


def _group_files(ctx: RunContext) -> dict[int, tuple[str, str]]:
    """Per bucket with groups, the reduce's groups file and the spec hash of the reduce task that wrote it."""
    return {int(b): (rel, r["spec_hash"]) for r in ctx.results["dedup-reduce"] for b, rel in (r.get("groups") or {}).items()}


def _result(task: dict[str, Any], stage: str, rows: int, **fields: Any) -> dict[str, Any]:
    return {"task_id": task["task_id"], "stage": stage, "rows": rows, "bytes": 0, "stats": {},
            "spec_hash": task["spec_hash"], **fields}


def run_select_task(task: dict[str, Any]) -> dict[str, Any]:
    """One evidence partition: the groups each of its records keeps, per bucket; its near copies as candidates."""
    fs, root = out_fs(task["out"])
    evidence = read_tables(fs, root, task["evidence"], EDGE_SCHEMA, columns=["kind", "a", "b", "count"])
    grams = read_tables(fs, root, task["grams"], GRAM_FILE_SCHEMA)
    selected = select_groups(evidence, grams, task["settings"])
    bucket = selected.column("bucket").to_numpy()
    files = write_parts(fs, root, lambda b: f"_work/dedup/selected/b{b:05d}/{task['task_id']}.parquet",
                        SELECTED_SCHEMA, selected, bucket)
    near = evidence.filter(pc.equal(evidence.column("kind"), "decontam_near"))
    near_rel = None
    if near.num_rows:
        pairs = distinct_pairs(pa.table({"train": near.column("a"), "record": near.column("b")}))
        near_rel = write_table(fs, root, f"_work/dedup/near/{task['task_id']}.parquet", CANDIDATE_SCHEMA, pairs)
    return _result(task, "dedup-select", selected.num_rows, selected=files, near=near_rel)


def run_candidates_task(task: dict[str, Any]) -> dict[str, Any]:
    """Some buckets: the training members of their chosen groups, each with the record that chose the group."""
    fs, root = out_fs(task["out"])
    pairs = [candidate_pairs(read_tables(fs, root, [task["groups"][b]], GROUP_SCHEMA),
                             read_tables(fs, root, files, SELECTED_SCHEMA)) for b, files in task["buckets"].items()]
    pairs = distinct_pairs(pa.concat_tables(pairs))
    rel = write_table(fs, root, f"_work/dedup/candidates/{task['task_id']}.parquet", CANDIDATE_SCHEMA, pairs)
    return _result(task, "dedup-candidates", pairs.num_rows, candidates=rel)


def run_gather_task(task: dict[str, Any]) -> dict[str, Any]:
    """Every candidate pair of the run, without repeats, in one file that each count task reads."""
    fs, root = out_fs(task["out"])
    pairs = distinct_pairs(read_tables(fs, root, task["files"], CANDIDATE_SCHEMA))
    write_table(fs, root, CANDIDATES, CANDIDATE_SCHEMA, pairs)
    return _result(task, "dedup-gather", pairs.num_rows, candidates=CANDIDATES)


def run_count_task(task: dict[str, Any]) -> dict[str, Any]:
    """Some buckets: the shared count of each candidate pair in their groups, as evidence of its record's partition."""
    fs, root = out_fs(task["out"])
    index = CandidateIndex(read_tables(fs, root, [CANDIDATES], CANDIDATE_SCHEMA))
    shared = pa.concat_tables([index.shared(read_tables(fs, root, [rel], GROUP_SCHEMA)) for rel in task["groups"]])
    part = evidence_parts(shared, task["settings"]["evidence_parts"])
    files = write_parts(fs, root, lambda q: f"_work/dedup/evidence/p{q:05d}/{task['task_id']}.parquet",
                        EDGE_SCHEMA, shared, part)
    return _result(task, "dedup-count", shared.num_rows, evidence=files)


class _Round(Stage):
    sections = ("dedup",)
    small_tasks = True  # candidate pairs and the groups of a few buckets: tenths of a second each

    def _base(self, ctx: RunContext) -> dict[str, Any]:
        return {"out": ctx.cfg["run"]["out"], "settings": ctx.shared["dedup"]}


class SelectRound(_Round):
    name = "dedup-select"
    run_task = staticmethod(run_select_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        reduce_results = ctx.results["dedup-reduce"]
        evidence: dict[int, list[str]] = {}
        grams: dict[int, list[str]] = {}
        for r in reduce_results:
            for q, rel in r["evidence"].items():
                evidence.setdefault(int(q), []).append(rel)
            for q, rel in r.get("grams", {}).items():
                grams.setdefault(int(q), []).append(rel)
        if not evidence:
            return None
        specs = [r["spec_hash"] for r in reduce_results]
        return [{**self._base(ctx), "task_id": f"p{q:05d}", "evidence": sorted(evidence[q]),
                 "grams": sorted(grams.get(q, [])), "spec": [ctx.shared["dedup"], specs, q]} for q in sorted(evidence)]


class CandidatesRound(_Round):
    name = "dedup-candidates"
    run_task = staticmethod(run_candidates_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        files: dict[int, list[str]] = {}
        for r in ctx.results.get("dedup-select") or []:
            for b, rel in r["selected"].items():
                files.setdefault(int(b), []).append(rel)
        if not files:
            return None
        specs = [r["spec_hash"] for r in ctx.results["dedup-select"]]
        group_files = _group_files(ctx)
        buckets = sorted(files)
        tasks = []
        for i in range(0, len(buckets), BUCKETS_PER_TASK):
            some = {str(b): sorted(files[b]) for b in buckets[i : i + BUCKETS_PER_TASK]}
            groups = {b: group_files[int(b)][0] for b in some}
            tasks.append({**self._base(ctx), "task_id": f"b{buckets[i]:05d}", "buckets": some, "groups": groups,
                          "spec": [ctx.shared["dedup"], specs, some, groups]})
        return tasks


class GatherRound(_Round):
    name = "dedup-gather"
    run_task = staticmethod(run_gather_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        earlier = (ctx.results.get("dedup-select") or []) + (ctx.results.get("dedup-candidates") or [])
        files = sorted([r["near"] for r in earlier if r.get("near")] +
                       [r["candidates"] for r in earlier if r.get("candidates")])
        if not files:
            return None
        return [{**self._base(ctx), "task_id": "candidates", "files": files,
                 "spec": [ctx.shared["dedup"], [r["spec_hash"] for r in earlier]]}]


class CountRound(_Round):
    name = "dedup-count"
    run_task = staticmethod(run_count_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        gathered = ctx.results.get("dedup-gather") or []
        if not gathered or not gathered[0]["rows"]:
            return None
        groups = sorted((b, rel, spec) for b, (rel, spec) in _group_files(ctx).items())
        tasks = []
        for i in range(0, len(groups), BUCKETS_PER_TASK):
            some = groups[i : i + BUCKETS_PER_TASK]
            tasks.append({**self._base(ctx), "task_id": f"s{some[0][0]:05d}", "groups": [g[1] for g in some],
                          "spec": [ctx.shared["dedup"], gathered[0]["spec_hash"], [g[1:] for g in some]]})
        return tasks


ROUNDS = (SelectRound(), CandidatesRound(), GatherRound(), CountRound())
