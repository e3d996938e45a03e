"""The map step of the dedup stage (``dedup-map``; see `pipeline.dedup_stage`, which plans it): one task per
trajectories part or reference source (`source_tasks`) hashes its key rows into the bucket files
``_work/dedup/b<NNNNN>/<task_id>.arrow`` (Arrow IPC streams, lz4: `_BucketOutput`).

When decontamination is active, a round before it (``dedup-evalkeys``, the same tasks) writes the n-gram keys
of the evaluation records only (``_work/dedup/evalkeys/<task_id>.parquet``), one task (``dedup-evalfilter``)
sets their bits in one `stages.gram_filter.GramFilter` bitmap (``_work/dedup/evalfilter.bin``), and every map
task reads it and leaves out the training n-gram rows no evaluation record shares."""

from __future__ import annotations

import hashlib
import itertools
import posixpath
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.engine import RunContext, Stage
from pipeline.occurrences import Occurrences, run_offsets
from pipeline.outputs import AtomicIpcWriter, compact_dictionaries, out_fs, read_tables, write_bytes_atomic, write_table
from schemas.stats import Stats
from stages.decontam import (
    ROLE_REFERENCE,
    ROLE_TRAIN,
    TRAJECTORY_COLUMNS,
    is_run_directory,
    iter_references,
    reference_units,
    role_of,
)
from stages.dedup import NormalizeMemo, Signer, expect_text
from stages.dedup_graph import BUCKET_FILE_SCHEMA, BucketRows, add_trajectory_rows, gram_keys
from stages.distinct import distinct
from stages.gram_filter import GramFilter, filter_bits

# What the map reads of a trajectories part: of each turn only the two texts its keys are taken from
# (`stages.dedup.turn_texts`), not the reasoning and meta that the Python rows would otherwise carry.
_TURN_TEXTS = ["turns.list.element.action", "turns.list.element.observation"]
_PART_COLUMNS = [c for c in TRAJECTORY_COLUMNS if c != "turns"] + _TURN_TEXTS

_FLUSH_ROWS = 65_536
# What a map task buffers before it writes every bucket: bounded by bytes (band rows carry signatures), and by
# rows. Each write costs about 2 ms whatever its size (compaction, a record batch), so a 2 GB part (1.28 million
# rows, 53 MB) writes each of its 142 buckets once: with a 16 × 65,536-row bound it wrote them twice and took
# 3.81-4.09 s against 3.62-4.00 s (four alternating pairs), at the same peak memory (327-346 MiB).
_MAX_PENDING_ROWS = 32 * _FLUSH_ROWS
_MAX_PENDING_BYTES = 64 << 20
_SIGN_BATCH = 64


# What a map task writes, in its spec: a run resumed over map outputs of an earlier version (Parquet bucket files)
# maps again instead of handing the reduce files it does not read.
BUCKET_FILES = "bucket files: lz4 Arrow IPC streams, trajectory ids dictionary-encoded, signatures plain"


class _BucketOutput:
    """Rows of one map task, hashed into bucket files that are opened on first use.

    The files are Arrow IPC streams compressed with lz4, which only the reduce reads. Rows of keys and
    signatures are hashes that hardly compress: Parquet (zstd level 1) took 0.74 s per 2 GB part's 142 files
    (39 MiB) and lz4 IPC takes 0.17 s (63 MiB; uncompressed 0.04 s, 115 MiB). Each write holds the trajectory
    ids as one compact dictionary of its own (`compact_dictionaries`), which the reduce unifies. A signature is
    held once per batch of rows (`BucketRows`) but written plain: its band rows fall in different buckets, so a
    file holds it about once, and a dictionary per write cost its compaction (0.13 s of a 2 GB part's 0.30 s)."""

    def __init__(self, fs, root: str, task_id: str, buckets: int) -> None:
        self.fs, self.root, self.task_id, self.buckets = fs, root, task_id, buckets
        self.pending: dict[int, list[pa.Table]] = {}
        self.pending_rows: dict[int, int] = {}
        self.pending_bytes = 0
        self.writers: dict[int, AtomicIpcWriter] = {}
        self.written_bytes: dict[int, int] = {}  # Arrow bytes of the rows given to each bucket (what a reduce reads)

    def path(self, bucket: int) -> str:
        return f"_work/dedup/b{bucket:05d}/{self.task_id}.arrow"

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        # bucket numbers as 16-bit keys where they fit, which NumPy's stable sort sorts by radix
        buckets = (table.column("key").to_numpy() % np.uint64(self.buckets)).astype(
            np.int16 if self.buckets <= 1 << 15 else np.int64)
        order = np.argsort(buckets, kind="stable")
        sorted_buckets = buckets[order]
        table = table.take(pa.array(order))
        # The slices below share this table's buffers and its dictionaries: counted once here, not once per slice
        # (a slice's `nbytes` counts its whole dictionary).
        self.pending_bytes += table.nbytes
        starts = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]])
        for s, e in zip(starts, np.r_[starts[1:], len(order)]):
            b = int(sorted_buckets[s])
            part = table.slice(s, e - s)
            self.pending.setdefault(b, []).append(part)
            self.pending_rows[b] = self.pending_rows.get(b, 0) + int(e - s)
            if self.pending_rows[b] >= _FLUSH_ROWS:
                self._flush(b)
        if sum(self.pending_rows.values()) >= _MAX_PENDING_ROWS or self.pending_bytes >= _MAX_PENDING_BYTES:
            for b in list(self.pending):  # many buckets: bound the task's memory
                self._flush(b)
            self.pending_bytes = 0

    def _flush(self, b: int) -> None:
        if b not in self.writers:
            self.writers[b] = AtomicIpcWriter(self.fs, f"{self.root}/{self.path(b)}", BUCKET_FILE_SCHEMA,
                                              rows_per_batch=_FLUSH_ROWS, compression="lz4")
        # compact dictionaries: what the reduce's read relies on; one chunk per column, so one record batch per
        # write: the columns of the pending slices otherwise split the write into a batch per slice, each of
        # which the reader hands back with its own reference to the write's dictionaries, and the reduce's
        # unification hashes every one of those (at 2 GB: 3,276 chunks against 360 in a reduce task, 0.6 s)
        table = pa.concat_tables(self.pending.pop(b))
        sig = table.schema.get_field_index("sig")  # as the file holds it: plain (each about once in a bucket)
        table = table.set_column(sig, BUCKET_FILE_SCHEMA.field(sig), table.column(sig).cast(pa.binary()))
        table = compact_dictionaries(table).combine_chunks()
        self.writers[b].write_table(table)
        self.written_bytes[b] = self.written_bytes.get(b, 0) + table.nbytes
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


def _part_path(root: str, task: dict[str, Any]) -> str:
    return f"{root}/trajectories/part-{task['task_id']}.parquet"


def _text_bytes(meta: pq.FileMetaData) -> int:
    """The uncompressed bytes of a trajectories part's action and observation columns, from its footer."""
    return sum(rg.column(j).total_uncompressed_size for rg in map(meta.row_group, range(meta.num_row_groups))
               for j in range(rg.num_columns) if rg.column(j).path_in_schema in _TURN_TEXTS)


def _part_records(fs, root: str, task: dict[str, Any], stats: Stats) -> Iterator[tuple[str, int, dict]]:
    with fs.open(_part_path(root, task), "rb") as f:
        part = pq.ParquetFile(f)
        expect_text(_text_bytes(part.metadata))
        keys = Occurrences(task.get("dups"))
        for batch in part.iter_batches(batch_size=256, columns=_PART_COLUMNS):
            for row in batch.to_pylist():
                role = role_of(row["split_key"], task["settings"]["pools"])
                stats.add("dedup.trajectories")
                yield keys.key(row["traj_id"]), role, row


def _records(fs, root: str, task: dict[str, Any], stats: Stats) -> Iterator[tuple[str, int, dict]]:
    if task["source"] == "part":
        return _part_records(fs, root, task, stats)
    return ((ref_id, ROLE_REFERENCE, row) for ref_id, row in iter_references(task["uri"], stats))


def _eval_rows(fs, root: str, task: dict[str, Any]) -> Iterator[dict]:
    """The rows of one trajectories part that are in the eval pool (only those are made Python objects)."""
    with fs.open(_part_path(root, task), "rb") as f:
        table = pq.ParquetFile(f).read(columns=["split_key", *_TURN_TEXTS])  # Parquet column paths
    pools = task["settings"]["pools"]
    evaluation = [role_of(k, pools) != ROLE_TRAIN for k in table.column("split_key").to_pylist()]
    table = table.filter(pa.array(evaluation, pa.bool_()))
    expect_text(table.nbytes)
    yield from table.to_pylist()


EVAL_KEYS_SCHEMA = pa.schema([("key", pa.uint64())])


def run_dedup_evalkeys_task(task: dict[str, Any]) -> dict[str, Any]:
    """The distinct n-gram keys (first halves) of the evaluation records of one part or reference source."""
    fs, root = out_fs(task["out"])
    if task["source"] == "part":
        records = _eval_rows(fs, root, task)
    else:
        records = (row for _, row in iter_references(task["uri"], Stats()))
    keys, count = [np.zeros(0, np.uint64)], 0
    normalize = NormalizeMemo()
    while rows := list(itertools.islice(records, _SIGN_BATCH)):
        keys.extend(gram_keys(rows, task["settings"]["ngram"], normalize))
        count += len(rows)
    distinct_keys = distinct(np.concatenate(keys))
    rel = None
    if len(distinct_keys):
        rel = write_table(fs, root, f"_work/dedup/evalkeys/{task['task_id']}.parquet", EVAL_KEYS_SCHEMA,
                          pa.table({"key": distinct_keys}))
    return {"task_id": task["task_id"], "stage": "dedup-evalkeys", "keys": rel, "rows": count,
            "bytes": 0, "stats": {"dedup.eval_gram_keys": len(distinct_keys)}, "spec_hash": task["spec_hash"]}


EVAL_FILTER = "_work/dedup/evalfilter.bin"
# A bitmap this full or more is reported (at `BITS_PER_KEY` a fitting one is about 3% full).
FILL_NOTICE = 0.1


def run_dedup_evalfilter_task(task: dict[str, Any]) -> dict[str, Any]:
    """Every evaluation key file into one bitmap (`EVAL_FILTER`), which each map task then reads whole."""
    fs, root = out_fs(task["out"])
    grams = GramFilter(task["gram_bits"])
    for rel in task["eval_keys"]:
        grams.add(read_tables(fs, root, [rel], EVAL_KEYS_SCHEMA).column("key").to_numpy())
    write_bytes_atomic(fs, f"{root}/{EVAL_FILTER}", grams.bitmap.tobytes())
    return {"task_id": task["task_id"], "stage": "dedup-evalfilter", "filter": EVAL_FILTER, "gram_bits": grams.bits,
            "fill": grams.fill(), "rows": len(task["eval_keys"]), "bytes": grams.bitmap.nbytes, "stats": {}, "spec_hash": task["spec_hash"]}


def _gram_filter(fs, root: str, task: dict[str, Any]) -> GramFilter | None:
    """The filter of the evaluation records' n-gram keys (None: decontamination is off, keep every row)."""
    if "gram_filter" not in task:
        return None
    with fs.open(f"{root}/{task['gram_filter']}", "rb") as f:
        return GramFilter.of_bitmap(task["gram_bits"], f.read())


def run_dedup_map_task(task: dict[str, Any]) -> dict[str, Any]:
    """Hash one trajectories part (``source: part``) or one reference source (``source: reference``) into buckets."""
    fs, root = out_fs(task["out"])
    settings = task["settings"]
    signer = Signer(settings["shingle"], settings["num_perm"], settings["seed"], settings["bands"], settings["rows"])
    stats = Stats()
    grams = _gram_filter(fs, root, task)
    output = _BucketOutput(fs, root, task["task_id"], settings["buckets"])
    records = _records(fs, root, task, stats)
    rows = 0
    normalize = NormalizeMemo()  # texts repeat within and across trajectories: each normalized once
    try:
        batch = BucketRows()
        while items := list(itertools.islice(records, _SIGN_BATCH)):  # a batch's signatures are computed together
            add_trajectory_rows(batch, items, signer, settings, grams, normalize)
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
              "bucket_bytes": {str(b): n for b, n in sorted(output.written_bytes.items())},
              "stats": stats.to_dict(), "spec_hash": task["spec_hash"]}
    return result


# --- the evalkeys round and the map's tasks -------------------------------------------------------------


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


def source_tasks(ctx: RunContext, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """One task per trajectories part (task id = the ingest task's) and per reference source. A part holding
    ids that other trajectories of the run carry too gets their `pipeline.occurrences.duplicate_offsets`."""
    cfg = ctx.cfg
    base = {"out": cfg["run"]["out"], "settings": settings}
    dups = run_offsets(ctx)
    tasks = []
    for r in ctx.results["ingest"]:
        shared = dups.get(r["task_id"])
        tasks.append({**base, "task_id": r["task_id"], "source": "part",
                      "spec": [settings, r["spec_hash"]] + ([shared] if shared else []),
                      **({"dups": shared} if shared else {})})
    fingerprints = ctx.shared.setdefault("reference_fingerprints", {})  # the evalkeys round and the map: hash once
    for uri in reference_units(list(cfg["dedup"]["decontaminate"])):
        tid = "ref-" + hashlib.sha256(uri.encode()).hexdigest()[:16]
        if uri not in fingerprints:
            fingerprints[uri] = _reference_fingerprint(uri)
        tasks.append({**base, "task_id": tid, "source": "reference", "uri": uri,
                      "spec": [settings, uri, fingerprints[uri]]})
    return tasks


class EvalKeysRound(Stage):
    """Before the map, when decontamination is active: the n-gram keys of the evaluation records, one task per
    part and per reference source (``_work/dedup/evalkeys``), from which each map task builds its filter."""

    name = "dedup-evalkeys"
    sections = ("dedup",)
    small_tasks = True  # a part's texts are read, but only its evaluation records' keys are made
    run_task = staticmethod(run_dedup_evalkeys_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        settings = ctx.shared["dedup"]
        if not settings["decontam"]:
            return None
        tasks = source_tasks(ctx, settings)
        if not settings["pools"]["ratios"].get("eval", 0):  # no eval pool: only the references hold evaluation keys
            tasks = [t for t in tasks if t["source"] == "reference"]
        return tasks


class EvalFilterRound(Stage):
    """After ``dedup-evalkeys``: one task sets the bits of every evaluation key in one bitmap file, so a map task
    reads one file of at most 64 MiB, not every part's keys."""

    name = "dedup-evalfilter"
    sections = ("dedup",)
    small_tasks = True
    run_task = staticmethod(run_dedup_evalfilter_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        if not ctx.shared["dedup"]["decontam"]:
            return None
        keyed = ctx.results.get("dedup-evalkeys") or []
        files = sorted(r["keys"] for r in keyed if r["keys"])
        bits = filter_bits(sum(int(r["stats"].get("dedup.eval_gram_keys", 0)) for r in keyed))
        return [{"out": ctx.cfg["run"]["out"], "task_id": "filter", "eval_keys": files, "gram_bits": bits,
                 "spec": [[r["spec_hash"] for r in keyed], bits]}]

    def finish(self, ctx: RunContext, results: list[dict[str, Any]]) -> None:
        """Say so when the bitmap, at its largest, is too full to leave much out: beyond about 16.8 million
        evaluation keys more training rows reach the reduce (slower, larger work files; no verdict changes)."""
        if not results:  # decontamination is off
            return
        (made,) = results
        if "fill" not in made:  # a marker of an older version: the same bitmap, measured here
            with ctx.fs.open(f"{ctx.root}/{made['filter']}", "rb") as f:
                made["fill"] = GramFilter.of_bitmap(made["gram_bits"], f.read()).fill()
        fill = made["fill"]
        if fill > FILL_NOTICE:
            ctx.echo(f"dedup: the evaluation n-gram bitmap is {fill:.0%} full at its largest size "
                     f"({(1 << made['gram_bits']) // 8 // (1 << 20)} MiB), so about that share of the training "
                     "n-gram rows that no evaluation record holds still reaches the dedup reduce (verdicts are "
                     "unchanged; only the reduce's work grows)")


EVAL_KEYS = EvalKeysRound()
EVAL_FILTER_ROUND = EvalFilterRound()
