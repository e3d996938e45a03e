"""SPEC §11 dedup figure: near-duplicate signatures (normalize + shingles + MinHash + band keys) per second per core."""

from __future__ import annotations

import contextlib
import io

from bench.common import Figure
from stages.dedup import bench_signatures


def run(n: int, runs: int) -> Figure:
    rates = []
    for _ in range(runs):
        with contextlib.redirect_stdout(io.StringIO()):
            rates.append(bench_signatures(n))
    return Figure("signatures: near-dup signatures per second per core", rates, 1000, True, unit="/s",
                  detail=f"{n} synthetic trajectories of 8 turns (~6 KB each), 128 permutations, one process")
