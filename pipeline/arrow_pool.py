"""The Arrow memory allocator of a run's processes: jemalloc, unless the user chose one.

Arrow's C++ library picks its default allocator once per process, from ``ARROW_DEFAULT_MEMORY_POOL``, when
pyarrow is imported; `pyarrow.set_memory_pool` later changes only what pyarrow's Python calls allocate, not
what the Parquet and IPC writers do inside. So the CLI sets the variable before anything imports pyarrow,
a local Ray's processes inherit it, and the workers of a given cluster get it through the task environment
(`pipeline.ray_executor.WORKER_ENV`).

pyarrow's own default (mimalloc in its Linux wheels) made a process's first large Arrow writes slow on the
machine the benchmarks run on: one 4 MB run's shard task took 1.47, 0.72, 0.32, then 0.21 s run four times in
a row in one process, against 0.43 s and then 0.20-0.24 s with jemalloc (the system's malloc: 0.51 s, then
0.25-0.33 s). A run writes each shard once, so it paid the first time: 41 MB of all-turn SFT in-process (two
alternating runs each) took 17.98 and 18.63 s with mimalloc, 16.81 and 16.46 s with jemalloc (the shards
stage 3.8 s against 2.6-2.7 s), at a lower peak RSS (655-681 MiB against 737-756 MiB).
"""

from __future__ import annotations

import os

POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
RUN_POOL = "jemalloc"  # where a pyarrow lacks it, Arrow warns once and keeps its own default


def run_memory_pool() -> str:
    """The allocator a run's processes use: the user's ``ARROW_DEFAULT_MEMORY_POOL``, else `RUN_POOL`."""
    return os.environ.get(POOL_VARIABLE) or RUN_POOL


def choose_memory_pool() -> str:
    """Set ``ARROW_DEFAULT_MEMORY_POOL`` for this process and its children unless it is set; returns it. Has an
    effect on this process only when called before pyarrow is imported."""
    os.environ[POOL_VARIABLE] = run_memory_pool()
    return os.environ[POOL_VARIABLE]


BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> None:
    """``OPENBLAS_NUM_THREADS=1`` for this process and its children unless it is set (before numpy is imported).
    numpy's OpenBLAS otherwise starts a thread per core, each reserving its buffers in the address space, while the
    pipeline does no BLAS work: under a virtual-memory limit (``ulimit -v``, as clusters set) those reservations
    left the tokenizer too little (on 2 cores with a 1 GB limit a 0.2 MB run aborted; with one thread it
    finished). Not for ``lwm train``, whose CPU math may use them."""
    os.environ.setdefault(BLAS_THREADS, "1")
