"""A weighted pool's shard: its samples' rows sorted by sample id, their tokens joined from the trajectories' pieces.

The sample tasks write a trajectory's pieces once and each sample as ranges of them (`pipeline.sample_task`);
the shard task of a bucket reads the bucket's pieces (`Pieces`), sorts the sample rows, which hold no tokens
and are small, and joins each row group's tokens as it writes it (`join_tokens`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.outputs import AtomicParquetWriter, ipc_batches
from pipeline.sample_task import PIECES_SCHEMA, part_schema

# What a shard task holds of its bucket's pieces in memory, as decoded Arrow data. Beyond this the pieces go to
# one local file (their raw ids and weights, in the system's temporary folder), and each row group reads the ranges
# it joins straight into its own arrays, so a worker's peak does not grow with how full the buckets of a run happen
# to be. (Not a memory map: a mapped file's pages count in the worker's memory once touched, and the page cache
# maps them in large runs: one row group of 512 cpt samples, 13 MiB of tokens, mapped 160 MB of a 200 MB file.)
# A 41 MB all-turn SFT run holds about 90 MB of pieces in each of its two buckets; a cpt bucket of the 0.2 GB demo
# corpus about 200 MB.
PIECES_BYTES = 128 * 1024 * 1024

_IDS, _WEIGHTS = np.dtype(np.int32), np.dtype(np.float32)


class Pieces:
    """The pieces of one bucket: each trajectory's ids and weights as a range of one batch's flat values, held in
    memory or (beyond `limit` bytes) in a local file. Use as a context manager: the file is removed on exit."""

    def __init__(self, fs, files: list[str], limit: int = PIECES_BYTES) -> None:
        self._stack = contextlib.ExitStack()
        self._file = None  # the local file's descriptor, once spilled
        self.where: dict[str, tuple[int, int]] = {}  # key -> (batch, start in its flat values)
        self.ids: list[np.ndarray] = []  # per batch, while held in memory
        self.weights: list[np.ndarray] = []
        self.at: list[tuple[int, int]] = []  # per batch, once spilled: where its ids and its weights begin
        self._end = 0  # bytes written to the local file
        self.lengths: list[int] = []  # per batch: its values
        held = 0
        try:
            for path in files:
                for batch in ipc_batches(fs, path, PIECES_SCHEMA):
                    self._add(batch, files)
                    held += batch.nbytes
                    if self._file is None and held > limit:
                        self._spill()
        except BaseException:
            self._stack.close()
            raise

    def _add(self, batch: pa.RecordBatch, files: list[str]) -> None:
        ids, weights = batch.column("input_ids"), batch.column("loss_weight")
        offsets = ids.offsets.to_numpy()
        if not np.array_equal(offsets, weights.offsets.to_numpy()):
            raise ValueError(f"pieces in {files}: ids and weights differ in length")
        k = len(self.lengths)
        for key, at in zip(batch.column("key").to_pylist(), offsets[:-1].tolist()):
            self.where[key] = (k, at)
        self.lengths.append(len(ids.values))
        self.ids.append(ids.values.to_numpy())
        self.weights.append(weights.values.to_numpy())
        if self._file is not None:
            self._write(k)

    def _spill(self) -> None:
        folder = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="lwm-pieces-"))
        self._file = os.open(os.path.join(folder, "pieces.bin"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self._stack.callback(os.close, self._file)
        for k in range(len(self.lengths)):
            self._write(k)
        pa.default_memory_pool().release_unused()  # the decoded batches just written out

    def _write(self, k: int) -> None:
        start = self._end
        for values in (self.ids[k], self.weights[k]):
            data = memoryview(np.ascontiguousarray(values)).cast("B")
            while data:
                n = os.pwrite(self._file, data, self._end)
                data = data[n:]
                self._end += n
        self.at.append((start, start + self.lengths[k] * _IDS.itemsize))
        self.ids[k] = self.weights[k] = None  # let go of the batch's values

    @property
    def spilled(self) -> bool:
        return self._file is not None

    def copy(self, k: int, a: int, b: int, ids: np.ndarray, weights: np.ndarray, pos: int) -> None:
        """Values ``[a, b)`` of batch `k` into `ids` and `weights` (flat arrays of a row group) from `pos` on."""
        if not 0 <= a <= b <= self.lengths[k]:
            raise ValueError(f"a range [{a}, {b}) beyond the {self.lengths[k]} values of its pieces")
        n = b - a
        if self._file is None:
            ids[pos:pos + n] = self.ids[k][a:b]
            weights[pos:pos + n] = self.weights[k][a:b]
            return
        for out, start, size in ((ids, self.at[k][0], _IDS.itemsize), (weights, self.at[k][1], _WEIGHTS.itemsize)):
            view = memoryview(out[pos:pos + n]).cast("B")
            got = os.preadv(self._file, [view], start + a * size)
            if got != len(view):
                raise OSError(f"pieces file: read {got} of {len(view)} bytes")

    def __enter__(self) -> Pieces:
        return self

    def __exit__(self, *exc) -> None:
        self.ids.clear()
        self.weights.clear()
        self.where.clear()
        self._stack.close()


def join_tokens(rows: pa.Table, pieces: Pieces, schema: pa.Schema) -> pa.Table:
    """The shard rows of sample rows (`pipeline.sample_task.part_schema`): each row's ``input_ids`` and
    ``loss_weight`` joined from its ranges of its trajectory's pieces, the other columns as they are."""
    keys = rows.column("pieces_key").to_pylist()
    ranges = rows.column("ranges").combine_chunks()
    bounds = ranges.offsets.to_numpy().tolist()
    flat = ranges.values.to_numpy()
    starts, ends = flat[0::2].astype(np.int64), flat[1::2].astype(np.int64)
    joined_before = np.concatenate([[0], np.cumsum(ends - starts)])  # values of the ranges before each range
    offsets = joined_before[np.asarray(bounds, dtype=np.int64) // 2]
    ids = np.empty(int(offsets[-1]), dtype=_IDS)
    weights = np.empty(int(offsets[-1]), dtype=_WEIGHTS)
    pos = 0
    starts_l, ends_l = starts.tolist(), ends.tolist()
    for r, key in enumerate(keys):
        if key not in pieces.where:
            raise ValueError(f"sample {rows.column('sample_id')[r]}: no pieces of trajectory {key!r} in its bucket")
        k, base = pieces.where[key]
        for j in range(bounds[r] // 2, bounds[r + 1] // 2):
            pieces.copy(k, base + starts_l[j], base + ends_l[j], ids, weights, pos)
            pos += ends_l[j] - starts_l[j]
    offsets32 = pa.array(offsets.astype(np.int32))
    joined = {"input_ids": ids, "loss_weight": weights}
    columns = []
    for field in schema:
        if field.name in joined:
            columns.append(pa.ListArray.from_arrays(offsets32, pa.array(joined[field.name]), type=field.type))
        else:
            columns.append(rows.column(field.name))
    return pa.Table.from_arrays(columns, schema=schema)


def write_joined(fs, pool: str, files: list[str], writer: AtomicParquetWriter, rows_per_group: int,
                 sort, limit: int = PIECES_BYTES) -> tuple[int, int]:
    """Write a weighted bucket's shard rows into `writer`, sorted by sample id, a row group at a time; returns
    its rows and its longest sample. `files`: the bucket's sample parts (``<task>.arrow``) and pieces
    (``<task>.pieces.arrow``); `sort`: `pipeline.shard_task.sort_tables`."""
    part = part_schema(pool)
    rows = [pa.Table.from_batches(list(ipc_batches(fs, p, part)), schema=part)
            for p in files if not p.endswith(".pieces.arrow")]
    table = sort(rows, "sample_id") if rows else part.empty_table()
    longest = int(pc.max(table.column("num_tokens")).as_py() or 0) if table.num_rows else 0
    with Pieces(fs, [p for p in files if p.endswith(".pieces.arrow")], limit) as pieces:
        for at in range(0, table.num_rows, rows_per_group):
            writer.write_table(join_tokens(table.slice(at, rows_per_group), pieces, writer.schema))
    return table.num_rows, longest
