"""The Ray executor: a stage's tasks as a Ray Data dataset, one block per task, mapped by the task function.

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
import warnings
from typing import Any

from pipeline.engine import TaskFn
from pipeline.progress import Progress

MAX_RETRIES = 3
RECYCLE_BYTES = 256 * 1024 * 1024


def _wrap(fn: TaskFn):
    def run_row(row: dict[str, Any]) -> dict[str, Any]:
        task = json.loads(row["task"])
        try:
            return {"task_id": task["task_id"], "result": json.dumps(fn(task)), "error": b""}
        except Exception as exc:
            return {"task_id": task["task_id"], "result": "", "error": pack_error(exc)}
        finally:
            release_memory()

    return run_row


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


def quiet_ray_data() -> None:
    """Keep Ray Data's per-dataset INFO lines ("execution finished …") and its notice about disabled
    progress bars off the terminal; our own `Progress` reports each stage. Ray Data configures its
    logger when `ray.data` is first imported (resetting levels), so import it before adjusting."""
    import ray.data  # noqa: F401

    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)


class RayExecutor:
    """Runs each stage on Ray Data; starts (and later stops) a local Ray unless given an address."""

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
        quiet_ray_data()
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        self.cpus = int(ray.cluster_resources().get("CPU", 1))

    def plan_for_input(self, total_bytes: int) -> None:
        """With ``auto``: a fresh worker process per task once the input is large (≥ `RECYCLE_BYTES`),
        so memory a task freed but its process kept cannot accumulate with the input; small runs
        keep reusing workers, since a process start (~1-2 s) would dominate their tiny tasks."""
        if self._auto:
            self.max_tasks_per_worker = 1 if total_bytes >= RECYCLE_BYTES else 0

    def map(self, fn: TaskFn, tasks: list[dict[str, Any]], progress: Progress) -> list[dict[str, Any]]:
        ray = self._ray
        items = [{"task": json.dumps(t, sort_keys=True, default=str)} for t in tasks]
        with warnings.catch_warnings():
            # Ray >= 2.60 flags `max_retries` as a deprecated free-form remote arg but offers no named
            # replacement yet; the bound matters (a task that always kills its worker must fail the run).
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated", category=Warning)
            ds = ray.data.from_items(items, override_num_blocks=len(items)).map(
                _wrap(fn),
                num_cpus=1,
                compute=ray.data.TaskPoolStrategy(size=max(1, min(self.cpus, len(items)))),
                max_retries=MAX_RETRIES,
                **({"max_calls": self.max_tasks_per_worker} if self.max_tasks_per_worker else {}),
            )
        results: dict[str, dict[str, Any]] = {}
        errors: dict[str, bytes] = {}
        for row in ds.iter_rows():
            if row["error"]:
                errors[row["task_id"]] = row["error"]
                continue
            result = json.loads(row["result"])
            results[row["task_id"]] = result
            progress.update(rows=int(result.get("rows", 0)), nbytes=int(result.get("bytes", 0)))
        if errors:  # the first failed task in task order, as the in-process runner would have met it
            raise next(_unpack_error(errors[t["task_id"]]) for t in tasks if t["task_id"] in errors)
        return [results[t["task_id"]] for t in tasks]

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False
