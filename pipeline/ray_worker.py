"""What runs inside a Ray worker process for `pipeline.ray_executor`: one task with its error returned as data
(`run_task`), the warm-up that imports the stages and loads the tokenizer (`warm_worker`), and the memory
release after each task (`release_memory`)."""

from __future__ import annotations

import json
import os
import pickle
import time
from typing import Any

from pipeline.arrow_env import skip_pandas_probe
from pipeline.engine import TaskFn

# Debug aid: with this variable set to a path, `RayExecutor.close` appends one JSON line per task run (stage, task id,
# worker pid, wall-clock submit / start / end / receive times, result size) and one per driver step
# (Ray start, stop), for attributing a run's wall time.
TIMELINE_ENV = "LWM_RAY_TIMELINE"


def run_task(fn: TaskFn, task_json: str) -> dict[str, Any]:
    """One task on a worker: its result (as JSON) or its exception (pickled), memory released after.

    Runs as a plain Ray task (``ray.remote``): the worker process is reused across tasks and stages
    (unless `max_tasks_per_worker` says otherwise), so imports and the module-level tokenizer caches
    are paid once per worker, not once per task or per stage.
    """
    started = time.time()
    skip_pandas_probe()
    task = json.loads(task_json)
    try:
        out = {"result": json.dumps(fn(task)), "error": b""}
    except Exception as exc:
        out = {"result": "", "error": pack_error(exc)}
    release_memory()
    out["span"] = [os.getpid(), started, time.time(), process_start()]  # for the timeline (`TIMELINE_ENV`)
    return out


def process_start() -> float:
    """When this process started (seconds since the epoch), only while a timeline is recorded; else 0."""
    if not os.environ.get(TIMELINE_ENV):
        return 0.0
    import psutil

    return psutil.Process().create_time()


def pack_error(exc: Exception) -> bytes:
    """The exception as bytes for the driver: itself when it pickles, else a `RuntimeError` with its line."""
    exc.__traceback__ = None
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))


def release_memory() -> None:
    """Hand memory freed by a finished task back to the OS.

    Ray reuses a worker process for many tasks of many stages; without this, heap freed by one task
    (Arrow buffers, Python objects) stays mapped and the worker's resident size ratchets up with
    the number of tasks it ran, so peak memory per worker would grow with the input.
    """
    import gc

    import pyarrow as pa

    gc.collect()
    # What survives a full collection between tasks is the process's own (modules, the tokenizer and its
    # vocabulary); frozen, later collections skip it: a full collection over a loaded vocabulary took
    # 0.1-0.3 s, paid after every task. Frozen objects are still freed when their last reference goes.
    gc.freeze()
    pa.default_memory_pool().release_unused()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def warm_worker(spec: str | None, engine: str | None) -> str:
    """Import every stage's code and load the tokenizer in this worker (cached for its later tasks); "" or
    the error's line, never an exception (nobody waits for this task)."""
    skip_pandas_probe()
    try:
        from pipeline import dedup_map, dedup_stage, ingest_task, sample_task, shard_task  # noqa: F401  (the tasks' code)
        from stages.tokenizer import load_tokenizer

        load_tokenizer(spec, engine)
        release_memory()
        return ""
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
