"""The stage engine: what every distributed stage shares.

A `Stage` names its task function and the config sections its output depends on. The plan of a
run (`pipeline.run.PLAN`) is a list of `Step`s read top to bottom, each a driver with the stages
it runs; a test checks that every config section except ``executor`` is claimed by a stage, so no
setting can escape the resume check.

A `Task` is a plain dict with a deterministic ``task_id``, the run's ``out`` and a ``spec_hash``
(the hash of everything its output depends on, the stage's sections included). `run_stage` skips
a task whose marker (``_tasks/<stage>/<task_id>.json``) holds the same spec hash, runs the rest on
the executor, writes each task's marker after its outputs (`run_and_mark`, on the worker that ran
it) and returns every `TaskResult` in task-id order, so whatever is merged from them does not
depend on scheduling. Executors (`pipeline.executors`, `pipeline.ray_executor`) only map a
function over tasks; they never know which stage they run.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NotRequired, Protocol, TypedDict

from pipeline.config import output_config
from pipeline.outputs import out_fs, read_json, remove_stale_temps, write_json_atomic
from pipeline.progress import Progress


class Task(TypedDict):
    """One unit of work; stages add their own keys (JSON-able, so any executor can ship it)."""

    task_id: str
    out: str
    spec_hash: str


class TaskResult(TypedDict):
    """What a task returns; it is also the task's marker, so a resumed run reads it back as is."""

    task_id: str
    stage: str
    spec_hash: str
    stats: dict[str, float]
    rows: int
    bytes: int
    files: NotRequired[Any]


TaskFn = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Stage:
    """A distributed stage: its marker folder name, the config sections it reads, its task function."""

    name: str
    sections: tuple[str, ...]
    run_task: TaskFn

    def config(self, cfg: dict[str, Any]) -> dict[str, Any]:
        """The output-shaping part of the sections this stage claims (hashed into its tasks' specs)."""
        return output_config({k: cfg[k] for k in self.sections if k in cfg})


@dataclass
class RunContext:
    """What the steps of one run share: the config, the output folder, the executor, and what they add."""

    cfg: dict[str, Any]
    fs: Any
    root: str
    executor: Executor
    echo: Callable[[str], None]
    manifest: dict[str, Any] = field(default_factory=dict)
    stage_runs: dict[str, Any] = field(default_factory=dict)  # per stage: tasks, skipped, ran, seconds
    ingest_results: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Step:
    """One entry of a run's plan: the stages it runs and the driver that plans their tasks, runs them
    with `run_stage` and records what they found in the manifest."""

    name: str
    stages: tuple[Stage, ...]
    run: Callable[[RunContext], None]


def claimed_sections(plan: Iterable[Step]) -> set[str]:
    return {section for step in plan for stage in step.stages for section in stage.sections}


class Executor(Protocol):
    name: str

    def map(self, fn: TaskFn, tasks: list[dict[str, Any]], progress: Progress) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


def spec_hash(*parts: Any) -> str:
    """A short content hash of JSON-able parts (keys sorted), the identity of a task's output."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def marker_path(root: str, stage: str, task_id: str) -> str:
    return posixpath.join(root, "_tasks", stage, f"{task_id}.json")


def run_and_mark(fn: TaskFn, stage: str, task: dict[str, Any]) -> dict[str, Any]:
    """Run one task, then write its marker: a task with a marker has all its outputs."""
    result = fn(task)
    fs, root = out_fs(task["out"])
    write_json_atomic(fs, marker_path(root, stage, task["task_id"]), result)
    return result


def run_stage(
    executor: Executor,
    stage: Stage | str,
    fn: TaskFn | None,
    tasks: list[dict[str, Any]],
    fs,
    root: str,
    progress_mode: str,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the tasks that have no matching marker; returns all results and the stage's run stats.

    `stage` is a `Stage` (its task function is used when `fn` is None) or a marker folder name.
    """
    if isinstance(stage, Stage):
        fn = fn or stage.run_task
        stage = stage.name
    assert fn is not None
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
    fresh = executor.map(partial(run_and_mark, fn, stage), todo, progress) if todo else []
    seconds = progress.finish() if todo else 0.0
    if todo:
        remove_stale_temps(fs, root)  # left by attempts that died and were retried; every task is done now
    results = sorted(done + fresh, key=lambda r: r["task_id"])
    return results, {"tasks": len(tasks), "skipped": len(done), "ran": len(todo), "seconds": round(seconds, 3)}
