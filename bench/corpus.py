"""The benchmark corpora, each one JSONL file of native trajectories, written once per size and cached.

- real (`cached_real_corpus`): the trajectories `lwm run` keeps from the sample data (../shared/data,
  or ``LWM_BENCH_DATA``), normalized and replicated to the size with varied ids and text.
- demo (`cached_corpus`): generated trajectories of all seven demo domains, interleaved (one of each
  domain in turn, seed after seed) so that any prefix holds all domains; ids get their seed appended.

Files live in ``LWM_BENCH_CACHE`` (default ``~/.cache/lwmkit-bench``): generating 41 MB of demo
trajectories takes longer than running the pipeline over them. Smaller inputs are prefixes of a
larger file, cut at a line end.
"""

from __future__ import annotations

import json
import os
import random
import re
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


# --- real trajectories: the sample data, normalized once, replicated with varied ids and text ---

REAL_DESCRIPTION = ("real tool-call trajectories: every trajectory that `lwm run` keeps from the sample data "
                    "(../shared/data), normalized, then replicated to the size; each copy gets its own ids and, "
                    "from the second copy on, its observations' words replaced by a per-copy permutation among "
                    "the corpus's observation words of the same length (so copies are not near-duplicates and "
                    "the byte size stays the same)")
WORD = re.compile(r"[A-Za-z]{3,}")


def shared_data_dir() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.environ.get("LWM_BENCH_DATA") or os.path.normpath(os.path.join(root, "..", "shared", "data"))


def real_base(data_dir: str, work: str) -> list[dict]:
    """The trajectories an in-process `lwm run` keeps from `data_dir` (formats sniffed), as JSON-ready dicts."""
    import glob

    import pyarrow.parquet as pq

    from pipeline.config import resolve
    from pipeline.run import run_pipeline

    out = os.path.join(work, "real-base")
    cfg = resolve(overrides={"run": {"input": [data_dir], "out": out},
                             "executor": {"kind": "local", "progress": "off"},
                             "dedup": {"exact": False, "near": False}})
    run_pipeline(cfg, echo=lambda _msg: None)
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "trajectories", "*.parquet"))):
        rows.extend(pq.read_table(path).to_pylist())
    return [json.loads(json.dumps(r, ensure_ascii=False, default=str)) for r in rows]


def _permutations(rows: list[dict]) -> dict[int, list[str]]:
    """The distinct observation words of the corpus by length, sorted."""
    words: dict[int, set[str]] = {}
    for row in rows:
        for turn in row["turns"]:
            for w in WORD.findall(turn.get("observation") or ""):
                words.setdefault(len(w), set()).add(w)
    return {n: sorted(ws) for n, ws in words.items()}


def varied_copy(rows: list[dict], copy: int, by_length: dict[int, list[str]]) -> list[dict]:
    """Copy number `copy` of the trajectories: ids suffixed, observation words permuted (copy 0: text as is)."""
    mapping: dict[str, str] = {}
    if copy:
        rng = random.Random(copy)
        for ws in by_length.values():
            shuffled = ws[:]
            rng.shuffle(shuffled)
            mapping.update(zip(ws, shuffled, strict=True))
    out = []
    for row in rows:
        new = dict(row, traj_id=f"{row['traj_id']}-c{copy}", split_key=f"{row['split_key']}-c{copy}")
        if copy:
            new["turns"] = [dict(t, observation=WORD.sub(lambda m: mapping[m.group()], t["observation"]))
                            if t.get("observation") else t for t in row["turns"]]
        out.append(new)
    return out


def write_real_corpus(path: str, target_bytes: int, rows: list[dict]) -> tuple[int, int]:
    """Copies of `rows` (see `varied_copy`) as JSONL until `path` holds at least `target_bytes`."""
    if not rows:
        raise ValueError("no trajectories to replicate")
    by_length = _permutations(rows)
    count = written = copy = 0
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        while written < target_bytes:
            for row in varied_copy(rows, copy, by_length):
                if written >= target_bytes:
                    break
                line = json.dumps(row, ensure_ascii=False) + "\n"
                f.write(line)
                written += len(line.encode())
                count += 1
            copy += 1
    os.replace(tmp, path)
    return count, written


def cached_real_corpus(target_bytes: int, data_dir: str | None = None) -> str:
    """Path of the cached real-trajectory corpus of `target_bytes`, built on first use."""
    import tempfile

    os.makedirs(cache_dir(), exist_ok=True)
    path = os.path.join(cache_dir(), f"real-v{VERSION}-{target_bytes}.jsonl")
    if not os.path.exists(path):
        base = os.path.join(cache_dir(), f"real-v{VERSION}-base.json")
        if not os.path.exists(base):
            with tempfile.TemporaryDirectory(prefix="lwm-bench-base-") as work:
                rows = real_base(data_dir or shared_data_dir(), work)
            with open(base, "w", encoding="utf-8") as f:
                json.dump(rows, f, ensure_ascii=False)
        with open(base, encoding="utf-8") as f:
            rows = json.load(f)
        write_real_corpus(path, target_bytes, rows)
    return path
