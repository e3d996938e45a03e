"""The Ray executor: each task of a stage is one plain Ray task (``ray.remote``) on a pool of worker processes
that lives for the whole run.

Per-stage fixed cost is a few milliseconds (no dataset to plan or stream), so small stages stay cheap and
two workers are kept busy from the first task to the last; results are collected with ``ray.wait`` as
they finish (progress moves with them) and returned in task order.

Laptop: a local Ray instance is started with explicit CPUs and no dashboard, and shut down at the
end. Cluster: ``--ray-address`` (or ``RAY_ADDRESS``) connects to it; outputs should then live on
storage every node sees (a shared path or ``s3://``). Tasks write their outputs atomically and are
retried by Ray when a worker dies, so a retry reproduces the same bytes.

An exception raised by a task function comes back to the driver as data and is raised there as
itself, so the run ends with the same one line as under the in-process runner (no Ray traceback);
a worker that dies is still Ray's to retry.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
from typing import Any

from pipeline.engine import TaskFn
from pipeline.progress import Progress

MAX_RETRIES = 3
RECYCLE_BYTES = 256 * 1024 * 1024
# A task holds one CPU, so its Rust thread pool (Hugging Face `tokenizers` encodes batches on it) gets one
# thread: with one pool per worker sized to the whole machine, N workers would run N × cores threads
# and a second worker would mostly add contention.
WORKER_ENV = {"env_vars": {"RAYON_NUM_THREADS": "1"}}


def run_task(fn: TaskFn, task_json: str) -> dict[str, Any]:
    """One task on a worker: its result (as JSON) or its exception (pickled), memory released after.

    Runs as a plain Ray task (``ray.remote``): the worker process is reused across tasks and stages
    (unless `max_tasks_per_worker` says otherwise), so imports and the module-level tokenizer caches
    are paid once per worker, not once per task or per stage.
    """
    task = json.loads(task_json)
    try:
        return {"result": json.dumps(fn(task)), "error": b""}
    except Exception as exc:
        return {"result": "", "error": pack_error(exc)}
    finally:
        release_memory()


def pack_error(exc: Exception) -> bytes:
    """The exception as bytes for the driver: itself when it pickles, else a `RuntimeError` with its line."""
    exc.__traceback__ = None
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))


def _unpack_error(data: bytes) -> Exception:
    return pickle.loads(data)


def release_memory() -> None:
    """Hand memory freed by a finished task back to the OS.

    Ray reuses a worker process for many tasks of many stages; without this, heap freed by one task
    (Arrow buffers, Python objects) stays mapped and the worker's resident size ratchets up with
    the number of tasks it ran, so peak memory per worker would grow with the input.
    """
    import gc

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def quiet_ray_startup() -> None:
    """Keep Ray's notice about token authentication off the terminal: it speaks of Ray's own cluster
    security, which `RAY_AUTH_MODE` sets, and says nothing about the run; its level is raised, nothing else."""
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)


class RayExecutor:
    """Runs each task as a Ray task; starts (and later stops) a local Ray unless given an address."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 max_tasks_per_worker: int | str = "auto") -> None:
        import ray

        self._ray = ray
        self._started = False
        self._auto = max_tasks_per_worker == "auto"
        self.max_tasks_per_worker = 0 if self._auto else int(max_tasks_per_worker)
        address = address or os.environ.get("RAY_ADDRESS") or None
        quiet_ray_startup()
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            else:
                ray.init(
                    address="local",  # a new instance, even when a `ray start` cluster runs on this machine
                    num_cpus=num_cpus or os.cpu_count() or 1,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    configure_logging=True,
                )
                self._started = True
        # Retries: a worker that dies (killed, out of memory) is restarted and its task run again, at most
        # MAX_RETRIES times; an exception inside the task is data (see `run_task`), never retried.
        self._remotes: dict[int, Any] = {}
        self.cpus = int(ray.cluster_resources().get("CPU", 1))

    def plan_for_input(self, total_bytes: int) -> None:
        """With ``auto``: a fresh worker process per task once the input is large (≥ `RECYCLE_BYTES`),
        so memory a task freed but its process kept cannot accumulate with the input; small runs
        keep reusing workers, since a process start (~1-2 s) would dominate their tiny tasks."""
        if self._auto:
            self.max_tasks_per_worker = 1 if total_bytes >= RECYCLE_BYTES else 0

    def map(self, fn: TaskFn, tasks: list[dict[str, Any]], progress: Progress) -> list[dict[str, Any]]:
        ray = self._ray
        calls = self.max_tasks_per_worker
        if calls not in self._remotes:  # `max_calls` is fixed when the remote function is made
            self._remotes[calls] = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, max_calls=calls,
                                              runtime_env=WORKER_ENV)(run_task)
        remote = self._remotes[calls]
        fn_ref = ray.put(fn)  # shipped once per stage, not once per task
        pending = {remote.remote(fn_ref, json.dumps(t, sort_keys=True, default=str)): t["task_id"] for t in tasks}
        results: dict[str, dict[str, Any]] = {}
        errors: dict[str, bytes] = {}
        waiting = list(pending)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                out = ray.get(ref)
                task_id = pending[ref]
                if out["error"]:
                    errors[task_id] = out["error"]
                    continue
                result = json.loads(out["result"])
                results[task_id] = result
                progress.update(rows=int(result.get("rows", 0)), nbytes=int(result.get("bytes", 0)))
        if errors:  # the first failed task in task order, as the in-process runner would have met it
            raise next(_unpack_error(errors[t["task_id"]]) for t in tasks if t["task_id"] in errors)
        return [results[t["task_id"]] for t in tasks]

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False
