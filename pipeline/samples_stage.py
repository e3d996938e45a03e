"""The samples and shards stages: samples per pool (map) and shards per bucket (reduce).

They run after dedup, with the model-in-the-loop stages before them and the WMAT pools after them when
those are configured.
"""

from __future__ import annotations

import math
from typing import Any

from pipeline.engine import RunContext, Step, run_stage, spec_hash
from pipeline.llm_stage import LLM, llm_enabled, run_llm_stages
from pipeline.sample_task import SAMPLES, duplicate_offsets
from pipeline.shard_task import SHARDS
from pipeline.wmat_pools import WMAT_POOLS_STAGE, run_wmat_pools
from schemas.stats import merge_all
from stages.histogram import histogram_from_stats
from stages.pools import POOLS
from stages.tokenizer import load_tokenizer

_EVAL_SAMPLES_PER_TRAJ = 2.5  # five chosen turns, half kept
_CHARS_PER_TOKEN = 3.5
_BYTES_PER_TOKEN = 5  # id + weight after zstd, measured on the demo corpus to within ~2x


def bucket_counts(cfg: dict[str, Any], stats) -> dict[str, int]:
    """Shards per pool from exact input-derived counts: bounded rows and bytes per file.

    A function of the input and the config only, so the layout never depends on the executor.
    """
    n_traj = stats.get("trajectories.kept")
    n_turns = stats.get("turns.kept")
    chars = stats.get("chars.kept")
    ratios = cfg["pools"]["ratios"]
    total_ratio = sum(ratios.values()) or 1.0
    avg_turns = n_turns / n_traj if n_traj else 0.0
    k = cfg["pools"]["sft_turns"]
    out = {}
    for pool in POOLS:
        share = ratios.get(pool, 0.0) / total_ratio
        if pool == "cpt":
            rows, prefix = n_traj * share, 1.0
        elif pool == "sft":
            per = avg_turns if k == "all" else min(float(k), avg_turns)
            rows, prefix = n_traj * share * per, 0.5 * per if k != "all" else (avg_turns + 1) / 2
        elif pool == "eval":
            rows, prefix = n_traj * share * _EVAL_SAMPLES_PER_TRAJ, 0.5 * _EVAL_SAMPLES_PER_TRAJ
        else:
            rows, prefix = n_traj * share, 0.5
        est_bytes = chars * share * prefix / _CHARS_PER_TOKEN * _BYTES_PER_TOKEN
        by_rows = math.ceil(rows / cfg["shards"]["max_rows"])
        by_bytes = math.ceil(est_bytes / cfg["shards"]["target_bytes"])
        out[pool] = max(1, by_rows, by_bytes)
    return out


def run_sample_stages(cfg: dict[str, Any], fs, root: str, executor, ingest_results, manifest, stage_runs, echo) -> None:

    progress = cfg["executor"]["progress"]
    ingest_stats = merge_all([r["stats"] for r in ingest_results])
    buckets = bucket_counts(cfg, ingest_stats)
    sample_hash = spec_hash(SAMPLES.config(cfg), buckets)
    # The sample tasks read dedup/removed.parquet themselves; their specs hold its digest, not its ids.
    removed = _removed_digest(fs, root)
    drop = _drop_list(fs, root) if llm_enabled(cfg) else set()
    llm = run_llm_stages(cfg, fs, root, executor, ingest_results, manifest, stage_runs, echo, drop)
    dups = duplicate_offsets(fs, root, [r["task_id"] for r in ingest_results])  # trajectories sharing an id
    tasks = []
    for r in ingest_results:
        shared = dups.get(r["task_id"], {})
        spec = [sample_hash, r["spec_hash"], removed] + ([shared] if shared else [])
        spec += [llm["specs"][r["task_id"]]] if llm else []
        tasks.append({"task_id": r["task_id"], "out": cfg["run"]["out"], "cfg": cfg, "buckets": buckets,
                      "removed": removed, "dups": shared, "spec_hash": spec_hash(*spec),
                      **({"llm": {"stages": llm["stages"]}} if llm else {})})
    sample_results, stage_runs["samples"] = run_stage(executor, SAMPLES, None, tasks, fs, root, progress)
    shard_spec = spec_hash(sample_hash, [r["spec_hash"] for r in sample_results])
    shard_tasks = [
        {"task_id": f"{pool}-{b:05d}", "out": cfg["run"]["out"], "pool": pool, "bucket": b,
         "compression_level": cfg["shards"]["compression_level"], "spec_hash": shard_spec}
        for pool in POOLS
        for b in range(buckets[pool])
    ]
    shard_results, stage_runs["shards"] = run_stage(executor, SHARDS, None, shard_tasks, fs, root, progress)
    _stale_shards(fs, root, {r["shard"]["path"] for r in shard_results})
    if llm:
        run_wmat_pools(cfg, fs, root, executor, llm, drop, manifest, stage_runs)
    stats = merge_all([r["stats"] for r in sample_results])
    tok = load_tokenizer(cfg["tokenizer"]["spec"], cfg["tokenizer"]["engine"] or None)
    counts = manifest["counts"]
    nested = stats.nested()
    for key in ("samples", "tokens", "templates", "pools", "filtered", "turns"):
        if key in nested:
            if isinstance(counts.get(key), dict):
                counts[key] = {**counts[key], **nested[key]}
            else:
                counts[key] = nested[key]
    n_removed = _removed_count(fs, root)
    if n_removed:
        counts.setdefault("dedup", {})["removed"] = n_removed
    manifest["tokenizer"] = tok.describe()
    manifest["buckets"] = buckets
    manifest["histogram"] = histogram_from_stats(stats)
    manifest["shards"] = [r["shard"] for r in shard_results]


def _drop_list(fs, root: str) -> set[str]:
    """Trajectory ids removed by the dedup stage, when it ran (``dedup/removed.parquet``)."""
    path = f"{root}/dedup/removed.parquet"
    if not fs.exists(path):
        return set()
    import pyarrow.parquet as pq

    return set(pq.read_table(fs.open(path, "rb"), columns=["traj_id"]).column("traj_id").to_pylist())


def _removed_digest(fs, root: str) -> str:
    """sha256 of ``dedup/removed.parquet`` (read in blocks; "" without one): what the sample tasks' output depends on."""
    import hashlib

    path = f"{root}/dedup/removed.parquet"
    if not fs.exists(path):
        return ""
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _removed_count(fs, root: str) -> int:
    path = f"{root}/dedup/removed.parquet"
    if not fs.exists(path):
        return 0
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as f:
        return pq.ParquetFile(f).metadata.num_rows


def _stale_shards(fs, root: str, keep: set[str]) -> None:
    """Remove shards of an earlier run with another layout, so the folder holds exactly the listed ones."""
    import posixpath

    base = f"{root}/shards"
    if not fs.exists(base):
        return
    for p in fs.find(base):
        if posixpath.relpath(p, root) not in keep:
            fs.rm(p)


def _run_samples(ctx: RunContext) -> None:
    run_sample_stages(ctx.cfg, ctx.fs, ctx.root, ctx.executor, ctx.ingest_results, ctx.manifest, ctx.stage_runs,
                      ctx.echo)


# The model-in-the-loop stages (when configured) run first, the WMAT pools (when their blocks exist) last.
SAMPLES_STEP = Step("samples", (LLM, SAMPLES, SHARDS, WMAT_POOLS_STAGE), _run_samples)
