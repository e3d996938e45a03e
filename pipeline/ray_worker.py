"""What runs inside a Ray worker process for `pipeline.ray_executor`: one task with its error returned as data
(`run_task`), the warm-up that imports the stages and loads the tokenizer (`warm_worker`), and the memory
release after each task (`pipeline.task_process.release_memory`)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from pipeline.arrow_env import skip_pandas_probe
from pipeline.engine import TaskFn
from pipeline.task_process import on_task_thread, pack_error, release_memory

# Debug aid: with this variable set to a path, `RayExecutor.close` appends one JSON line per task run (stage, task id,
# worker pid, wall-clock submit / start / end / receive times, result size) and one per driver step
# (Ray start, stop), for attributing a run's wall time.
TIMELINE_ENV = "LWM_RAY_TIMELINE"


def run_task(fn: TaskFn, task_json: str) -> dict[str, Any]:
    """One task on a worker: its result (as JSON) or its exception (pickled), memory released after.

    Runs as a plain Ray task (``ray.remote``): the worker process is reused across tasks and stages
    (unless `max_tasks_per_worker` says otherwise), so imports and the module-level tokenizer caches
    are paid once per worker, not once per task or per stage. The task itself runs on the worker's task thread
    (`pipeline.task_process.on_task_thread`), not on the main thread Ray calls this on: the 41 MB run's shards
    stage on two CPUs took 1.44-1.49 s against 1.68-1.83 s (three alternating runs).
    """
    started = time.time()
    skip_pandas_probe()
    task = json.loads(task_json)
    try:
        out = {"result": json.dumps(on_task_thread(lambda: fn(task))), "error": b""}
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
