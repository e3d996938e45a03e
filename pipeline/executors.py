"""Executors run a stage's tasks; stages never know which executor runs them.

A task is a plain dict (picklable, deterministic id) and a task function is a top-level function
``fn(task) -> result dict`` that writes its own outputs atomically and returns its counters.
Results come back in task order, so everything merged from them is order-independent of
scheduling. The in-process runner is for tests and debugging; the Ray executor (pipeline/ray_executor.py)
runs the same functions on Ray Data.
"""

from __future__ import annotations

from typing import Any

from pipeline.engine import Executor, TaskFn
from pipeline.progress import Progress

__all__ = ["Executor", "LocalExecutor", "TaskFn", "make_executor"]


class LocalExecutor:
    """Runs tasks one after another in this process."""

    name = "local"

    def map(self, fn: TaskFn, tasks: list[dict[str, Any]], progress: Progress) -> list[dict[str, Any]]:
        results = []
        for task in tasks:
            result = fn(task)
            progress.update(rows=int(result.get("rows", 0)), nbytes=int(result.get("bytes", 0)))
            results.append(result)
        return results

    def close(self) -> None:
        pass


def make_executor(cfg: dict[str, Any]) -> Executor:
    """The executor named by ``executor.kind`` (``ray`` imports Ray only when chosen)."""
    kind = cfg["executor"]["kind"]
    if kind == "local":
        return LocalExecutor()
    from pipeline.ray_executor import RayExecutor

    return RayExecutor(
        address=cfg["executor"]["ray_address"] or None,
        num_cpus=cfg["executor"]["num_cpus"] or None,
        max_tasks_per_worker=cfg["executor"]["max_tasks_per_worker"],
    )
