"""The shard task: gather one bucket of one pool, sort by sample id, write ``part-NNNNN.parquet``."""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.outputs import AtomicParquetWriter, out_fs
from schemas.shard import schema_for


def shard_path(root: str, pool: str, bucket: int) -> str:
    return f"{root}/shards/{pool}/part-{bucket:05d}.parquet"


def run_shard_task(task: dict[str, Any]) -> dict[str, Any]:
    """`task`: task_id, out, pool, bucket, spec_hash, compression_level."""
    fs, root = out_fs(task["out"])
    pool, bucket = task["pool"], task["bucket"]
    schema = schema_for(pool)
    src = f"{root}/_work/samples/{pool}/b{bucket:05d}"
    files = sorted(p for p in fs.find(src) if p.endswith(".parquet")) if fs.exists(src) else []
    tables = [pq.read_table(fs.open(p, "rb"), schema=schema) for p in files]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    if table.num_rows:
        table = table.sort_by([("sample_id", "ascending")])
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
