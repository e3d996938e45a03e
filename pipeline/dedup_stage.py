"""The dedup stage: exact and near-duplicate removal and decontamination over the trajectories layer.

Runs after ingest and before the sample stage; its one output, ``dedup/removed.parquet`` (traj_id, reason,
cluster_id, survivor; sorted by traj_id), is what the sample stage drops from every pool.

1. **map** (``dedup-map``, one task per trajectories part, task id = the ingest task id, plus one per
   reference source of ``dedup.decontaminate``): per trajectory an exact key row, one row per LSH band
   (carrying the MinHash signature, so the reduce can verify candidates without another lookup) and, when
   decontamination is active, one row per distinct word n-gram. Rows are hashed by key into B bucket files
   ``_work/dedup/b<NNNNN>/<task_id>.parquet``. B comes from input-derived counts (or ``dedup.buckets``),
   never from the executor, and the result does not depend on B anyway: equal keys always meet.
2. **reduce** (``dedup-reduce``, one task per bucket): rows with equal (kind, band, key) form a group;
   groups become verified edges (stages/dedup_graph.py, by the rules of stages/dedup.py and stages/decontam.py),
   written to ``_work/dedup/edges/b<NNNNN>.parquet``. An n-gram group is specific when it has at most the common
   limit of members (from the number of trajectories the map saw, set on the driver between the two
   steps); it adds one to its evaluation members' totals and to each (training, evaluation) pair's
   shared count — partial counts, summed by the clusters task.
3. **clusters** (``dedup-clusters``, one task): reads the edge files, finds the connected components
   (stages/dedup_graph.py), applies the survivor rule and writes ``dedup/removed.parquet``. The driver gets
   only the counts: neither the edges nor the removed ids pass through it, and the sample tasks read
   ``dedup/removed.parquet`` themselves.

Reasons: ``exact_duplicate`` (same normalized content as a kept trajectory of its cluster),
``near_duplicate``, ``decontaminated_near``, ``decontaminated_ngram`` (stages/decontam.py); a
decontamination row also names the evaluation record it ``matched`` and the ``overlap``. Decontaminated
trajectories leave the dedup graph first, so a cluster never mixes eval-pool and training-pool
trajectories.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import posixpath
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.engine import RunContext, Stage, marker_path
from pipeline.outputs import AtomicParquetWriter, out_fs
from schemas.errors import ConfigError
from schemas.stats import Stats, merge_all
from stages.decontam import (
    ROLE_REFERENCE,
    TRAJECTORY_COLUMNS,
    common_limit,
    is_active,
    is_run_directory,
    iter_references,
    reference_units,
    role_of,
)
from stages.dedup import (
    Signer,
    lsh_params,
)
from stages.dedup_graph import (
    BUCKET_SCHEMA,
    EDGE_SCHEMA,
    BucketRows,
    add_trajectory_rows,
    bucket_edges,
    edge_table,
    node_sizes,
    removed_rows,
)

# matched / overlap: for a decontamination removal, the evaluation record it matched and the overlap figure
# (the share of the record's specific n-grams found, or the estimated Jaccard of a near copy); null otherwise.
REMOVED_SCHEMA = pa.schema(
    [("traj_id", pa.string()), ("reason", pa.string()), ("cluster_id", pa.string()), ("survivor", pa.string()),
     ("matched", pa.string()), ("overlap", pa.float64())]
)
REASONS = ("exact_duplicate", "near_duplicate", "decontaminated_near", "decontaminated_ngram")
BYTES_PER_BUCKET = 128 << 20  # what one reduce task reads and sorts, by estimated bytes (not rows)
_ROW_BYTES = 64  # a bucket row without its signature: keys, kind, band, sizes, a traj_id
_FLUSH_ROWS = 65_536
_MAX_PENDING_ROWS = 4 * _FLUSH_ROWS
_MAX_PENDING_BYTES = 64 << 20  # band rows carry signatures: bound what a map task buffers by bytes too
_CHARS_PER_WORD = 6
_SIGN_BATCH = 64


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
    return settings


# --- map --------------------------------------------------------------------------------------------------


class _BucketOutput:
    """Rows of one map task, hashed into bucket files that are opened on first use."""

    def __init__(self, fs, root: str, task_id: str, buckets: int) -> None:
        self.fs, self.root, self.task_id, self.buckets = fs, root, task_id, buckets
        self.pending: dict[int, list[pa.Table]] = {}
        self.pending_rows: dict[int, int] = {}
        self.pending_bytes = 0
        self.writers: dict[int, AtomicParquetWriter] = {}

    def path(self, bucket: int) -> str:
        return f"_work/dedup/b{bucket:05d}/{self.task_id}.parquet"

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        buckets = (table.column("key").to_numpy() % np.uint64(self.buckets)).astype(np.int64)
        order = np.argsort(buckets, kind="stable")
        sorted_buckets = buckets[order]
        table = table.take(pa.array(order))
        starts = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]])
        for s, e in zip(starts, np.r_[starts[1:], len(order)]):
            b = int(sorted_buckets[s])
            part = table.slice(s, e - s)
            self.pending.setdefault(b, []).append(part)
            self.pending_bytes += part.nbytes
            self.pending_rows[b] = self.pending_rows.get(b, 0) + int(e - s)
            if self.pending_rows[b] >= _FLUSH_ROWS:
                self._flush(b)
        if sum(self.pending_rows.values()) >= _MAX_PENDING_ROWS or self.pending_bytes >= _MAX_PENDING_BYTES:
            for b in list(self.pending):  # many buckets: bound the task's memory
                self._flush(b)
            self.pending_bytes = 0

    def _flush(self, b: int) -> None:
        if b not in self.writers:
            self.writers[b] = AtomicParquetWriter(self.fs, f"{self.root}/{self.path(b)}", BUCKET_SCHEMA,
                                                  rows_per_group=_FLUSH_ROWS, compression_level=1)
        self.writers[b].write_table(pa.concat_tables(self.pending.pop(b)))
        self.pending_rows[b] = 0

    def close(self) -> dict[str, str]:
        for b in list(self.pending):
            self._flush(b)
        for w in self.writers.values():
            w.close()
        return {str(b): self.path(b) for b in sorted(self.writers)}

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()


def _part_records(fs, root: str, task: dict[str, Any], stats: Stats) -> Iterator[tuple[str, int, dict]]:
    path = f"{root}/trajectories/part-{task['task_id']}.parquet"
    with fs.open(path, "rb") as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=256, columns=TRAJECTORY_COLUMNS):
            for row in batch.to_pylist():
                role = role_of(row["split_key"], task["settings"]["pools"])
                stats.add("dedup.trajectories")
                yield row["traj_id"], role, row


def run_dedup_map_task(task: dict[str, Any]) -> dict[str, Any]:
    """Hash one trajectories part (``source: part``) or one reference source (``source: reference``) into buckets."""
    fs, root = out_fs(task["out"])
    settings = task["settings"]
    signer = Signer(settings["shingle"], settings["num_perm"], settings["seed"], settings["bands"], settings["rows"])
    stats = Stats()
    output = _BucketOutput(fs, root, task["task_id"], settings["buckets"])
    if task["source"] == "part":
        records = _part_records(fs, root, task, stats)
    else:
        records = ((ref_id, ROLE_REFERENCE, row) for ref_id, row in iter_references(task["uri"], stats))
    rows = 0
    try:
        batch = BucketRows()
        while items := list(itertools.islice(records, _SIGN_BATCH)):  # a batch's signatures are computed together
            add_trajectory_rows(batch, items, signer, settings)
            rows += len(items)
            if batch.count >= _FLUSH_ROWS:
                output.add(batch.table())
                batch = BucketRows()
        output.add(batch.table())
        files = output.close()
    except BaseException:
        output.abort()
        raise
    result = {"task_id": task["task_id"], "stage": "dedup-map", "files": files, "rows": rows, "bytes": 0,
              "stats": stats.to_dict(), "spec_hash": task["spec_hash"]}
    return result


# --- reduce -------------------------------------------------------------------------------------------------


def _read_all(fs, root: str, rels: list[str], schema: pa.Schema) -> pa.Table:
    """The work files `rels` (relative to the run root) as one table, in the order given; empty of `schema` when none."""
    tables = []
    for rel in rels:
        with fs.open(f"{root}/{rel}", "rb") as f:
            tables.append(pq.read_table(f))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def run_dedup_reduce_task(task: dict[str, Any]) -> dict[str, Any]:
    """Find the verified edges of one bucket and write them."""
    fs, root = out_fs(task["out"])
    table = _read_all(fs, root, task["files"], BUCKET_SCHEMA)
    edges = bucket_edges(table, task["settings"])
    rel = f"_work/dedup/edges/{task['task_id']}.parquet"
    with AtomicParquetWriter(fs, f"{root}/{rel}", EDGE_SCHEMA) as w:
        w.write_table(edge_table(edges, node_sizes(table) if edges else {}))
    stats = {"dedup.bucket_rows": table.num_rows, "dedup.edges": len(edges)}
    result = {"task_id": task["task_id"], "stage": "dedup-reduce", "edges": rel, "rows": table.num_rows,
              "bytes": 0, "stats": stats, "spec_hash": task["spec_hash"]}
    return result


# --- clusters ----------------------------------------------------------------------------------------------


def run_dedup_clusters_task(task: dict[str, Any]) -> dict[str, Any]:
    """Clusters, the survivor rule and decontamination over every edge file; writes ``dedup/removed.parquet``."""
    fs, root = out_fs(task["out"])
    edges = _read_all(fs, root, task["edges"], EDGE_SCHEMA)
    rows, counts = removed_rows(edges, task["settings"])
    _write_removed(fs, root, rows)
    return {"task_id": task["task_id"], "stage": "dedup-clusters", "counts": counts, "edges": edges.num_rows,
            "rows": len(rows), "bytes": 0, "stats": {"dedup.removed": len(rows)}, "spec_hash": task["spec_hash"]}


# --- the stage ---------------------------------------------------------------------------------------------


def _reference_fingerprint(uri: str) -> str:
    """What a reference task's output depends on: the bytes of its files."""
    from pipeline.ingest_task import describe_input
    from stages.ingest.reading import InputUnit, filesystem

    if not is_run_directory(uri):
        return describe_input(InputUnit(uri))["sha256"]
    fs, root = filesystem(uri)
    digest = hashlib.sha256()
    for p in sorted(fs.find(root)):
        if (p.endswith(".parquet") and "/trajectories/" in p) or p.endswith("manifest.json"):
            digest.update(f"{posixpath.relpath(p, root)}:{fs.size(p)}:{fs.checksum(p)}\n".encode())
    return digest.hexdigest()


def _write_removed(fs, root: str, rows: list[dict[str, str]]) -> None:
    with AtomicParquetWriter(fs, f"{root}/dedup/removed.parquet", REMOVED_SCHEMA) as w:
        w.write_table(pa.Table.from_pylist(rows, schema=REMOVED_SCHEMA))


def removed_ids(ctx: RunContext) -> set[str]:
    """Trajectory ids the dedup stage removed (``dedup/removed.parquet``; none when no such file)."""
    if "removed_ids" not in ctx.shared:
        path = f"{ctx.root}/dedup/removed.parquet"
        ids: set[str] = set()
        if ctx.fs.exists(path):
            with ctx.fs.open(path, "rb") as f:
                ids = set(pq.read_table(f, columns=["traj_id"]).column("traj_id").to_pylist())
        ctx.shared["removed_ids"] = ids
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

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        cfg, ingest_results = ctx.cfg, ctx.results["ingest"]
        settings = ctx.shared["dedup"] = dedup_settings(cfg, merge_all([r["stats"] for r in ingest_results]))
        if not (settings["exact"] or settings["near"] or settings["decontam"]):
            return None
        base = {"out": cfg["run"]["out"], "settings": settings}
        tasks = [{**base, "task_id": r["task_id"], "source": "part", "spec": [settings, r["spec_hash"]]}
                 for r in ingest_results]
        for uri in reference_units(list(cfg["dedup"]["decontaminate"])):
            tid = "ref-" + hashlib.sha256(uri.encode()).hexdigest()[:16]
            tasks.append({**base, "task_id": tid, "source": "reference", "uri": uri,
                          "spec": [settings, uri, _reference_fingerprint(uri)]})
        return tasks

    def finish(self, ctx: RunContext, map_results: list[dict[str, Any]]) -> None:
        """With dedup off: an empty removal list. Otherwise the common n-gram limit for the reduce."""
        settings = ctx.shared["dedup"]
        if not (settings["exact"] or settings["near"] or settings["decontam"]):
            _write_removed(ctx.fs, ctx.root, [])
            ctx.shared["removed_ids"] = set()
            ctx.manifest["counts"]["dedup"] = {"exact_removed": 0, "near_removed": 0, "decontaminated_near": 0,
                                               "decontaminated_ngram": 0, "clusters": 0, "example_clusters": []}
            return
        # Commonness is a share of every trajectory compared: the run's own (all pools) and the references.
        compared = sum(r["rows"] for r in map_results)
        limit = common_limit(compared, settings["ngram_common_share"], settings["ngram_common_min_docs"])
        ctx.shared["dedup"] = {**settings, "ngram_limit": limit}
        ctx.shared["dedup_compared"] = compared


class DedupReduceStage(Stage):
    """Reduce: one task per bucket writes the edges its rows give (``_work/dedup/edges``)."""

    name = "dedup-reduce"
    sections = ("dedup",)
    run_task = staticmethod(run_dedup_reduce_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        if (settings := _mapped_settings(ctx)) is None:
            return None
        map_results = ctx.results["dedup-map"]
        files: dict[int, list[str]] = {}
        for r in map_results:
            for b, rel in r["files"].items():
                files.setdefault(int(b), []).append(rel)
        map_specs = [r["spec_hash"] for r in map_results]
        base = {"out": ctx.cfg["run"]["out"], "settings": settings}
        return [{**base, "task_id": f"b{b:05d}", "files": sorted(files[b]), "spec": [settings, map_specs, b]}
                for b in sorted(files)]


class DedupClustersStage(Stage):
    """Clusters: one task reads the edge files, finds the components, applies the survivor rule and writes
    ``dedup/removed.parquet``; the driver gets only the counts (neither edges nor removed ids pass through it)."""

    name = "dedup-clusters"
    sections = ("dedup",)
    run_task = staticmethod(run_dedup_clusters_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        if (settings := _mapped_settings(ctx)) is None:
            return None
        reduce_results = ctx.results["dedup-reduce"]
        marker = marker_path(ctx.root, self.name, "clusters")
        if not ctx.fs.exists(f"{ctx.root}/dedup/removed.parquet") and ctx.fs.exists(marker):
            ctx.fs.rm(marker)  # the output is gone: find it again
        return [{"out": ctx.cfg["run"]["out"], "settings": settings, "task_id": "clusters",
                 "edges": [r["edges"] for r in reduce_results], "spec": [r["spec_hash"] for r in reduce_results]}]

    def finish(self, ctx: RunContext, results: list[dict[str, Any]]) -> None:
        if (settings := _mapped_settings(ctx)) is None:
            return
        (cluster_result,) = results
        counts = cluster_result["counts"]
        compared, limit = ctx.shared["dedup_compared"], settings["ngram_limit"]
        stats = merge_all([r["stats"] for r in ctx.results["dedup-map"] + ctx.results["dedup-reduce"]])
        ctx.manifest["counts"]["dedup"] = counts
        ctx.manifest["dedup"] = {
            "buckets": settings["buckets"], "bands": settings["bands"], "rows_per_band": settings["rows"],
            "edges": cluster_result["edges"], "references": int(stats.get("decontam.references")),
            "references_invalid": int(stats.get("decontam.references_invalid")),
            "compared": compared, "ngram_common_limit": limit,
        }
        ctx.echo(f"dedup: {counts['exact_removed']} exact and {counts['near_removed']} near duplicates removed in "
                 f"{counts['clusters']} clusters; decontaminated: {counts['decontaminated_near']} near copies and "
                 f"{counts['decontaminated_ngram']} by shared task n-grams (dedup/removed.parquet names the matched "
                 "evaluation records)")


DEDUP_MAP = DedupMapStage()
DEDUP_REDUCE = DedupReduceStage()
DEDUP_CLUSTERS = DedupClustersStage()
