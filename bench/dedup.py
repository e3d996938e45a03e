"""SPEC §11 dedup figure: near-duplicate signatures (normalize + shingles + MinHash + band keys) per second per core,
on each of the two hashing paths (`stages.dedup`'s NumPy code, and the compiled loops of `stages.kernels` that a
process with much text to hash loads)."""

from __future__ import annotations

import contextlib
import io

from bench.common import Figure
from stages.dedup import bench_signatures, use_compiled


def run(n: int, runs: int) -> list[Figure]:
    figures = []
    for compiled, path in ((False, "NumPy paths"), (True, "compiled loops")):
        use_compiled(compiled)
        rates = []
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                bench_signatures(64)  # loads the path (numba's cache, for the compiled loops) before it is timed
                for _ in range(runs):
                    rates.append(bench_signatures(n))
        finally:
            use_compiled(None)
        figures.append(Figure(f"signatures: near-dup signatures per second per core ({path})", rates, 1000, True,
                              unit="/s", detail=f"{n} synthetic trajectories of 8 turns (~6 KB each), 128 "
                                                f"permutations, one process"))
    return figures
