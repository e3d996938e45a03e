"""The stage engine: what every distributed stage shares.

A task is a plain dict with a deterministic ``task_id`` and a ``spec_hash`` (the hash of
everything its output depends on). `run_stage` skips a task whose marker
(``_tasks/<stage>/<task_id>.json``) holds the same spec hash, runs the rest on the executor and
returns every result in task-id order, so whatever is merged from them does not depend on
scheduling. Executors (`pipeline.executors`, `pipeline.ray_executor`) only map a task function
over tasks; they never know which stage they run.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable
from typing import Any, Protocol

from pipeline.outputs import read_json, remove_stale_temps
from pipeline.progress import Progress

TaskFn = Callable[[dict[str, Any]], dict[str, Any]]


class Executor(Protocol):
    name: str

    def map(self, fn: TaskFn, tasks: list[dict[str, Any]], progress: Progress) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


def spec_hash(*parts: Any) -> str:
    """A short content hash of JSON-able parts (keys sorted), the identity of a task's output."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def marker_path(root: str, stage: str, task_id: str) -> str:
    return posixpath.join(root, "_tasks", stage, f"{task_id}.json")


def run_stage(
    executor: Executor,
    stage: str,
    fn: TaskFn,
    tasks: list[dict[str, Any]],
    fs,
    root: str,
    progress_mode: str,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the tasks that have no matching marker; returns all results and the stage's run stats."""
    done, todo = [], []
    for task in tasks:
        marker = marker_path(root, stage, task["task_id"])
        if fs.exists(marker):
            prev = read_json(fs, marker)
            if prev.get("spec_hash") == task["spec_hash"]:
                done.append(prev)
                continue
        todo.append(task)
    progress = Progress(stage, len(todo), mode=progress_mode)
    fresh = executor.map(fn, todo, progress) if todo else []
    seconds = progress.finish() if todo else 0.0
    if todo:
        remove_stale_temps(fs, root)  # left by attempts that died and were retried; every task is done now
    results = sorted(done + fresh, key=lambda r: r["task_id"])
    return results, {"tasks": len(tasks), "skipped": len(done), "ran": len(todo), "seconds": round(seconds, 3)}
