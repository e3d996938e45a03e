"""The Ray executor: each task of a stage is one plain Ray task (``ray.remote``) on a pool of worker processes
that lives for the whole run.

Per-stage fixed cost is a few milliseconds (no dataset to plan or stream), so small stages stay cheap and
two workers are kept busy from the first task to the last; results are collected with ``ray.wait`` as
they finish (progress moves with them) and returned in task order.

Laptop: a local Ray instance is started with explicit CPUs and no dashboard, and shut down at the
end. Its fixed cost is kept off the critical path: Ray starts in a background thread while the driver
runs the first tasks itself (outputs do not depend on which process runs a task); the workers'
environment is inherited from the start, so the workers Ray starts ahead of time serve the first
tasks; every worker imports the stages and loads the tokenizer as soon as it exists (`warm_worker`),
and the collection after each task skips what the process keeps (`release_memory`). Cluster: ``--ray-address`` (or ``RAY_ADDRESS``) connects to it; outputs should then live on
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
import socket
import sys
import threading
import time
from typing import Any

from pipeline.arrow_pool import POOL_VARIABLE, run_memory_pool
from pipeline.engine import TaskFn
from pipeline.process_executor import WorkerDied
from pipeline.progress import Progress
from pipeline.ray_local import environment, lean_start, quiet_ray_startup, stop_monitor_first
from pipeline.ray_worker import TIMELINE_ENV, process_start, run_task, warm_worker
from pipeline.task_process import load_tokenizer_quietly, unpack_error
from schemas.errors import ConfigError
from stages.tokenizer.vocab import first_line

MAX_RETRIES = 3
CONNECT_TIMEOUT_S = 10.0  # a cluster address that takes longer to accept a connection is taken for unreachable
RECYCLE_BYTES = 256 * 1024 * 1024
# From `RECYCLE_BYTES` of input on, a worker process runs this many tasks and is then replaced. A fresh process
# per task (the earlier rule) paid Python's start, the imports and Ray's worker set-up for every task: at 0.7 GB
# (demo corpus, 2 CPUs) the run took 499 s against 355 s with reused workers, the dedup reduce 91 s against
# 35 s. Replacing a worker after a bounded number of tasks still keeps what its tasks freed but the process
# kept from growing with the input. Tasks of a stage marked `Stage.small_tasks` do not count: at 2 GB they are
# 117 of 253 tasks, tenths of a second each; counting them, the run started 16 worker processes, 10 without.
RECYCLE_TASKS = 16
# A task holds one CPU, so its Rust thread pool (Hugging Face `tokenizers` encodes batches on it) gets one
# thread: with one pool per worker sized to the whole machine, N workers would run N × cores threads
# and a second worker would mostly add contention.
# The Arrow allocator of the run's processes (`pipeline.arrow_pool`): a local Ray's workers inherit the driver's
# choice; a given cluster's get it here.
WORKER_ENV = {"env_vars": {"RAYON_NUM_THREADS": "1", POOL_VARIABLE: run_memory_pool()}}


def check_cluster_address(address: str, key: str = "executor.ray_address (--ray-address)") -> None:
    """An address Ray cannot use is one line now, not Ray's retries for ever (nothing listening) or its
    ValueError: ``auto``, ``HOST:PORT`` of a cluster's head (its GCS), or ``ray://HOST:PORT`` (Ray Client, which
    needs Ray's ``client`` extra)."""
    if address in ("auto", "local"):
        return
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://")
    host, colon, port = rest.rpartition(":")
    if not colon:  # a bare host: Ray's default port (the head's GCS, or Ray Client's)
        host, port = rest, "10001" if client else "6379"
    if not host or not port.isdigit() or "/" in host or "://" in host:
        raise ConfigError(f"{key}: expected auto, HOST:PORT or ray://HOST:PORT, not {address!r}")
    if client:
        try:
            import grpc  # noqa: F401  (what Ray Client needs; `ray[client]` installs it)
        except ImportError:
            raise ConfigError(f"{key} {address}: a ray:// address needs Ray Client: pip install 'ray[client]' (or, "
                              "on a node of the cluster, give its head's HOST:6379)") from None
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__.lower()
        raise ConfigError(f"{key} {address}: nothing answers there ({why}); is the cluster running "
                          "(`ray status` on its head)?") from None


class _HandOff:
    """One stage's tasks shared between the driver, which runs them in order while a local Ray starts, and Ray,
    which gets the ones not yet begun the moment it is up.

    Without it, Ray's workers would sit idle until the driver's current task ended (at 41 MB, a sample task
    of up to 1.8 s while three processes share two cores). The driver asks `take` for its next task's index;
    the thread that started Ray calls `hand_over` once it is up (and `take` does, should Ray have come up
    before this stage registered); after that, `take` gives None. `finish` returns what was submitted."""

    def __init__(self, executor: RayExecutor, fn: TaskFn, tasks: list[dict[str, Any]], small: bool = False) -> None:
        self._executor, self._fn, self._tasks, self._small = executor, fn, tasks, small
        self._lock = threading.Lock()
        self._next = 0
        self._over = False  # the driver took its last task, or Ray is up and the rest are Ray's
        self.pending: dict[Any, tuple[str, float]] = {}
        self.error: BaseException | None = None  # a submission that failed, raised on the driver's thread

    def take(self) -> int | None:
        with self._lock:
            if not self._over and self._executor._ready.is_set():
                self._hand_over()
            if self._over or self._next >= len(self._tasks):
                self._over = True
                return None
            self._next += 1
            return self._next - 1

    def hand_over(self) -> None:
        with self._lock:
            if not self._over:
                self._hand_over()

    def _hand_over(self) -> None:
        self._over = True
        if self._executor.ray_ready and self._next < len(self._tasks):  # else the driver meets the start's error
            try:
                self.pending = self._executor._submit(self._fn, self._tasks[self._next:], self._small)
            except BaseException as exc:
                self.error = exc

    def finish(self) -> dict[Any, tuple[str, float]]:
        with self._lock:
            self._over = True
        return self.pending


class RayExecutor:
    """Runs each task as a Ray task; starts (and later stops) a local Ray unless given an address."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 max_tasks_per_worker: int | str = "auto",
                 warm: tuple[str | None, str | None] | None = None) -> None:
        """`warm`: the run's tokenizer (spec, engine), loaded by every worker right after Ray starts."""
        # Ray is imported where it is first needed: a local start imports it in its own thread (about 0.6 s
        # here), so the start's processes are launched that much sooner while this thread goes on with the run.
        ray = sys.modules.get("ray")
        self._ray: Any = ray
        self._started = False  # a local Ray this executor started: `close` stops it
        self._joined = False  # a cluster this executor connected to: `close` disconnects (the cluster runs on)
        self._auto = max_tasks_per_worker == "auto"
        self.max_tasks_per_worker = 0 if self._auto else int(max_tasks_per_worker)
        # While a local Ray starts, the driver runs the first tasks itself, unless the input is large
        # (`plan_for_input`) or every task gets a process of its own: then the driver's memory must stay small.
        self._driver_runs_tasks = self.max_tasks_per_worker != 1
        source = "executor.ray_address (--ray-address)" if address else "RAY_ADDRESS"
        address = address or os.environ.get("RAY_ADDRESS") or None
        quiet_ray_startup()
        self._timeline: list[dict[str, Any]] = []
        self._num_cpus = num_cpus
        self._warm_tokenizer = warm
        # Retries: a worker that dies (killed, out of memory) is restarted and its task run again, at most
        # MAX_RETRIES times; an exception inside the task is data (see `run_task`), never retried.
        self._remotes: dict[int, Any] = {}
        self._ready = threading.Event()
        self._hand_off: _HandOff | None = None  # the stage the driver is running tasks of while Ray starts
        self._stop = threading.Event()
        self._closing = threading.Event()
        self._init_error: BaseException | None = None
        self._starter: threading.Thread | None = None
        self.cpus = 0
        if ray is not None and ray.is_initialized():  # a session given to us (a test's): its workers may lack our environment
            self._task_env: dict[str, Any] | None = WORKER_ENV
            self._connected()
        elif address:  # the workers' environment goes with the job, so every worker of it has it
            import ray

            self._ray = ray
            self._task_env = None
            check_cluster_address(address, source)
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, runtime_env=WORKER_ENV)
            except ValueError as exc:  # Ray's word on an address it cannot use
                raise ConfigError(f"{source} {address!r}: {first_line(exc)}") from None
            self._joined = True
            self._connected()
        else:
            # A local Ray takes seconds to start (its own processes, then the workers'); it starts in a thread
            # while this process runs the first tasks itself (`map`), so the start overlaps real work. The
            # thread lives until `close`: Ray's processes are tied to the thread that started them.
            self._task_env = None
            self._starter = threading.Thread(target=self._start_local, name="ray-start", daemon=True)
            self._starter.start()

    def _start_local(self) -> None:
        init_start = time.time()
        try:
            import ray

            self._ray = ray
            import ray._private.node  # what `lean_start` adjusts

            with environment(WORKER_ENV["env_vars"]), lean_start(ray) as lean:  # env: inherited by Ray's processes
                self._ray.init(
                    address="local",  # a new instance, even when a `ray start` cluster runs on this machine
                    num_cpus=self._num_cpus or os.cpu_count() or 1,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    configure_logging=True,
                )
            self._started = True
            self._timeline.append({"stage": "ray.init", "started": init_start, "ended": time.time(),
                                   "process_started": process_start(), "lean": lean})
            self._connected(wait_for_warm=True)
        except BaseException as exc:  # raised on the driver's thread by the next `map`
            self._init_error = exc
            self._ready.set()
        self._stop.wait()

    def _connected(self, wait_for_warm: bool = False) -> None:
        """Ray is up: warm its workers, and hand tasks to it (after the warm-up, with `wait_for_warm`: until
        then the driver, which has nothing else to do, keeps running tasks itself)."""
        self.cpus = int(self._ray.cluster_resources().get("CPU", 1))
        self._warming: list[Any] = []
        self._warm(self._warm_tokenizer)
        pending, deadline = list(self._warming) if wait_for_warm else [], time.monotonic() + 120
        while pending and not self._closing.is_set() and time.monotonic() < deadline:  # a run that ends first
            _, pending = self._ray.wait(pending, num_returns=len(pending), timeout=0.2)  # does not wait for it
        self._ready.set()
        hand_off = self._hand_off
        if hand_off is not None:
            hand_off.hand_over()

    def _warm(self, tokenizer: tuple[str | None, str | None] | None) -> None:
        """Start, on every CPU, the imports and the tokenizer load that a worker's first sample task would
        otherwise wait for, and load the tokenizer on the driver too (the samples stage's ``finish`` reads
        it): both overlap the driver's planning and the first stages instead of following them.

        Nothing waits for this; a failure here is met again, and reported, by the task that needs it."""
        if tokenizer is None or self.max_tasks_per_worker == 1:  # a process per task: nothing to keep warm
            return
        remote = self._ray.remote(num_cpus=1, max_retries=0, runtime_env=self._task_env)(warm_worker)
        self._warming = [remote.remote(*tokenizer) for _ in range(self.cpus)]
        threading.Thread(target=load_tokenizer_quietly, args=tokenizer, daemon=True).start()

    def wait_for_ray(self) -> None:
        """Block until Ray is up (a local start runs in the background); for driver code that calls Ray's
        API itself (a Ray call before then would start a second local Ray)."""
        self._ready.wait()
        if self._init_error is not None:
            raise self._init_error

    @property
    def ray_ready(self) -> bool:
        """Whether Ray is up, so `map` hands tasks to it (before that, they run in this process)."""
        return self._ready.is_set() and self._init_error is None

    def plan_for_input(self, total_bytes: int) -> None:
        """Once the input is large (≥ `RECYCLE_BYTES`): no task runs in the driver, and with ``auto`` a worker
        process is replaced after `RECYCLE_TASKS` tasks, so memory its tasks freed but the process kept cannot
        accumulate with the input; small runs reuse their workers throughout."""
        large = total_bytes >= RECYCLE_BYTES
        if large:
            self._driver_runs_tasks = False
        if self._auto:
            self.max_tasks_per_worker = RECYCLE_TASKS if large else 0

    def map(self, fn: TaskFn, tasks: list[dict[str, Any]], progress: Progress,
            threads: int = 1, small: bool = False) -> list[dict[str, Any]]:
        """Results in task order. While a local Ray is still starting, tasks run here one after another;
        the moment it is up, the tasks not yet begun go to Ray, while this process finishes the one it is
        running. `threads` (the in-process runner's hint) is not used: every task has a process of its own.
        `small` (`Stage.small_tasks`): with ``auto`` replacement, these tasks do not count towards
        `RECYCLE_TASKS`."""
        results: dict[str, dict[str, Any]] = {}
        local = 0
        pending: dict[Any, tuple[str, float]] = {}
        # With a large input (`plan_for_input`) or a process per task, no task runs in the driver, whose
        # memory must stay small; they wait for Ray instead.
        if self._driver_runs_tasks and not self._ready.is_set():
            hand_off = self._hand_off = _HandOff(self, fn, tasks, small)
            try:
                while (index := hand_off.take()) is not None:
                    started = time.time()
                    result = results[tasks[index]["task_id"]] = fn(tasks[index])
                    self._timeline.append({"stage": progress.stage, "task_id": tasks[index]["task_id"],
                                           "submitted": started, "pid": os.getpid(), "started": started,
                                           "ended": time.time(), "process_started": 0.0, "received": time.time(),
                                           "result_bytes": 0})
                    progress.count(result)
                    local = index + 1
            except BaseException:
                # An earlier task than any handed to Ray failed: theirs end first (as under Ray, every
                # submitted task runs), then this error is the run's, as the in-process runner would meet it.
                handed = hand_off.finish()
                if handed:
                    self._ray.wait(list(handed), num_returns=len(handed))
                raise
            finally:
                self._hand_off = None
            pending = hand_off.finish()
            if hand_off.error is not None:
                raise hand_off.error
        if local == len(tasks):
            return [results[t["task_id"]] for t in tasks]
        if not pending:
            self.wait_for_ray()
            pending = self._submit(fn, tasks[local:], small)
        ray = self._ray
        errors: dict[str, bytes] = {}
        waiting = list(pending)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                task_id, submitted = pending[ref]
                try:
                    out = ray.get(ref)
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.OutOfMemoryError) as exc:
                    raise WorkerDied(
                        f"a Ray worker died {MAX_RETRIES + 1} times (killed, or out of memory?) running task "
                        f"{task_id}; finished tasks are kept: run the same command again to resume, or with "
                        "--executor local to see the failure in this process") from exc
                self._timeline.append({"stage": progress.stage, "task_id": task_id, "submitted": submitted,
                                       "pid": out["span"][0], "started": out["span"][1], "ended": out["span"][2],
                                       "process_started": out["span"][3],
                                       "received": time.time(), "result_bytes": len(out["result"])})
                if out["error"]:
                    errors[task_id] = out["error"]
                    continue
                result = json.loads(out["result"])
                results[task_id] = result
                progress.count(result)
        if errors:  # the first failed task in task order, as the in-process runner would have met it
            raise next(unpack_error(errors[t["task_id"]]) for t in tasks if t["task_id"] in errors)
        return [results[t["task_id"]] for t in tasks]

    def _submit(self, fn: TaskFn, tasks: list[dict[str, Any]], small: bool = False) -> dict[Any, tuple[str, float]]:
        """The tasks submitted to Ray: each one's object ref → (task id, submit time)."""
        ray = self._ray
        # Ray counts a worker's calls per remote function: small tasks go through one without a limit
        calls = 0 if small and self._auto else self.max_tasks_per_worker
        if calls not in self._remotes:  # `max_calls` is fixed when the remote function is made
            self._remotes[calls] = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, max_calls=calls,
                                              runtime_env=self._task_env)(run_task)
        remote = self._remotes[calls]
        submitted = time.time()
        fn_ref = ray.put(fn)  # shipped once per stage, not once per task
        return {remote.remote(fn_ref, json.dumps(t, sort_keys=True, default=str)): (t["task_id"], submitted)
                for t in tasks}

    def close(self) -> None:
        self._closing.set()
        if self._starter is not None:  # a start still under way is waited for (not the warm-up), then stopped
            self._ready.wait()
        stop_start = time.time()
        if self._started:
            stop_monitor_first(self._ray)
            self._ray.shutdown()
            self._started = False
        elif self._joined:
            # Disconnect now: left to Ray's exit hook, the driver's exit waits 0.5 s for log lines that
            # `log_to_driver=False` never prints. The cluster is not stopped.
            self._ray.shutdown()
            self._joined = False
        self._stop.set()
        path = os.environ.get(TIMELINE_ENV)
        if path and self._timeline:
            self._timeline.append({"stage": "ray.shutdown", "started": stop_start, "ended": time.time()})
            with open(path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in self._timeline)
            self._timeline = []
