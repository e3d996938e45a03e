"""The dedup stage: exact and near-duplicate removal and decontamination over the trajectories layer.

Runs after ingest and before the sample stage; its one output, ``dedup/removed.parquet`` (traj_id, occurrence,
reason, cluster_id, survivor; sorted by traj_id and occurrence), is what the sample stage drops from every pool.
Its nodes are trajectories, not ids: the n-th trajectory of a run carrying an id is its own node
(`pipeline.occurrences`), so the same record given twice is an exact duplicate of itself.

1. **map** (``dedup-map``, one task per trajectories part, task id = the ingest task id, plus one per
   reference source of ``dedup.decontaminate``): per trajectory an exact key row, one row per LSH band
   (carrying the MinHash signature, so the reduce can verify candidates without another lookup) and, when
   decontamination is active, one row per distinct word n-gram. Rows are hashed by key into B bucket files
   ``_work/dedup/b<NNNNN>/<task_id>.arrow``. B comes from input-derived counts (or ``dedup.buckets``),
   never from the executor, and the result does not depend on B anyway: equal keys always meet. With
   decontamination active, a round first (``dedup-evalkeys``, the same tasks) writes the n-gram keys of the
   evaluation records, and a training trajectory gets n-gram rows only for keys some evaluation record may
   hold (`stages.gram_filter`): an n-gram no evaluation record holds counts for no check.
2. **reduce** (``dedup-reduce``, one task per run of consecutive buckets holding up to `BYTES_PER_BUCKET` of
   rows as the map wrote them, taken one bucket at a time): rows with equal (kind, band, key) form a group;
   groups become verified edges (stages/dedup_graph.py, by the rules of stages/dedup.py and stages/decontam.py).
   An n-gram group is specific when it has at most the common limit of members (from the number of
   trajectories the map saw, set on the driver between the two steps); it adds one to its evaluation
   members' totals (partial counts). The dedup edges (``exact``, ``near``) go to
   ``_work/dedup/edges/b<NNNNN>.parquet`` (the task's first bucket); the decontamination evidence (totals, near copies of evaluation
   records) to one file per evidence partition, ``_work/dedup/evidence/p<QQQQQ>/b<NNNNN>.parquet``, chosen by a
   hash of the evaluation record's id; the specific groups with both training and evaluation members to the
   files the candidate rounds read.
3. **decontam** (``dedup-decontam``): first the candidate rounds (`pipeline.decontam_stage`: ``dedup-select``,
   ``dedup-candidates``, ``dedup-gather``, ``dedup-count``), which count the shared n-grams of only the
   (training, evaluation) pairs that can pass the n-gram thresholds, and of the near copies (the prefix filter
   of stages/decontam_select.py: every other pair's count could not change a verdict); then one task per
   evidence partition sums the partial counts of its evaluation records over all buckets and writes the
   verdicts (``_work/dedup/verdicts/p<QQQQQ>.parquet``): every near copy with the outcome of its n-gram check,
   and every trajectory past the n-gram thresholds.
4. **clusters** (``dedup-clusters``, one task): reads the verdicts and the dedup edge files, removes the
   decontaminated trajectories, finds the connected components of the rest (integer node codes, scipy's
   connected components), applies the survivor rule and writes ``dedup/removed.parquet``. The driver gets
   only the counts: neither the edges nor the removed ids pass through it, and the sample tasks read
   ``dedup/removed.parquet`` themselves.

Reasons: ``exact_duplicate`` (same normalized content as a kept trajectory of its cluster),
``near_duplicate``, ``decontaminated_near``, ``decontaminated_ngram`` (stages/decontam.py); a
decontamination row also names the evaluation record it ``matched`` and the ``overlap``. Decontaminated
trajectories leave the dedup graph first, so a cluster never mixes eval-pool and training-pool
trajectories.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline import dedup_map
from pipeline.decontam_stage import GRAM_FILE_SCHEMA, ROUNDS, evidence_parts, groups_path, record_parts
from pipeline.dedup_map import EVAL_FILTER_ROUND, EVAL_KEYS, run_dedup_map_task, source_tasks
from pipeline.engine import RunContext, Stage, marker_path, run_stage
from pipeline.occurrences import removed_keys
from pipeline.outputs import out_fs, read_ipc_tables, read_tables, write_parts, write_table
from schemas.errors import ConfigError
from schemas.stats import Stats, merge_all
from stages.decontam import common_limit, is_active
from stages.dedup import lsh_params
from stages.dedup_edges import EDGE_SCHEMA
from stages.dedup_graph import BUCKET_FILE_SCHEMA, GROUP_SCHEMA, bucket_evidence
from stages.dedup_removals import (
    DECONTAM_KINDS,
    DEDUP_KINDS,
    REMOVED_SCHEMA,
    VERDICT_SCHEMA,
    cluster_removals,
    contaminated_of,
    decontam_verdicts,
    of_kinds,
)

# What a reduce task writes, in its spec: a run resumed from an earlier version's reduce outputs (every pair's
# shared count, no candidate groups) runs the reduce again instead of mixing the two.
REDUCE_OUTPUT = "evidence without pairs; candidate groups per bucket and task; several buckets per task"
REASONS = ("exact_duplicate", "near_duplicate", "decontaminated_near", "decontaminated_ngram")
BYTES_PER_BUCKET = 128 << 20  # what one reduce task reads and sorts, by estimated bytes (not rows)
_ROW_BYTES = 64  # a bucket row without its signature: keys, kind, band, sizes, a traj_id
_CHARS_PER_WORD = 6
EVIDENCE_BUCKETS_PER_PART = 16


def dedup_settings(cfg: dict[str, Any], ingest_stats: Stats) -> dict[str, Any]:
    """Everything the tasks need, resolved once on the driver (JSON-serializable)."""
    d = cfg["dedup"]
    if not 0 < float(d["threshold"]) <= 1:
        raise ConfigError(f"dedup.threshold must be within (0, 1], not {d['threshold']!r}")
    if int(d["shingle"]) < 1 or int(d["ngram"]) < 1 or int(d["num_perm"]) < 1:
        raise ConfigError("dedup.shingle, dedup.ngram and dedup.num_perm must be positive integers")
    try:
        bands, rows = lsh_params(float(d["threshold"]), int(d["num_perm"]), int(d.get("bands") or 0))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not (0 <= float(d["ngram_common_share"]) <= 1 and 0 < float(d["ngram_overlap"]) <= 1):
        raise ConfigError("dedup.ngram_common_share must be within [0, 1] and dedup.ngram_overlap within (0, 1]")
    if int(d["ngram_common_min_docs"]) < 1 or int(d["ngram_min_shared"]) < 1:
        raise ConfigError("dedup.ngram_common_min_docs and dedup.ngram_min_shared must be positive integers")
    decontam = is_active(cfg)
    settings = {
        "exact": bool(d["exact"]), "near": bool(d["near"]), "threshold": float(d["threshold"]),
        "num_perm": int(d["num_perm"]), "seed": int(d["seed"]), "shingle": int(d["shingle"]),
        "bands": bands, "rows": rows, "ngram": int(d["ngram"]), "decontam": decontam,
        "ngram_common_share": float(d["ngram_common_share"]),
        "ngram_common_min_docs": int(d["ngram_common_min_docs"]),
        "ngram_overlap": float(d["ngram_overlap"]),
        "ngram_min_shared": int(d["ngram_min_shared"]),
        "near_specific_share": float(d["near_specific_share"]),
        "pools": {"ratios": dict(cfg["pools"]["ratios"]), "seed": cfg["pools"]["seed"]},
    }
    n_traj = ingest_stats.get("trajectories.kept")
    # A band row carries its signature (4 bytes a permutation), so buckets are sized by bytes, not rows.
    est_rows = n_traj * (1 + bands) + (ingest_stats.get("chars.kept") / _CHARS_PER_WORD if decontam else 0)
    est_bytes = est_rows * _ROW_BYTES + n_traj * bands * 4 * int(d["num_perm"])
    settings["buckets"] = int(d.get("buckets") or max(1, math.ceil(est_bytes / BYTES_PER_BUCKET)))
    # Partitions of the decontamination evidence (by evaluation record): far fewer than buckets, since the
    # evidence (totals, near copies, rows of the groups, counts of candidate pairs only) is a small part of
    # the bucket rows, and each reduce and count task writes a file per partition it touches.
    settings["evidence_parts"] = max(1, math.ceil(settings["buckets"] / EVIDENCE_BUCKETS_PER_PART))
    return settings


# --- reduce -------------------------------------------------------------------------------------------------


def run_dedup_reduce_task(task: dict[str, Any]) -> dict[str, Any]:
    """Find the verified edges of some buckets, one bucket at a time: the dedup edges to one file, the
    decontamination evidence (totals, near copies) and the rows of their specific groups with both kinds of
    member to one file per evidence partition they touch, and each bucket's groups' members to one file for the
    candidate rounds."""
    fs, root = out_fs(task["out"])
    settings, tid = task["settings"], task["task_id"]
    edges, grams, groups_rel, rows = [], [], {}, 0
    # in bucket order, whatever order the task's JSON came in (Ray ships it with sorted keys: "10" before "2")
    for key, files in sorted(task["buckets"].items(), key=lambda item: int(item[0])):
        bucket = int(key)
        table = read_ipc_tables(fs, root, files, BUCKET_FILE_SCHEMA)  # ids as one dictionary
        found, groups, found_grams = bucket_evidence(table, settings)
        rows += table.num_rows
        del table
        edges.append(found)
        grams.append(found_grams.append_column("bucket", pa.array(np.full(found_grams.num_rows, bucket, np.int32))))
        if groups.num_rows:
            groups_rel[key] = write_table(fs, root, groups_path(bucket, tid), GROUP_SCHEMA, groups)
    edges = pa.concat_tables(edges)
    grams = pa.concat_tables(grams)
    rel = write_table(fs, root, f"_work/dedup/edges/{tid}.parquet", EDGE_SCHEMA, of_kinds(edges, DEDUP_KINDS))
    evidence = of_kinds(edges, DECONTAM_KINDS)  # totals and near copies; shared counts come from dedup-count
    files = write_parts(fs, root, lambda q: f"_work/dedup/evidence/p{q:05d}/{tid}.parquet", EDGE_SCHEMA,
                        evidence, evidence_parts(evidence, settings["evidence_parts"]))
    gram_files = write_parts(fs, root, lambda q: f"_work/dedup/grams/p{q:05d}/{tid}.parquet",
                             GRAM_FILE_SCHEMA, grams, record_parts(grams.column("record"), settings["evidence_parts"]))
    stats = {"dedup.bucket_rows": rows, "dedup.edges": edges.num_rows}
    return {"task_id": tid, "stage": "dedup-reduce", "edges": rel, "evidence": files, "grams": gram_files,
            "groups": groups_rel, "rows": rows, "bytes": 0, "stats": stats, "spec_hash": task["spec_hash"]}


# --- decontamination verdicts --------------------------------------------------------------------------------


def run_dedup_decontam_task(task: dict[str, Any]) -> dict[str, Any]:
    """Sum the evidence of one partition of evaluation records over every bucket and write its verdicts."""
    fs, root = out_fs(task["out"])
    # the ids as dictionaries: the evidence of one partition grows with the input, mostly as repeated ids
    evidence = read_tables(fs, root, task["files"], EDGE_SCHEMA, dictionary=("kind", "a", "b"),
                         columns=["kind", "a", "b", "jaccard", "count"])
    verdicts = decontam_verdicts(evidence, task["settings"])
    rel = write_table(fs, root, f"_work/dedup/verdicts/{task['task_id']}.parquet", VERDICT_SCHEMA, verdicts)
    return {"task_id": task["task_id"], "stage": "dedup-decontam", "verdicts": rel, "rows": evidence.num_rows,
            "bytes": 0, "stats": {"dedup.evidence_rows": evidence.num_rows}, "spec_hash": task["spec_hash"]}


# --- clusters ----------------------------------------------------------------------------------------------


def run_dedup_clusters_task(task: dict[str, Any]) -> dict[str, Any]:
    """Decontamination verdicts, clusters and the survivor rule over every edge file; writes ``dedup/removed.parquet``."""
    fs, root = out_fs(task["out"])
    verdicts = read_tables(fs, root, task["verdicts"], VERDICT_SCHEMA)
    edges = read_tables(fs, root, task["edges"], EDGE_SCHEMA)
    table, counts = cluster_removals(edges, contaminated_of(verdicts))
    _write_removed(fs, root, table)
    return {"task_id": task["task_id"], "stage": "dedup-clusters", "counts": counts, "edges": edges.num_rows,
            "rows": table.num_rows, "bytes": 0, "stats": {"dedup.removed": table.num_rows},
            "spec_hash": task["spec_hash"]}


# --- the stage ---------------------------------------------------------------------------------------------


def _write_removed(fs, root: str, table: pa.Table) -> None:
    write_table(fs, root, "dedup/removed.parquet", REMOVED_SCHEMA, table, rows_per_group=1024,
                compression_level=3)  # an output: as before


def removed_ids(ctx: RunContext) -> set[str]:
    """The keys (`pipeline.occurrences`) of the trajectories the dedup stage removed (``dedup/removed.parquet``;
    none when no such file)."""
    if "removed_ids" not in ctx.shared:
        ctx.shared["removed_ids"] = removed_keys(ctx.fs, ctx.root)
    return ctx.shared["removed_ids"]


def _mapped_settings(ctx: RunContext) -> dict[str, Any] | None:
    """The settings as the map step finished them (with the common n-gram limit); None when dedup is off."""
    settings = ctx.shared["dedup"]
    return settings if "ngram_limit" in settings else None


class DedupMapStage(Stage):
    """Map: one task per trajectories part and per reference source; resolves the settings on the driver."""

    name = "dedup-map"
    sections = ("dedup",)
    run_task = staticmethod(run_dedup_map_task)

    def run(self, ctx: RunContext) -> None:
        """The settings, the evaluation records' n-gram keys when decontamination is active, then the map."""
        ctx.shared["dedup"] = dedup_settings(ctx.cfg, merge_all([r["stats"] for r in ctx.results["ingest"]]))
        run_stage(ctx, EVAL_KEYS)
        run_stage(ctx, EVAL_FILTER_ROUND)
        run_stage(ctx, self)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        settings = ctx.shared["dedup"]
        if not (settings["exact"] or settings["near"] or settings["decontam"]):
            return None
        tasks = [{**t, "spec": [*t["spec"], dedup_map.BUCKET_FILES]} for t in source_tasks(ctx, settings)]
        if settings["decontam"]:
            (made,) = ctx.results["dedup-evalfilter"]
            extra = {"gram_filter": made["filter"], "gram_bits": made["gram_bits"]}
            tasks = [{**t, **extra, "spec": [*t["spec"], made["spec_hash"]]} for t in tasks]
        return tasks

    def finish(self, ctx: RunContext, map_results: list[dict[str, Any]]) -> None:
        """With dedup off: an empty removal list. Otherwise the common n-gram limit for the reduce."""
        settings = ctx.shared["dedup"]
        if not (settings["exact"] or settings["near"] or settings["decontam"]):
            _write_removed(ctx.fs, ctx.root, REMOVED_SCHEMA.empty_table())
            ctx.shared["removed_ids"] = set()
            ctx.manifest["counts"]["dedup"] = {"exact_removed": 0, "near_removed": 0, "decontaminated_near": 0,
                                               "decontaminated_ngram": 0, "clusters": 0, "example_clusters": []}
            return
        # Commonness is a share of every trajectory compared: the run's own (all pools) and the references.
        compared = sum(r["rows"] for r in map_results)
        limit = common_limit(compared, settings["ngram_common_share"], settings["ngram_common_min_docs"])
        ctx.shared["dedup"] = {**settings, "ngram_limit": limit}
        ctx.shared["dedup_compared"] = compared


def _gathering_tasks(ctx: RunContext, settings: dict[str, Any], results: list[dict[str, Any]], field: str,
                     prefix: str) -> list[dict[str, Any]]:
    """One task per key of the earlier tasks' ``{key: file}`` results under `field`, reading every file of its key."""
    files: dict[int, list[str]] = {}
    for r in results:
        for key, rel in r[field].items():
            files.setdefault(int(key), []).append(rel)
    specs = [r["spec_hash"] for r in results]
    base = {"out": ctx.cfg["run"]["out"], "settings": settings}
    return [{**base, "task_id": f"{prefix}{k:05d}", "files": sorted(files[k]), "spec": [settings, specs, k]}
            for k in sorted(files)]


def reduce_groups(bucket_bytes: dict[int, int], budget: int) -> list[list[int]]:
    """The buckets in order, cut into runs of at most `budget` bytes of rows (a larger bucket alone)."""
    runs: list[list[int]] = []
    used = 0
    for b in sorted(bucket_bytes):
        if not runs or used + bucket_bytes[b] > budget:
            runs.append([])
            used = 0
        runs[-1].append(b)
        used += bucket_bytes[b]
    return runs


class DedupReduceStage(Stage):
    """Reduce: each task takes consecutive buckets up to `BYTES_PER_BUCKET` of rows, as the map measured them
    (the bucket count is fixed before the map, from an estimate that cannot know how many n-gram rows the
    filter leaves), and writes the edges their rows give (``_work/dedup/edges``)."""

    name = "dedup-reduce"
    sections = ("dedup",)
    run_task = staticmethod(run_dedup_reduce_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        if (settings := _mapped_settings(ctx)) is None:
            return None
        files: dict[int, list[str]] = {}
        size: dict[int, int] = {}
        for r in ctx.results["dedup-map"]:
            for key, rel in r["files"].items():
                files.setdefault(int(key), []).append(rel)
                # a map result without sizes (an earlier version's marker) counts as a full bucket
                size[int(key)] = size.get(int(key), 0) + int(r.get("bucket_bytes", {}).get(key, BYTES_PER_BUCKET))
        specs = [r["spec_hash"] for r in ctx.results["dedup-map"]]
        base = {"out": ctx.cfg["run"]["out"], "settings": settings}
        tasks = []
        for run in reduce_groups(size, BYTES_PER_BUCKET):
            buckets = {str(b): sorted(files[b]) for b in run}
            tasks.append({**base, "task_id": f"b{run[0]:05d}", "buckets": buckets,
                          "spec": [settings, specs, buckets, REDUCE_OUTPUT]})
        return tasks


class DedupDecontamStage(Stage):
    """Decontamination verdicts: the candidate rounds (`pipeline.decontam_stage`) count the shared n-grams of
    the pairs that can pass, then one task per partition of evaluation records with evidence sums it over the
    buckets (``_work/dedup/verdicts``). Summed in parts, the evidence never meets in one process."""

    name = "dedup-decontam"
    sections = ("dedup",)
    small_tasks = True  # the evidence of one partition of evaluation records
    run_task = staticmethod(run_dedup_decontam_task)

    def run(self, ctx: RunContext) -> None:
        """The candidate rounds (`pipeline.decontam_stage`), then the verdicts of this stage's own tasks."""
        if _mapped_settings(ctx) is not None:
            for round_ in ROUNDS:
                run_stage(ctx, round_)
        run_stage(ctx, self)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        if (settings := _mapped_settings(ctx)) is None:
            return None
        counted = ctx.results.get("dedup-count") or []
        return _gathering_tasks(ctx, settings, ctx.results["dedup-reduce"] + counted, "evidence", "p")


class DedupClustersStage(Stage):
    """Clusters: one task reads the verdicts and the dedup edge files, finds the components, applies the
    survivor rule and writes ``dedup/removed.parquet``; the driver gets only the counts (neither edges nor
    removed ids pass through it)."""

    name = "dedup-clusters"
    sections = ("dedup",)
    run_task = staticmethod(run_dedup_clusters_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        if (settings := _mapped_settings(ctx)) is None:
            return None
        reduce_results = ctx.results["dedup-reduce"]
        verdict_results = ctx.results.get("dedup-decontam") or []
        marker = marker_path(ctx.root, self.name, "clusters")
        if not ctx.fs.exists(f"{ctx.root}/dedup/removed.parquet") and ctx.fs.exists(marker):
            ctx.fs.rm(marker)  # the output is gone: find it again
        return [{"out": ctx.cfg["run"]["out"], "settings": settings, "task_id": "clusters",
                 "edges": [r["edges"] for r in reduce_results], "verdicts": [r["verdicts"] for r in verdict_results],
                 "spec": [r["spec_hash"] for r in reduce_results + verdict_results]}]

    def finish(self, ctx: RunContext, results: list[dict[str, Any]]) -> None:
        if (settings := _mapped_settings(ctx)) is None:
            return
        (cluster_result,) = results
        counts = cluster_result["counts"]
        compared, limit = ctx.shared["dedup_compared"], settings["ngram_limit"]
        stats = merge_all([r["stats"] for r in ctx.results["dedup-map"] + ctx.results["dedup-reduce"]
                           + (ctx.results.get("dedup-evalkeys") or [])])
        ctx.manifest["counts"]["dedup"] = counts
        ctx.manifest["dedup"] = {
            "buckets": settings["buckets"], "bands": settings["bands"], "rows_per_band": settings["rows"],
            "edges": cluster_result["edges"], "references": int(stats.get("decontam.references")),
            "references_invalid": int(stats.get("decontam.references_invalid")),
            "compared": compared, "ngram_common_limit": limit,
            # rows the map wrote for the reduce; distinct n-grams of the evaluation records, per source summed
            "bucket_rows": int(stats.get("dedup.bucket_rows")),
            "eval_ngram_keys": int(stats.get("dedup.eval_gram_keys")),
            # the evaluation-key bitmap: log2 of its bits and the share set (what passes it without a match)
            **_eval_filter(ctx),
            # pairs whose shared n-grams were counted (`pipeline.decontam_stage`): the prefix filter's candidates
            "candidate_pairs": sum(r["rows"] for r in ctx.results.get("dedup-gather") or []),
        }
        ctx.echo(f"dedup: {counts['exact_removed']} exact and {counts['near_removed']} near duplicates removed in "
                 f"{counts['clusters']} clusters; decontaminated: {counts['decontaminated_near']} near copies and "
                 f"{counts['decontaminated_ngram']} by shared task n-grams (dedup/removed.parquet names the matched "
                 "evaluation records)")


def _eval_filter(ctx: RunContext) -> dict[str, Any]:
    made = ctx.results.get("dedup-evalfilter") or []
    if not made:
        return {}
    return {"eval_filter_bits": made[0]["gram_bits"], "eval_filter_fill": round(made[0]["fill"], 4)}


DEDUP_MAP = DedupMapStage()
DEDUP_REDUCE = DedupReduceStage()
DEDUP_DECONTAM = DedupDecontamStage()
DEDUP_CLUSTERS = DedupClustersStage()
