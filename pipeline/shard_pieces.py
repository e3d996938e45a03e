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

# What a shard task holds of its bucket's pieces in memory, as decoded Arrow data. Beyond this the pieces go to
# one local file (uncompressed Arrow, in the system's temporary folder) that is memory-mapped: the joins read
# it in place, and the system can drop its pages under memory pressure, which it cannot do with the task's own
# memory. A 41 MB all-turn SFT run holds about 90 MB of pieces in each of its two buckets.
PIECES_BYTES = 256 * 1024 * 1024


class Pieces:
    """The pieces of one bucket: each trajectory's ids and weights as a range of one batch's flat values.

    Use as a context manager: a bucket whose pieces outgrow `limit` keeps them in a local file until exit.
    """

    def __init__(self, fs, files: list[str], limit: int = PIECES_BYTES) -> None:
        from pipeline.sample_task import PIECES_SCHEMA

        self._stack = contextlib.ExitStack()
        self.spilled = False
        batches: list[pa.RecordBatch] = []
        held = 0
        writer = None
        for path in files:
            for batch in ipc_batches(fs, path, PIECES_SCHEMA):
                if writer is None:
                    batches.append(batch)
                    held += batch.nbytes
                    if held > limit:
                        writer, sink, local = self._spill_file()
                        for b in batches:
                            writer.write_batch(b)
                        batches.clear()
                else:
                    writer.write_batch(batch)
        if writer is not None:
            writer.close()
            sink.close()
            reader = pa.ipc.open_file(self._stack.enter_context(pa.memory_map(local, "rb")))
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
            self.spilled = True
        self.where: dict[str, tuple[int, int]] = {}  # key -> (batch, start in its flat values)
        self.ids: list[np.ndarray] = []
        self.weights: list[np.ndarray] = []
        for k, batch in enumerate(batches):
            ids, weights = batch.column("input_ids"), batch.column("loss_weight")
            offsets = ids.offsets.to_numpy()
            if not np.array_equal(offsets, weights.offsets.to_numpy()):
                raise ValueError(f"pieces of bucket files {files}: ids and weights differ in length")
            for key, at in zip(batch.column("key").to_pylist(), offsets[:-1].tolist()):
                self.where[key] = (k, at)
            self.ids.append(ids.values.to_numpy())
            self.weights.append(weights.values.to_numpy())

    def _spill_file(self):
        folder = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="lwm-pieces-"))
        local = os.path.join(folder, "pieces.arrow")
        from pipeline.sample_task import PIECES_SCHEMA

        sink = self._stack.enter_context(pa.OSFile(local, "wb"))
        return pa.ipc.new_file(sink, PIECES_SCHEMA, options=pa.ipc.IpcWriteOptions(compression=None)), sink, local

    def __enter__(self) -> Pieces:
        return self

    def __exit__(self, *exc) -> None:
        self.ids.clear()
        self.weights.clear()
        self._stack.close()


def join_tokens(rows: pa.Table, pieces: Pieces, schema: pa.Schema) -> pa.Table:
    """The shard rows of sample rows (`pipeline.sample_task.part_schema`): each row's ``input_ids`` and
    ``loss_weight`` joined from its ranges of its trajectory's pieces, the other columns as they are."""
    keys = rows.column("pieces_key").to_pylist()
    ranges = rows.column("ranges").combine_chunks()
    bounds = ranges.offsets.to_numpy().tolist()
    flat = ranges.values.to_numpy().tolist()
    ids, weights = [], []
    lengths = np.zeros(rows.num_rows, dtype=np.int64)
    for r, key in enumerate(keys):
        if key not in pieces.where:
            raise ValueError(f"sample {rows.column('sample_id')[r]}: no pieces of trajectory {key!r} in its bucket")
        k, base = pieces.where[key]
        n = 0
        for j in range(bounds[r], bounds[r + 1], 2):
            a, b = base + flat[j], base + flat[j + 1]
            ids.append(pieces.ids[k][a:b])
            weights.append(pieces.weights[k][a:b])
            n += b - a
        lengths[r] = n
    offsets = np.zeros(rows.num_rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    joined = {
        "input_ids": (ids, np.int32),
        "loss_weight": (weights, np.float32),
    }
    columns = []
    for field in schema:
        if field.name in joined:
            parts, dtype = joined[field.name]
            values = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
            columns.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(values), type=field.type))
        else:
            columns.append(rows.column(field.name))
    return pa.Table.from_arrays(columns, schema=schema)


def write_joined(fs, pool: str, files: list[str], writer: AtomicParquetWriter, rows_per_group: int,
                 sort, limit: int = PIECES_BYTES) -> tuple[int, int]:
    """Write a weighted bucket's shard rows into `writer`, sorted by sample id, a row group at a time; returns
    its rows and its longest sample. `files`: the bucket's sample parts (``<task>.arrow``) and pieces
    (``<task>.pieces.arrow``); `sort`: `pipeline.shard_task.sort_tables`."""
    from pipeline.sample_task import part_schema

    part = part_schema(pool)
    rows = [pa.Table.from_batches(list(ipc_batches(fs, p, part)), schema=part)
            for p in files if not p.endswith(".pieces.arrow")]
    table = sort(rows, "sample_id") if rows else part.empty_table()
    longest = int(pc.max(table.column("num_tokens")).as_py() or 0) if table.num_rows else 0
    with Pieces(fs, [p for p in files if p.endswith(".pieces.arrow")], limit) as pieces:
        for at in range(0, table.num_rows, rows_per_group):
            writer.write_table(join_tokens(table.slice(at, rows_per_group), pieces, writer.schema))
    return table.num_rows, longest
