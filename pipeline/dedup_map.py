"""The map step of the dedup stage (``dedup-map``; see `pipeline.dedup_stage`): one task per trajectories part
or reference source hashes its key rows into the bucket files ``_work/dedup/b<NNNNN>/<task_id>.parquet``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.outputs import AtomicParquetWriter, out_fs
from schemas.stats import Stats
from stages.decontam import ROLE_REFERENCE, TRAJECTORY_COLUMNS, iter_references, role_of
from stages.dedup import Signer
from stages.dedup_graph import BUCKET_SCHEMA, BucketRows, add_trajectory_rows

_FLUSH_ROWS = 65_536
_MAX_PENDING_ROWS = 16 * _FLUSH_ROWS  # about 50 MB of n-gram rows: a few larger writes per bucket, not many small ones
_MAX_PENDING_BYTES = 64 << 20  # band rows carry signatures: bound what a map task buffers by bytes too
_SIGN_BATCH = 64


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
