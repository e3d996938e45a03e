"""The samples and shards stages: samples per pool (map) and shards per bucket (reduce).

They run after dedup, with the model-in-the-loop stages before them and the WMAT pools after them when
those are configured (`pipeline.run.PLAN`).
"""

from __future__ import annotations

import math
from typing import Any

from pipeline.digest import file_sha256
from pipeline.engine import RunContext, Stage
from pipeline.occurrences import run_offsets
from pipeline.sample_task import PART_LAYOUT, run_sample_task
from pipeline.shard_task import run_shard_task
from schemas.stats import merge_all
from stages.histogram import histogram_from_stats
from stages.pools import POOLS
from stages.templates import templates_digest
from stages.tokenizer import load_tokenizer

_EVAL_SAMPLES_PER_TRAJ = 2.5  # five chosen turns, half kept
_CHARS_PER_TOKEN = 3.5
_BYTES_PER_TOKEN = 5  # id + weight after zstd, measured on the demo corpus to within ~2x


def bucket_counts(cfg: dict[str, Any], stats) -> dict[str, int]:
    """Shards per pool from exact input-derived counts: bounded rows and bytes per file, and an even number
    where more than one.

    The shards stage runs one task per file, so an odd count leaves a worker of two idle for its last file:
    at 164 MB (all-turn SFT, Ray on 2 CPUs) five files took the stage 4.5-5.0 s and six 3.5-3.9 s. A function
    of the input and the config only, so the layout never depends on the executor.
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
        count = max(1, by_rows, by_bytes)
        out[pool] = count + count % 2 if count > 1 else 1
    return out


class SamplesStage(Stage):
    """Map: one task per trajectories part writes its samples into the shard buckets of every pool."""

    name = "samples"
    sections = ("pools", "templates", "masking", "tokenizer", "render", "shards")
    run_task = staticmethod(run_sample_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        cfg, fs, root, ingest_results = ctx.cfg, ctx.fs, ctx.root, ctx.results["ingest"]
        buckets = ctx.shared["buckets"] = bucket_counts(cfg, merge_all([r["stats"] for r in ingest_results]))
        # The sample tasks read dedup/removed.parquet themselves; their specs hold its digest, not its ids.
        removed = _removed_digest(fs, root)
        llm = ctx.shared.get("llm")
        dups = run_offsets(ctx)  # trajectories sharing an id
        # the text of the templates in templates.dirs (the config names the folders only)
        templates = templates_digest(cfg["templates"]["dirs"])
        if templates:
            ctx.manifest["templates"] = {"dirs": list(cfg["templates"]["dirs"]), "sha256": templates}
        tasks = []
        for r in ingest_results:
            shared = dups.get(r["task_id"], {})
            spec = [buckets, r["spec_hash"], removed, PART_LAYOUT] + ([shared] if shared else [])
            spec += [templates] if templates else []
            spec += [llm["specs"][r["task_id"]]] if llm else []
            tasks.append({"task_id": r["task_id"], "out": cfg["run"]["out"], "cfg": cfg, "buckets": buckets,
                          "removed": removed, "dups": shared, "spec": spec,
                          **({"llm": {"stages": llm["stages"]}} if llm else {})})
        return tasks

    def finish(self, ctx: RunContext, sample_results: list[dict[str, Any]]) -> None:
        stats = merge_all([r["stats"] for r in sample_results])
        counts = ctx.manifest["counts"]
        nested = stats.nested()
        for key in ("samples", "tokens", "templates", "pools", "filtered", "turns"):
            if key in nested:
                if isinstance(counts.get(key), dict):
                    counts[key] = {**counts[key], **nested[key]}
                else:
                    counts[key] = nested[key]
        n_removed = _removed_count(ctx.fs, ctx.root)
        if n_removed:
            counts.setdefault("dedup", {})["removed"] = n_removed
        cfg = ctx.cfg
        tok = load_tokenizer(cfg["tokenizer"]["spec"], cfg["tokenizer"]["engine"] or None)
        ctx.manifest["tokenizer"] = tok.describe()
        ctx.manifest["buckets"] = ctx.shared["buckets"]
        ctx.manifest["histogram"] = histogram_from_stats(stats)


class ShardsStage(Stage):
    """Reduce: one task per bucket of each pool gathers, sorts and writes one shard."""

    name = "shards"
    sections = ("shards",)  # and, through its spec, everything the samples read
    run_task = staticmethod(run_shard_task)
    # A shard task spends its time reading, sorting, compressing and writing Arrow data, which releases
    # the GIL: in-process, two at once (41 MB all-turn SFT, 2 cores, three runs each) took the stage from
    # 4.6-5.2 s to 2.8-3.0 s for 160-185 MB more peak memory (each task then held up to `SORT_BYTES` of rows;
    # a weighted pool's now holds its bucket's pieces, up to `PIECES_BYTES`).
    local_threads = 2

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        cfg, buckets = ctx.cfg, ctx.shared["buckets"]
        spec = [buckets, [r["spec_hash"] for r in ctx.results["samples"]]]
        return [
            {"task_id": f"{pool}-{b:05d}", "out": cfg["run"]["out"], "pool": pool, "bucket": b,
             "compression_level": cfg["shards"]["compression_level"], "spec": spec}
            for pool in POOLS
            for b in range(buckets[pool])
        ]

    def finish(self, ctx: RunContext, shard_results: list[dict[str, Any]]) -> None:
        _stale_shards(ctx.fs, ctx.root, {r["shard"]["path"] for r in shard_results})
        ctx.manifest["shards"] = [r["shard"] for r in shard_results]


def _removed_digest(fs, root: str) -> str:
    """sha256 of ``dedup/removed.parquet`` (read in blocks; "" without one): what the sample tasks' output depends on."""
    path = f"{root}/dedup/removed.parquet"
    return file_sha256(fs, path) if fs.exists(path) else ""


def _removed_count(fs, root: str) -> int:
    path = f"{root}/dedup/removed.parquet"
    if not fs.exists(path):
        return 0
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as f:
        return pq.ParquetFile(f).metadata.num_rows


def _stale_shards(fs, root: str, keep: set[str]) -> None:
    """Remove shards of an earlier run with another layout, so the folder holds exactly the listed ones, and the
    markers of the tasks that wrote them first: a later run that plans such a task again (back to that layout)
    must write its file, not find the marker and skip it."""
    import posixpath

    from pipeline.outputs import read_json

    base = f"{root}/shards"
    if not fs.exists(base):
        return
    stale = [p for p in fs.find(base) if posixpath.relpath(p, root) not in keep]
    if not stale:
        return
    gone = {posixpath.relpath(p, root) for p in stale}
    markers = f"{root}/_tasks/shards"
    for marker in fs.find(markers) if fs.exists(markers) else []:
        if marker.endswith(".json") and ".tmp-" not in marker and \
                (read_json(fs, marker).get("shard") or {}).get("path") in gone:
            fs.rm(marker)
    for p in stale:
        fs.rm(p)


SAMPLES = SamplesStage()
SHARDS = ShardsStage()
