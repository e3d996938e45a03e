"""SPEC §11 loader figure: `training.ShardDataset` tokens/s against a raw pyarrow read of the same shards."""

from __future__ import annotations

import glob
import os
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import Figure
from training.dataset import ShardDataset


def raw_tokens(files: list[str]) -> int:
    """Tokens in the shards, read as one Arrow column (the floor)."""
    return sum(int(pc.sum(pc.list_value_length(pq.read_table(f, columns=["input_ids"])["input_ids"])).as_py())
               for f in files)


def loader_tokens(shard_dir: str) -> int:
    """Tokens yielded by one epoch of the shard loader (no shuffle)."""
    ds = ShardDataset(shard_dir, shuffle=False, epochs=1, rank=0, world_size=1)
    return sum(len(s["input_ids"]) for s in ds)


def run(out: str, runs: int, passes: int = 5, pool: str = "cpt") -> Figure:
    """tokens/s(loader) / tokens/s(raw read) over the `pool` shards of a pipeline output."""
    shard_dir = os.path.join(out, "shards", pool)
    files = sorted(glob.glob(os.path.join(shard_dir, "*.parquet")))
    ratios, tokens = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        tokens = sum(raw_tokens(files) for _ in range(passes))
        raw = time.perf_counter() - start
        start = time.perf_counter()
        loaded = sum(loader_tokens(shard_dir) for _ in range(passes))
        mine = time.perf_counter() - start
        if loaded != tokens:
            raise RuntimeError(f"loader yielded {loaded} tokens, the shards hold {tokens}")
        ratios.append(raw / mine)
    return Figure("loader: shard loader / raw Parquet read (tokens/s)", ratios, 0.2, True, unit="%",
                  detail=f"{tokens // passes} tokens in {len(files)} {pool} shard(s), {passes} passes per run")
