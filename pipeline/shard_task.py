"""The shard task: gather one bucket of one pool, sort by sample id, write ``part-NNNNN.parquet``."""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.outputs import AtomicParquetWriter, out_fs, read_ipc
from schemas.shard import schema_for


def shard_path(root: str, pool: str, bucket: int) -> str:
    return f"{root}/shards/{pool}/part-{bucket:05d}.parquet"


def _gather_lists(arr: pa.ListArray, order: np.ndarray) -> pa.ListArray:
    """`arr.take(order)` for a list of numbers without nulls, by copying whole rows.

    Arrow's take on a list column builds one index per element (millions for token ids) and
    gathers them one by one; the rows here are long, so slicing each row whole is several times
    faster and gives the same array.
    """
    offsets = arr.offsets.to_numpy()  # indexes `arr.values`, which ignores a slice offset
    values = arr.values.to_numpy()
    starts, ends = offsets[order], offsets[order + 1]
    new_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=new_offsets[1:])
    gathered = np.concatenate([values[s:e] for s, e in zip(starts.tolist(), ends.tolist())])
    return pa.ListArray.from_arrays(pa.array(new_offsets.astype(np.int32)), pa.array(gathered, type=arr.type.value_type))


def sort_table(table: pa.Table, key: str) -> pa.Table:
    """`table.sort_by(key)`, with long lists of numbers (token ids, weights) moved row by row."""
    return sort_tables([table], key)


def sort_tables(tables: list[pa.Table], key: str) -> pa.Table:
    """The rows of `tables` (one schema) as one table sorted by `key`, like ``concat_tables(...).sort_by(key)``.

    Consumes `tables` (the list is emptied): each column is sorted in turn and its unsorted chunks are let go
    before the next one, so a shard task holds about one copy of its rows plus one column, not the parts,
    their concatenation and the sorted copy at once (the largest tasks, shards of up to
    ``shards.target_bytes``, set the peak memory of a worker).
    """
    table = pa.concat_tables(tables)
    tables.clear()
    if not table.num_rows:
        return table
    order = pc.sort_indices(table, sort_keys=[(key, "ascending")])
    order_np = order.to_numpy()
    schema = table.schema
    unsorted = list(table.columns)
    del table
    columns = []
    for i in range(len(unsorted)):
        col, unsorted[i] = unsorted[i], None
        arr = col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks)
        del col
        if (pa.types.is_list(arr.type) and (pa.types.is_integer(arr.type.value_type) or pa.types.is_floating(arr.type.value_type))
                and arr.null_count == 0 and arr.values.null_count == 0 and len(arr.values) > 0):
            columns.append(_gather_lists(arr, order_np))
        else:
            columns.append(arr.take(order))
        del arr
    return pa.Table.from_arrays(columns, schema=schema)


def run_shard_task(task: dict[str, Any]) -> dict[str, Any]:
    """`task`: task_id, out, pool, bucket, spec_hash, compression_level."""
    fs, root = out_fs(task["out"])
    pool, bucket = task["pool"], task["bucket"]
    schema = schema_for(pool)
    src = f"{root}/_work/samples/{pool}/b{bucket:05d}"
    # .parquet: parts written by earlier versions of lwmkit, still read so a run resumed across the upgrade loses nothing
    files = sorted(p for p in fs.find(src) if p.endswith((".arrow", ".parquet"))) if fs.exists(src) else []
    tables = [read_ipc(fs, p, schema) if p.endswith(".arrow") else pq.read_table(fs.open(p, "rb"), schema=schema)
              for p in files]
    table = sort_tables(tables, "sample_id") if tables else schema.empty_table()
    path = shard_path(root, pool, bucket)
    with AtomicParquetWriter(fs, path, schema, rows_per_group=512,
                             compression_level=task.get("compression_level", 3)) as w:
        w.write_table(table)
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    info = {
        "path": posixpath.relpath(path, root),
        "rows": table.num_rows,
        "bytes": fs.size(path),
        "sha256": digest.hexdigest(),
    }
    if "num_tokens" in table.column_names:
        # the longest sample, so a trainer can compare it with its row length before reading a row
        info["max_tokens"] = int(pc.max(table.column("num_tokens")).as_py() or 0)
    result = {"task_id": task["task_id"], "stage": "shards", "shard": info, "rows": table.num_rows,
              "bytes": info["bytes"], "spec_hash": task["spec_hash"], "stats": {}}
    return result
