"""The sample task: one trajectories part → samples of every pool, hashed into shard buckets.

Together with the shard task this is the final deterministic repartition as a shuffle: each
sample task writes ``_work/samples/<pool>/b<bucket>/<task>.arrow`` (bucket = stable hash of the
sample id), and one shard task per bucket gathers, sorts and writes a shard. No step collects
samples on the driver, and the shard a sample lands in depends only on its id.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from masking import load_table
from pipeline.engine import marker_path, spare_cpus
from pipeline.llm_stage import Augment
from pipeline.outputs import AtomicIpcWriter, out_fs, task_id_of, zero_filled
from pipeline.task_process import collector_paused
from schemas.shard import schema_for
from schemas.stats import Stats
from schemas.trajectory import Trajectory
from stages.sample_rows import bucket_of, build_rows, rows_table, sample_key, word_set_memo
from stages.tokenizer import load_tokenizer
from stages.tokenizer.ahead import EncodeAhead
from stages.tokenizer.segments import segment_tokenizer

_ROWS_PER_GROUP = 256
# Rows held for all buckets together before the fullest is written out: a run with more buckets (a larger
# input) holds no more rows for them than a run with one.
_PENDING_BYTES = 16 * 1024 * 1024


def _row_bytes(row: dict[str, Any]) -> int:
    """About what a row holds: its arrays, its strings, and 8 bytes per item of its other lists."""
    size = 0
    for v in row.values():
        if isinstance(v, np.ndarray):
            size += v.nbytes
        elif isinstance(v, str):
            size += len(v)
        elif isinstance(v, list):
            size += 8 * len(v)
    return size


class SampleWriter:
    """Lazily opened bucket files of one task; rows are buffered and written as tables (`rows_table`).

    A bucket is written out at `_ROWS_PER_GROUP` rows, and the fullest one (by bytes) whenever all of them
    together hold more than `_PENDING_BYTES`.
    """

    def __init__(self, fs, root: str, task_id: str, buckets: dict[str, int]) -> None:
        self.fs, self.root, self.task_id, self.buckets = fs, root, task_id, buckets
        self.writers: dict[tuple[str, int], AtomicIpcWriter] = {}
        self.pending: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.pending_bytes: dict[tuple[str, int], int] = {}
        self.held = 0  # the sum of `pending_bytes`

    def write(self, pool: str, row: dict[str, Any]) -> None:
        b = bucket_of(row["sample_id"], self.buckets[pool])
        key = (pool, b)
        if key not in self.writers:
            path = f"{self.root}/_work/samples/{pool}/b{b:05d}/{self.task_id}.arrow"
            self.writers[key] = AtomicIpcWriter(self.fs, path, schema_for(pool), rows_per_batch=_ROWS_PER_GROUP)
            self.pending[key] = []
            self.pending_bytes[key] = 0
        rows = self.pending[key]
        rows.append(row)
        size = _row_bytes(row)
        self.pending_bytes[key] += size
        self.held += size
        if len(rows) >= _ROWS_PER_GROUP:
            self._flush(key)
        while self.held > _PENDING_BYTES:
            self._flush(max(self.pending_bytes, key=self.pending_bytes.__getitem__))

    def _flush(self, key: tuple[str, int]) -> None:
        rows = self.pending[key]
        if rows:
            w = self.writers[key]
            w.write_table(rows_table(rows, w.schema))
            self.pending[key] = []
            self.held -= self.pending_bytes[key]
            self.pending_bytes[key] = 0

    def close(self) -> None:
        for key, w in self.writers.items():
            self._flush(key)
            w.close()

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()


def duplicate_offsets(fs, root: str, task_ids: list[str]) -> dict[str, dict[str, int]]:
    """Per trajectories part, for each ``traj_id`` that more than one trajectory of the run carries:
    how many of them come in earlier parts (parts in task-id order, rows in file order).

    Only parts holding such ids appear; a run without shared ids gets ``{}``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = {}
    for tid in sorted(task_ids):
        path = f"{root}/trajectories/part-{tid}.parquet"
        if fs.exists(path):
            columns[tid] = pq.read_table(fs.open(path, "rb"), columns=["traj_id"]).column("traj_id")
    if not columns:
        return {}
    counts = pc.value_counts(pa.chunked_array([c for col in columns.values() for c in col.chunks],
                                              type=pa.string()))
    shared = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
    if len(shared) == 0:
        return {}
    seen: dict[str, int] = {}
    out: dict[str, dict[str, int]] = {}
    for tid, col in columns.items():
        ids = pc.filter(col, pc.is_in(col, value_set=shared)).to_pylist()
        if ids:
            out[tid] = {t: seen.get(t, 0) for t in sorted(set(ids))}
            for t in ids:
                seen[t] = seen.get(t, 0) + 1
    return out


def removed_ids(fs, root: str) -> set[str]:
    """Trajectory ids the dedup stage removed (``dedup/removed.parquet``; none when dedup did not run)."""
    path = f"{root}/dedup/removed.parquet"
    if not fs.exists(path):
        return set()
    with fs.open(path, "rb") as f:
        return set(pq.read_table(f, columns=["traj_id"]).column("traj_id").to_pylist())


def remove_earlier_outputs(fs, root: str, task_id: str) -> int:
    """Delete the bucket files an earlier run of this task wrote, its marker first; returns how many files.

    A task run again (its spec changed: other pool ratios, bucket counts, masking) writes only the buckets its
    rows now go to, and a shard reads every file in its bucket's folder: a file of the earlier run in a
    bucket this run leaves empty (the eval pool turned off, one bucket fewer) would put stale rows in a shard.
    The earlier marker goes first, so a run interrupted after this cannot skip the task as finished."""
    base = f"{root}/_work/samples"
    if not fs.exists(base):
        return 0
    marker = marker_path(root, "samples", task_id)
    if fs.exists(marker):
        fs.rm(marker)
    mine = [p for p in fs.find(base) if task_id_of(p) == task_id]
    for p in mine:
        fs.rm(p)
    return len(mine)


_ROWS_READ = 64  # trajectories decoded into Python at a time


def _rows(batches: Iterable[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    for batch in batches:
        yield from batch.to_pylist()


def _part_rows(fs, path: str, seg, tok, stack: contextlib.ExitStack) -> tuple[Iterator[dict[str, Any]], EncodeAhead | None]:
    """The part's trajectories as dicts, in file order; and, where this process has a CPU to spare and the
    tokenizer encodes without the GIL, the `EncodeAhead` (entered on `stack`) that tokenizes their
    observations on a second thread (the part is then read whole, once, for both threads)."""
    if not (spare_cpus() and getattr(tok, "encodes_without_gil", False)):
        return _rows(pq.ParquetFile(stack.enter_context(fs.open(path, "rb"))).iter_batches(batch_size=_ROWS_READ)), None
    with fs.open(path, "rb") as f:
        part = pq.read_table(f)
    ahead = stack.enter_context(EncodeAhead(seg, _observations(seg, part.column("turns"))))
    return _rows(part.to_batches(max_chunksize=_ROWS_READ)), ahead


def _observations(seg, turns: pa.ChunkedArray) -> Iterator[list[str]]:
    """Each row's observations as the samples tokenize them (normalized), for `EncodeAhead`. Only the
    observation strings become Python objects (on the thread, this work holds the GIL)."""
    for start in range(0, len(turns), _ROWS_READ):
        rows = turns.slice(start, _ROWS_READ)
        counts = zero_filled(pc.list_value_length(rows)).tolist()
        texts = pc.struct_field(pc.list_flatten(rows), "observation").to_pylist()
        at = 0
        for n in counts:
            yield [seg.norm(t or "") for t in texts[at:at + n]]
            at += n


def run_sample_task(task: dict[str, Any]) -> dict[str, Any]:
    """Samples of one trajectories part. `task`: task_id, out, cfg, buckets, spec_hash, removed (the digest of
    ``dedup/removed.parquet``, whose ids the task reads itself), dups (`duplicate_offsets` of this part).

    Python's cycle collector is paused while the task runs (`collector_paused`), unless it augments samples
    through a model (whose client calls are left to the collector): building samples makes no cycles, but
    the collector walked the task's memos and buffered rows over and over (4% of a sample task's time on the
    demo corpus).
    """
    with contextlib.nullcontext() if task.get("llm") else collector_paused():
        return _run_sample_task(task)


def _run_sample_task(task: dict[str, Any]) -> dict[str, Any]:
    cfg = task["cfg"]
    fs, root = out_fs(task["out"])
    tok = load_tokenizer(cfg["tokenizer"]["spec"], cfg["tokenizer"]["engine"] or None)
    seg = segment_tokenizer(tok)
    table = load_table(cfg["masking"]["table"])
    stats = Stats()
    words = word_set_memo()  # texts repeat within and across trajectories: each scanned once while kept
    drop = removed_ids(fs, root)
    dups = dict(task.get("dups") or {})
    remove_earlier_outputs(fs, root, task["task_id"])
    writer = SampleWriter(fs, root, task["task_id"], task["buckets"])
    aug = None
    if task.get("llm"):
        aug = Augment(cfg, fs, root, task["task_id"], task["llm"]["stages"])
    path = f"{root}/trajectories/part-{task['task_id']}.parquet"
    verify = True
    try:
        with contextlib.ExitStack() as stack:
            rows, ahead = _part_rows(fs, path, seg, tok, stack)
            for index, d in enumerate(rows):
                if ahead is not None:
                    ahead.at(index)
                traj = Trajectory.from_dict(d)
                key = traj.traj_id
                if key in dups:
                    dups[key] += 1
                    key = sample_key(key, dups[key])
                if traj.traj_id in drop:
                    continue
                shipped = False
                for pool, row in build_rows(traj, cfg, seg, table, stats, verify, key, aug, words):
                    writer.write(pool, row)
                    shipped = True
                if shipped:  # the trajectory reaches the shards (counted for the run summary)
                    stats.add("pools.trajectories_in_shards")
                verify = False
        writer.close()
    except BaseException:
        writer.abort()
        raise
    stats.add("tokenizer.chars", seg.counter.chars)
    result = {"task_id": task["task_id"], "stage": "samples", "stats": stats.to_dict(),
              "rows": int(sum(v for k, v in stats.to_dict().items() if k.startswith("samples.") and k.count(".") == 1)),
              "bytes": 0, "spec_hash": task["spec_hash"]}
    return result

