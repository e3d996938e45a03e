"""The stage engine: what every distributed stage shares.

A stage (`Stage`) is an object with a ``name`` (its marker folder), the config ``sections`` its
output depends on, and three methods: ``plan(ctx)`` returns its tasks (``None`` when the stage has
nothing to do in this run), ``run_task(task)`` makes one task's outputs on a worker and returns its
`TaskResult`, and ``finish(ctx, results)`` runs on the driver with every result, in task-id order,
and records what the later stages and the manifest need. The plan of a run (`pipeline.run.PLAN`) is
one list of stages read top to bottom; a test checks that every config section except ``executor``
is claimed by a stage, so no setting can escape the resume check.

A task is a plain dict with a deterministic ``task_id``, the run's ``out`` and a ``spec``: what its
output depends on besides the stage's sections (its input's identity, the spec hashes of the
results it reads). `run_stage` hashes the stage's name, its sections and the task's spec into the
task's ``spec_hash``, skips a task whose marker (``_tasks/<stage>/<task_id>.json``) holds the same
hash, runs the rest on the executor, writes each task's marker after its outputs (`run_and_mark`,
on the worker that ran it), then calls ``finish``. Executors (`pipeline.executors`,
`pipeline.ray_executor`) only map a function over tasks; they never know which stage they run. A stage
may say how many of its tasks the in-process runner can overlap (``local_threads``), a hint Ray and the
worker-process executor ignore (each task has a process of its own).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import posixpath
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NotRequired, Protocol, TypedDict

from pipeline.config import output_config
from pipeline.leftovers import remove_stale_temps
from pipeline.outputs import out_fs, read_json, write_json_atomic
from pipeline.progress import Progress

# CPUs the in-process runner leaves idle while it runs a stage's tasks one at a time; a task may give them
# a helper thread (the sample task's tokenizer thread, `stages.tokenizer.ahead`). A worker process of the Ray
# executor holds one CPU and never sets this.
_spare_cpus = 0


def spare_cpus() -> int:
    """CPUs of this process the running task may use besides its own (0 unless the in-process runner says)."""
    return _spare_cpus


@contextlib.contextmanager
def lending_cpus(n: int) -> Iterator[None]:
    """While the block runs, `spare_cpus` answers `n` (the in-process runner's one-task-at-a-time loop)."""
    global _spare_cpus
    saved, _spare_cpus = _spare_cpus, max(0, n)
    try:
        yield
    finally:
        _spare_cpus = saved


class Task(TypedDict):
    """One unit of work; stages add their own keys (JSON-able, so any executor can ship it).

    ``plan`` gives ``spec``; `run_stage` replaces it by ``spec_hash`` before the task is run."""

    task_id: str
    out: str
    spec: NotRequired[Any]
    spec_hash: NotRequired[str]


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


@dataclass
class RunContext:
    """What the stages of one run share: the config, the output folder, the executor, and what they add.

    ``results`` holds every stage's results by stage name; ``shared`` what a stage's ``finish``
    hands to later stages (resolved settings, the ingest plan, the removed ids).
    """

    cfg: dict[str, Any]
    fs: Any
    root: str
    executor: Executor
    echo: Callable[[str], None]
    manifest: dict[str, Any] = field(default_factory=dict)
    stage_runs: dict[str, Any] = field(default_factory=dict)  # per stage: tasks, skipped, ran, seconds
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def progress(self) -> str:
        return self.cfg["executor"]["progress"]


class Stage:
    """A distributed stage. Subclasses set ``name`` and ``sections`` and define ``plan``, ``run_task``
    (a plain function, ``staticmethod``, so any executor can ship it) and, when the driver has
    something to do with the results, ``finish``."""

    name: str = ""
    sections: tuple[str, ...] = ()
    # How many of its tasks the in-process runner may run at once, on threads. Only for tasks that spend
    # their time in code that releases the GIL (Arrow, Parquet, zstd): Python-bound tasks gain nothing
    # from a second thread. Each task's memory bound then holds per thread.
    local_threads: int = 1
    # Tasks that hold little memory and take a fraction of a second (the dedup stage's small rounds): under
    # Ray's `RECYCLE_TASKS` rule they do not count towards a worker's replacement (`RayExecutor`).
    small_tasks: bool = False

    def __init__(self, name: str | None = None, sections: tuple[str, ...] | None = None,
                 run_task: TaskFn | None = None) -> None:
        """A subclass instance needs no arguments; ``Stage(name, sections, fn)`` is a stage with nothing to
        plan, for running a list of tasks made elsewhere (`run_tasks`) under a name and its sections."""
        if name is not None:
            self.name = name
        if sections is not None:
            self.sections = tuple(sections)
        if run_task is not None:
            self.run_task = run_task  # type: ignore[method-assign]

    def config(self, cfg: dict[str, Any]) -> dict[str, Any]:
        """The output-shaping part of the sections this stage claims (hashed into its tasks' specs)."""
        return output_config({k: cfg[k] for k in self.sections if k in cfg})

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        return None

    @staticmethod
    def run_task(task: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def finish(self, ctx: RunContext, results: list[dict[str, Any]]) -> None:
        return None

    def run(self, ctx: RunContext) -> None:
        """Plan, run and finish this stage (`run_stage`); a stage that drives sub-stages overrides it."""
        run_stage(ctx, self)

    def __repr__(self) -> str:
        return f"<stage {self.name}>"


def claimed_sections(plan: Iterable[Stage]) -> set[str]:
    return {section for stage in plan for section in stage.sections}


class Executor(Protocol):
    name: str

    def map(self, fn: TaskFn, tasks: list[dict[str, Any]], progress: Progress,
            threads: int = 1, small: bool = False) -> list[dict[str, Any]]: ...

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


def with_spec_hashes(stage: Stage, cfg: dict[str, Any], tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks with their ``spec`` replaced by ``spec_hash``: the stage's name and sections, and the spec."""
    claimed = stage.config(cfg)
    out = []
    for task in tasks:
        task = dict(task)
        task["spec_hash"] = spec_hash(stage.name, claimed, task.pop("spec"))
        out.append(task)
    return out


def run_stage(ctx: RunContext, stage: Stage) -> list[dict[str, Any]]:
    """Plan the stage's tasks, hash their specs, run the unfinished ones, then ``finish``; returns the results.

    A stage whose plan is ``None`` does not run in this run (no entry in ``_timings.json``); its
    ``finish`` still gets an empty list.
    """
    tasks = stage.plan(ctx)
    results: list[dict[str, Any]] = []
    if tasks is not None:
        tasks = with_spec_hashes(stage, ctx.cfg, tasks)
        results, ctx.stage_runs[stage.name] = run_tasks(
            ctx.executor, stage.name, stage.run_task, tasks, ctx.fs, ctx.root, ctx.progress,
            threads=stage.local_threads, small=stage.small_tasks,
        )
    ctx.results[stage.name] = results
    stage.finish(ctx, results)
    return results


def outputs_intact(fs, root: str, result: dict[str, Any]) -> bool:
    """Whether every file a finished task recorded (``outputs``: path below the run folder → bytes) is still there
    with its size: a shard or layer part deleted or cut short since is written again, not taken as done."""
    for rel, size in (result.get("outputs") or {}).items():
        try:
            if int(fs.size(posixpath.join(root, rel))) != int(size):
                return False
        except (FileNotFoundError, OSError):
            return False
    return True


def run_tasks(
    executor: Executor,
    name: str,
    fn: TaskFn,
    tasks: list[dict[str, Any]],
    fs,
    root: str,
    progress_mode: str,
    threads: int = 1,
    small: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the tasks (spec hashes set) that have no matching marker under ``_tasks/<name>/``; returns all
    results in task-id order and the run stats. `run_stage` uses it; so does a stage that drives
    sub-stages of its own (the model-in-the-loop stages, one marker folder each)."""
    done, todo = [], []
    for task in tasks:
        marker = marker_path(root, name, task["task_id"])
        if fs.exists(marker):
            prev = read_json(fs, marker)
            # a task that ended without all it needed (a model request that failed) runs again in the next run
            if prev.get("spec_hash") == task["spec_hash"] and not prev.get("incomplete") and outputs_intact(fs, root, prev):
                done.append(prev)
                continue
        todo.append(task)
    progress = Progress(name, len(todo), mode=progress_mode)
    fresh = executor.map(partial(run_and_mark, fn, name), todo, progress, threads=threads, small=small) if todo else []
    seconds = progress.finish() if todo else 0.0
    if todo:
        remove_stale_temps(fs, root)  # left by attempts that died and were retried; every task is done now
    results = sorted(done + fresh, key=lambda r: r["task_id"])
    return results, {"tasks": len(tasks), "skipped": len(done), "ran": len(todo), "seconds": round(seconds, 3)}
