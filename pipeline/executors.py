"""Executors run a stage's tasks; stages never know which executor runs them.

A task is a plain dict (picklable, deterministic id) and a task function is a top-level function
``fn(task) -> result dict`` that writes its own outputs atomically and returns its counters.
Results come back in task order, so everything merged from them is order-independent of
scheduling. The in-process runner runs them one after another; the worker-process executor
(pipeline/process_executor.py) runs them on processes forked from this one; the Ray executor
(pipeline/ray_executor.py) runs the same functions as Ray tasks; ``auto`` (the default) picks from the input's
size and the machine.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pipeline.engine import Executor, TaskFn, lending_cpus
from pipeline.process_executor import can_fork
from pipeline.progress import Progress

__all__ = ["AutoExecutor", "Executor", "LocalExecutor", "TaskFn", "make_executor"]


class LocalExecutor:
    """Runs tasks in this process: one after another, or up to `threads` at once (at most one per CPU) for a
    stage whose tasks release the GIL (`Stage.local_threads`).

    Either way the results come in task order and the error of the first failing task in that order is the
    one raised, after the tasks already running have ended (no thread still writes when `map` returns);
    tasks not yet begun do not start. `small` (`Stage.small_tasks`) concerns worker processes only.
    """

    name = "local"

    def map(self, fn: TaskFn, tasks: list[dict[str, Any]], progress: Progress,
            threads: int = 1, small: bool = False) -> list[dict[str, Any]]:
        threads = max(1, min(int(threads), len(tasks), _cpus()))
        if threads == 1:
            results = []
            with lending_cpus(_cpus() - 1):  # one task at a time: it may use the other CPUs (`spare_cpus`)
                for task in tasks:
                    results.append(progress.count(fn(task)))
            return results
        # Leaving the pool's block, on an error too, waits for the tasks already begun.
        with ThreadPoolExecutor(threads, thread_name_prefix="lwm-task") as pool:
            running: deque[Future] = deque()
            queued = iter(tasks)
            results = []
            for task in itertools.islice(queued, threads):
                running.append(pool.submit(fn, task))
            while running:
                result = running.popleft().result()  # in task order
                failed = any(f.done() and f.exception() is not None for f in running)  # raised next: begin nothing
                if not failed and (task := next(queued, None)) is not None:
                    running.append(pool.submit(fn, task))
                results.append(progress.count(result))
        return results

    def close(self) -> None:
        pass


def _cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


class AutoExecutor:
    """On this machine below ``executor.local_below_bytes`` of input, Ray at or above it or when a Ray cluster
    is given (``ray_address`` or ``RAY_ADDRESS``). On this machine means worker processes forked from this one
    (`ProcessExecutor`) when it has two CPUs or more and can fork, else this process alone (`LocalExecutor`).
    The choice is made once the input's size is known (`plan_for_input`, called by the ingest step before any
    task runs) and printed with its reason; Ray is not even imported when the run stays on this machine.

    The default threshold, 256 MB, comes from measurements on a 2-core machine (all-turn SFT, dedup off,
    real tool-call trajectories, outputs byte-identical; `python -m bench` and `python -m bench.scaling`).
    Ray's start (seconds for its own processes, then the workers' imports and tokenizer) is a cost forked
    workers do not pay, and once both have two workers nothing else differs: forked workers beat Ray on two
    CPUs at every size measured, 41 to 656 MB (see bench/RESULTS.md). From `RECYCLE_BYTES` (256 MiB) on, Ray
    replaces its workers every `RECYCLE_TASKS` tasks so that what a long-lived process keeps cannot grow with
    the input, and its peak memory per worker is the one measured flat up to 2 GB; that is where the
    threshold sits. (In-process runs alone, before forked workers, broke even with Ray near 50 MB.)
    Re-measure on another machine with the benchmark and set ``executor.local_below_bytes``.
    """

    def __init__(self, cfg: dict[str, Any], echo: Callable[[str], None] = _stderr) -> None:
        self._cfg = cfg
        self._echo = echo
        self._inner: Executor | None = None
        self.threshold = int(cfg["executor"]["local_below_bytes"])
        address = cfg["executor"]["ray_address"] or os.environ.get("RAY_ADDRESS") or ""
        if address:
            self._choose("ray", f"Ray cluster {address} given")

    @property
    def name(self) -> str:
        return self._inner.name if self._inner is not None else "auto"

    @property
    def chosen(self) -> Executor | None:
        return self._inner

    def _choose(self, kind: str, why: str) -> None:
        self._inner = _executor(kind, self._cfg, self._echo)
        self._echo(f"executor: {kind} ({why})")

    def plan_for_input(self, total_bytes: int) -> None:
        if self._inner is None:
            size, limit = _mb(total_bytes), _mb(self.threshold)
            if total_bytes >= self.threshold:
                self._choose("ray", f"input {size} ≥ {limit}, where Ray takes over")
            else:
                workers = _workers(self._cfg)
                if workers > 1 and can_fork():
                    self._choose("processes", f"input {size} < {limit}: {workers} worker processes on this "
                                              "machine; Ray from that size on")
                else:
                    why = "one CPU" if workers <= 1 else "this system cannot fork worker processes"
                    self._choose("local", f"input {size} < {limit} and {why}: in this process")
        if hasattr(self._inner, "plan_for_input"):
            self._inner.plan_for_input(total_bytes)

    def map(self, fn: TaskFn, tasks: list[dict[str, Any]], progress: Progress,
            threads: int = 1, small: bool = False) -> list[dict[str, Any]]:
        if self._inner is None:  # no input size was given: the safe side for small runs
            self._choose("local", "input size unknown")
        assert self._inner is not None
        return self._inner.map(fn, tasks, progress, threads=threads, small=small)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def make_executor(cfg: dict[str, Any], echo: Callable[[str], None] = _stderr) -> Executor:
    """The executor named by ``executor.kind``: ``local``, ``processes``, ``ray`` or ``auto`` (Ray is imported
    only when used)."""
    kind = cfg["executor"]["kind"]
    if kind == "auto":
        return AutoExecutor(cfg, echo)
    return _executor(kind, cfg, echo)


def _executor(kind: str, cfg: dict[str, Any], echo: Callable[[str], None]) -> Executor:
    if kind == "local":
        return LocalExecutor()
    if kind == "processes":
        from pipeline.process_executor import ProcessExecutor

        return ProcessExecutor(_workers(cfg), LocalExecutor(), warm=_tokenizer(cfg), echo=echo)
    return _ray_executor(cfg)


def _workers(cfg: dict[str, Any]) -> int:
    """Worker processes on this machine: ``executor.num_cpus``, or every CPU this process may run on."""
    return int(cfg["executor"]["num_cpus"] or 0) or _cpus()


def _tokenizer(cfg: dict[str, Any]) -> tuple[str | None, str | None]:
    return (cfg["tokenizer"]["spec"], cfg["tokenizer"]["engine"] or None)


def _ray_executor(cfg: dict[str, Any]) -> Executor:
    from pipeline.ray_executor import RayExecutor

    return RayExecutor(
        address=cfg["executor"]["ray_address"] or None,
        num_cpus=cfg["executor"]["num_cpus"] or None,
        max_tasks_per_worker=cfg["executor"]["max_tasks_per_worker"],
        warm=_tokenizer(cfg),
    )
