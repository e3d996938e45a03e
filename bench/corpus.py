"""The benchmark corpus: generated tool-call trajectories of all seven demo domains, in one JSONL file.

Trajectories of every domain are interleaved (one of each domain in turn, seed after seed) so that
any prefix of the file holds all domains; each id gets its seed appended, so ids stay unique at any
size. The file is written once per size into a cache directory (``LWM_BENCH_CACHE``, default
``~/.cache/lwmkit-bench``): generating 41 MB takes longer than running the pipeline over it.
Smaller inputs are prefixes of a larger file, cut at a line end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

from pipeline.demo import generate

DOMAINS = ("mcp", "search", "terminal", "swe", "android", "web", "os")
PER_SEED = 60  # trajectories per domain and seed
VERSION = 1  # bump when the generator's output for a seed changes the corpus
DESCRIPTION = ("generated demo trajectories of all seven domains (mcp, search, terminal, swe, android, web, os), "
               "interleaved one domain after another, seed after seed, ids made unique per seed")


def cache_dir() -> str:
    return os.environ.get("LWM_BENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "lwmkit-bench")


def _seed_lines(seed: int, per_seed: int = PER_SEED) -> list[str]:
    """The JSONL lines of one seed: the i-th trajectory of each domain in turn."""
    per_domain = []
    for domain in DOMAINS:
        trajs = generate(domain, seed=seed, n=per_seed)
        for traj in trajs:
            traj["traj_id"] = f"{traj['traj_id']}-s{seed}"
        per_domain.append(trajs)
    lines = []
    for i in range(per_seed):
        for trajs in per_domain:
            if i < len(trajs):
                lines.append(json.dumps(trajs[i], ensure_ascii=False, sort_keys=True) + "\n")
    return lines


def _lines(workers: int, per_seed: int) -> Iterator[str]:
    """Lines seed after seed, generated `workers` seeds at a time."""
    seed = 0
    if workers <= 1:
        while True:
            yield from _seed_lines(seed, per_seed)
            seed += 1
    with ProcessPoolExecutor(workers) as pool:
        while True:
            for lines in pool.map(_seed_lines, range(seed, seed + workers), [per_seed] * workers):
                yield from lines
            seed += workers


def write_corpus(path: str, target_bytes: int, workers: int = 1, per_seed: int = PER_SEED) -> tuple[int, int]:
    """Write whole lines to `path` until it holds at least `target_bytes`; (trajectories, bytes)."""
    count = written = 0
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        for line in _lines(workers, per_seed):
            if written >= target_bytes:
                break
            f.write(line)
            written += len(line.encode())
            count += 1
    os.replace(tmp, path)
    return count, written


def prefix(src: str, dst: str, target_bytes: int) -> tuple[int, int]:
    """The first whole lines of `src` holding at least `target_bytes`, written to `dst`; (lines, bytes)."""
    count = written = 0
    with open(src, "rb") as f, open(dst, "wb") as out:
        for line in f:
            if written >= target_bytes:
                break
            out.write(line)
            written += len(line)
            count += 1
    return count, written


def cached_corpus(target_bytes: int, workers: int = 2) -> str:
    """Path of the cached corpus of `target_bytes`, generated on first use."""
    os.makedirs(cache_dir(), exist_ok=True)
    path = os.path.join(cache_dir(), f"demo7-v{VERSION}-{target_bytes}.jsonl")
    if not os.path.exists(path):
        write_corpus(path, target_bytes, workers)
    return path


def count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)
