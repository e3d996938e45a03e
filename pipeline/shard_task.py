"""The shard task: gather one bucket of one pool, sort by sample id, write ``part-NNNNN.parquet``.

A weighted pool's bucket holds sample rows and trajectory pieces, joined as the shard is written
(`pipeline.shard_pieces`); the rl pool's holds whole rows, sorted here in slices of at most `SORT_BYTES`.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.outputs import AtomicParquetWriter, ipc_batches, out_fs, zero_filled
from pipeline.shard_pieces import PIECES_BYTES, write_joined
from schemas.shard import schema_for


def shard_path(root: str, pool: str, bucket: int) -> str:
    return f"{root}/shards/{pool}/part-{bucket:05d}.parquet"


def _gather_lists(chunks: list[pa.ListArray], order: np.ndarray) -> pa.ListArray:
    """``concat_arrays(chunks).take(order)`` for lists of numbers without nulls, by copying whole rows out of
    the chunks.

    Arrow's take on a list column builds one index per element (millions for token ids) and gathers them one
    by one, after concatenating the chunks (a copy of every value); the rows here are long, so copying each
    row whole from the chunk that holds it is several times faster and gives the same array.
    """
    if not len(order):
        return pa.array([], type=chunks[0].type)
    # each row's chunk and bounds, for the rows of all chunks in order (offsets index a chunk's `values`, which
    # ignores a slice's offset)
    offsets = [c.offsets.to_numpy() for c in chunks]
    starts = np.concatenate([o[:-1] for o in offsets])[order]
    ends = np.concatenate([o[1:] for o in offsets])[order]
    chunk_of = np.repeat(np.arange(len(chunks)), [len(c) for c in chunks])[order]
    values = [c.values.to_numpy() for c in chunks]
    new_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=new_offsets[1:])
    gathered = np.concatenate([values[k][s:e] for k, s, e in zip(chunk_of.tolist(), starts.tolist(), ends.tolist())])
    return pa.ListArray.from_arrays(pa.array(new_offsets.astype(np.int32)), pa.array(gathered, type=chunks[0].type.value_type))


def sort_table(table: pa.Table, key: str) -> pa.Table:
    """`table.sort_by(key)`, with long lists of numbers (token ids, weights) moved row by row."""
    return sort_tables([table], key)


def sort_tables(tables: list[pa.Table], key: str) -> pa.Table:
    """The rows of `tables` (one schema) as one table sorted by `key`, like ``concat_tables(...).sort_by(key)``.

    Consumes `tables` (the list is emptied): each column is sorted in turn and its unsorted chunks are let go
    before the next one, so a shard task holds about one copy of its rows plus one column, not the parts,
    their concatenation and the sorted copy at once (`run_shard_task` hands it at most `SORT_BYTES` of rows).
    """
    table = pa.concat_tables(tables)
    tables.clear()
    if not table.num_rows:
        return table
    order = pc.sort_indices(table, sort_keys=[(key, "ascending")]).to_numpy()
    schema, columns = table.schema, list(table.columns)
    del table
    return take_rows(columns, schema, order)


def _take_column(col: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """`col` taken at `rows`, as one array."""
    chunks, typ = col.chunks, col.type
    if (pa.types.is_list(typ) and (pa.types.is_integer(typ.value_type) or pa.types.is_floating(typ.value_type))
            and chunks and all(c.null_count == 0 and c.values.null_count == 0 for c in chunks)
            and any(len(c.values) for c in chunks)):
        return _gather_lists(chunks, rows)
    if not chunks:
        return pa.array([], type=typ).take(pa.array(rows, type=pa.int64()))
    arr = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
    return arr.take(pa.array(rows))


def take_rows(unsorted: list[pa.ChunkedArray], schema: pa.Schema, rows: np.ndarray) -> pa.Table:
    """The table of these columns taken at `rows` (``Table.take``), with long lists of numbers (token ids,
    weights) copied row by row out of their chunks (`_gather_lists`).

    Consumes `unsorted` (its entries are let go one by one): a column's old chunks are freed before the next
    column is taken, so where the caller holds no other reference the peak is one copy of the rows plus one column.
    """
    columns = []
    for i in range(len(unsorted)):
        col, unsorted[i] = unsorted[i], None
        columns.append(_take_column(col, rows))
        del col
    return pa.Table.from_arrays(columns, schema=schema)


# What an rl shard task holds of its rows at once, as decoded Arrow data. A bucket larger than this is written in
# slices of its sorted order, each first routed to a local file of its own (one bucket's rows, uncompressed, in
# the system's temporary folder, removed slice by slice), so a worker's peak does not grow with how full the
# buckets of a run happen to be. The files are memory-mapped when read back: no copy, and no lz4 (which took
# 0.28 of a 41 MB SFT shard task's 1.08 s against 0.17 of 0.93 s uncompressed, when SFT rows were sorted here).
SORT_BYTES = 64 * 1024 * 1024
ROWS_PER_GROUP = 512
# Small batches are routed to the slice files together, up to this many bytes (one filter per slice for all).
_ROUTE_BYTES = 8 * 1024 * 1024


# A sample's token lists (ids and weights; an RL prompt's ids): each holds `num_tokens` numbers of 4 bytes, so a
# row's size is known without decoding them (`_row_bytes`). They are nearly all of a bucket's bytes.
TOKEN_LISTS = ("input_ids", "loss_weight", "prompt_ids")


def token_lists(schema: pa.Schema) -> tuple[str, ...]:
    return tuple(name for name in TOKEN_LISTS if name in schema.names)


def _part_batches(fs, path: str, schema: pa.Schema, skip: tuple[str, ...] = ()) -> Iterator[pa.RecordBatch]:
    """The record batches of one sample part, Arrow IPC or (parts of earlier versions) Parquet; without the
    `skip` columns, which are then neither decompressed nor decoded."""
    keep = [i for i, field in enumerate(schema) if field.name not in skip]
    if path.endswith(".arrow"):
        yield from ipc_batches(fs, path, schema, included=keep if skip else None)
    else:
        with fs.open(path, "rb") as f:
            yield from pq.read_table(f, schema=schema, columns=[schema[i].name for i in keep]).to_batches()


def _row_bytes(batch: pa.RecordBatch, schema: pa.Schema) -> np.ndarray:
    """About how many bytes each row of a batch of `schema` takes decoded: fixed widths, plus for every list or
    string its length times the mean size of its elements. A token list (`TOKEN_LISTS`) counts 4 bytes a token
    from ``num_tokens``, so its values need not be read, and the size is the same however the part was read."""
    size = np.zeros(batch.num_rows, dtype=np.float64)
    for field in schema:
        if field.name in TOKEN_LISTS:
            size += zero_filled(batch.column("num_tokens")) * 4.0 + 4
            continue
        col = batch.column(field.name)
        t = col.type
        if pa.types.is_list(t):
            child = col.values
            per = child.nbytes / len(child) if len(child) else 0.0
            size += zero_filled(pc.list_value_length(col)) * per + 4
        elif pa.types.is_string(t) or pa.types.is_binary(t):
            size += zero_filled(pc.binary_length(col)) + 4
        else:
            size += col.nbytes / max(len(col), 1)
    return size


def _slices(order: np.ndarray, row_bytes: np.ndarray, limit: int, group: int) -> np.ndarray:
    """For each row (in part order), which slice of the sorted order holds it: slices are whole row groups
    of the sorted order (so the file's row groups are those of one write) of at most `limit` bytes, or
    one row group where a group alone is larger."""
    sizes = row_bytes[order]
    group_bytes = np.add.reduceat(sizes, np.arange(0, len(sizes), group)) if len(sizes) else sizes
    slice_of_group = np.zeros(len(group_bytes), dtype=np.int64)
    current, held = 0, 0.0
    for g, b in enumerate(group_bytes.tolist()):
        if held and held + b > limit:
            current, held = current + 1, 0.0
        slice_of_group[g] = current
        held += b
    slice_sorted = np.repeat(slice_of_group, group)[: len(order)]
    slice_of_row = np.empty(len(order), dtype=np.int64)
    slice_of_row[order] = slice_sorted
    return slice_of_row


def _spill_slices(fs, files: list[str], schema: pa.Schema, slice_of_row: np.ndarray, folder: str) -> list[str]:
    """One read of the parts, each batch's rows routed to the local file of their slice (Arrow IPC,
    uncompressed: read back memory-mapped); the files' paths in slice order. A slice's file holds its rows in part
    order, as a whole-bucket read would meet them (ties sort the same)."""
    n_slices = int(slice_of_row.max()) + 1
    paths = [os.path.join(folder, f"slice-{s:05d}.arrow") for s in range(n_slices)]
    options = pa.ipc.IpcWriteOptions(compression=None)
    sinks = [pa.OSFile(p, "wb") for p in paths]
    writers = [pa.ipc.new_file(sink, schema, options=options) for sink in sinks]
    pending: list[pa.RecordBatch] = []
    start = 0

    def route() -> None:
        nonlocal start
        rows = sum(b.num_rows for b in pending)
        columns = list(pa.Table.from_batches(pending, schema=schema).columns)
        pending.clear()
        ids = slice_of_row[start:start + rows]
        start += rows
        # the rows grouped by slice, in part order within each (a stable sort), in one gather; then each
        # slice's run is written as it stands (Arrow's filter per slice copied list values one index at a time)
        order = np.argsort(ids, kind="stable")
        grouped = take_rows(columns, schema, order)
        bounds = np.searchsorted(ids[order], np.arange(n_slices + 1))
        for s in range(n_slices):
            if bounds[s + 1] > bounds[s]:
                for piece in grouped.slice(int(bounds[s]), int(bounds[s + 1] - bounds[s])).to_batches():
                    writers[s].write_batch(piece)

    try:
        for p in files:
            for batch in _part_batches(fs, p, schema):
                pending.append(batch)
                if sum(b.nbytes for b in pending) >= _ROUTE_BYTES:
                    route()
        if pending:
            route()
    finally:
        for writer, sink in zip(writers, sinks):
            writer.close()
            sink.close()
    return paths


def _result(task: dict[str, Any], fs, root: str, path: str, num_rows: int, max_tokens: int, digest: str) -> dict[str, Any]:
    # max_tokens: the longest sample, so a trainer can compare it with its row length before reading a row
    info = {"path": posixpath.relpath(path, root), "rows": num_rows, "bytes": fs.size(path), "sha256": digest,
            "max_tokens": int(max_tokens)}
    return {"task_id": task["task_id"], "stage": "shards", "shard": info, "rows": num_rows,
            "bytes": info["bytes"], "spec_hash": task["spec_hash"], "stats": {}, "outputs": {info["path"]: info["bytes"]}}


def _weighted_shard(task: dict[str, Any], fs, root: str, src: str) -> dict[str, Any]:
    files = sorted(p for p in fs.find(src) if p.endswith(".arrow")) if fs.exists(src) else []
    path = shard_path(root, task["pool"], task["bucket"])
    with AtomicParquetWriter(fs, path, schema_for(task["pool"]), rows_per_group=ROWS_PER_GROUP,
                             compression_level=task.get("compression_level", 3), digest=True) as w:
        num_rows, max_tokens = write_joined(fs, task["pool"], files, w, ROWS_PER_GROUP, sort_tables,
                                            int(task.get("pieces_bytes", PIECES_BYTES)))
    return _result(task, fs, root, path, num_rows, max_tokens, w.sha256())


def run_shard_task(task: dict[str, Any]) -> dict[str, Any]:
    """`task`: task_id, out, pool, bucket, spec_hash, compression_level; optional sort_bytes (`SORT_BYTES`) and
    pieces_bytes (`PIECES_BYTES`).

    The rows of the bucket's parts, sorted by ``sample_id``, in row groups of `ROWS_PER_GROUP`. A weighted
    pool's rows are joined from its trajectories' pieces (`write_joined`). An rl bucket
    that fits in ``sort_bytes`` is sorted whole. A larger one is read once for its sample ids and row sizes,
    cut into slices of its sorted order, read again to route each row to a local file of its slice
    (`_spill_slices`), and each slice is sorted and appended on its own: the same file, holding about
    ``sort_bytes`` of rows instead of the whole bucket.
    """
    fs, root = out_fs(task["out"])
    pool, bucket = task["pool"], task["bucket"]
    limit = int(task.get("sort_bytes", SORT_BYTES))
    schema = schema_for(pool)
    src = f"{root}/_work/samples/{pool}/b{bucket:05d}"
    if pool != "rl":
        return _weighted_shard(task, fs, root, src)
    # .parquet: parts written by earlier versions of lwmkit, still read so a run resumed across the upgrade loses nothing
    files = sorted(p for p in fs.find(src) if p.endswith((".arrow", ".parquet"))) if fs.exists(src) else []
    held: list[pa.RecordBatch] | None = []  # the bucket's batches while they fit in `limit`
    held_bytes = 0
    keys: list[str] = []  # copies, so no batch stays alive through a view of its buffers
    sizes, max_tokens = [], 0
    for p in files:
        # once the bucket is known to be too large to sort whole, the rest of the first read is for the ids and
        # sizes alone (the spill reads every part again in full)
        for batch in _part_batches(fs, p, schema, token_lists(schema) if held is None else ()):
            keys += batch.column("sample_id").to_pylist()
            sizes.append(_row_bytes(batch, schema))
            max_tokens = max(max_tokens, pc.max(batch.column("num_tokens")).as_py() or 0)
            if held is not None:
                held.append(batch)
                held_bytes += batch.nbytes
                if held_bytes > limit:
                    held = None  # too large to sort whole: keep only what the slices need
    path = shard_path(root, pool, bucket)
    num_rows = 0
    with AtomicParquetWriter(fs, path, schema, rows_per_group=ROWS_PER_GROUP,
                             compression_level=task.get("compression_level", 3), digest=True) as w:
        if held is not None:
            tables = [pa.Table.from_batches(held, schema=schema)] if held else []
            held = None
            table = sort_tables(tables, "sample_id") if tables else schema.empty_table()
            num_rows = table.num_rows
            w.write_table(table)
            del table
        else:
            order = pc.sort_indices(pa.array(keys, type=pa.string())).to_numpy()
            slice_of_row = _slices(order, np.concatenate(sizes), limit, ROWS_PER_GROUP)
            with tempfile.TemporaryDirectory(prefix="lwm-shard-") as spill:
                paths = _spill_slices(fs, files, schema, slice_of_row, spill)
                for spilled in paths:
                    with pa.memory_map(spilled, "rb") as f:
                        pieces = [pa.ipc.open_file(f).read_all()]
                    part = sort_tables(pieces, "sample_id")  # a copy: the mapped rows are let go here
                    num_rows += part.num_rows
                    w.write_table(part)
                    del part
                    os.remove(spilled)  # once unmapped (a mapped file cannot be removed on Windows)
    return _result(task, fs, root, path, num_rows, max_tokens, w.sha256())
