"""The worker-process executor: a stage's tasks run in processes forked from this one, one task per CPU at once.

On one machine this is what Ray's workers give without Ray's start: forking a process that has already
imported the stages (and, from the second stage on, loaded the tokenizer) takes milliseconds, where a local Ray
takes seconds before its first worker is ready. Each stage with two tasks or more gets a pool of its own
(``min(CPUs, tasks)`` processes, forked when the stage begins and gone when it ends), so a worker never carries
one stage's memory into the next. A stage with one task, or of tasks marked `Stage.small_tasks` (tenths of a
second, where a fork and the result's trip would be most of the cost; below `SMALL_IN_POOL_BYTES` of input), runs
in this process, on the in-process runner (`LocalExecutor`, which lends the idle CPUs to a task it runs alone).
A stage whose tasks release the GIL (`Stage.local_threads`: the shard tasks) runs on the pool too: its hint is
for the in-process runner. The 41 MB run's two SFT shard tasks took 1.07-1.25 s each on two workers, each on its
worker's task thread (`pipeline.task_process.on_task_thread`), against 1.29-1.42 s on two threads of this process
(the shards stage 1.19-1.28 s against 1.36-1.43 s); on the workers' main threads they took 1.40-1.49 s.

The task function is not pickled: the pool is forked after it is set (`_job`), so the children have it, closures
included; tasks and results travel as pickles (they are plain dicts). An exception raised by a task comes back
as data and is raised here as itself (`pipeline.task_process.pack_error`): the first failing task in task order,
once the tasks already running have ended, none of those not yet begun being started (a task is handed to the
pool only when a worker is free for it). A worker process that dies (killed, out of memory) breaks the pool: the
tasks without a result run again in a fresh pool, at most `MAX_RETRIES` times, as Ray retries a task whose worker
died; tasks write their outputs atomically, so a rerun gives the same bytes.

Fork only (Linux): where a process cannot be forked safely, `ProcessExecutor` runs everything in this process.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import itertools
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from pipeline.engine import Executor, TaskFn
from pipeline.progress import Progress
from pipeline.task_process import load_tokenizer_quietly, on_task_thread, pack_error, release_memory, unpack_error

MAX_RETRIES = 3  # pools broken by a dying worker before the stage fails (Ray's `max_retries` for the same case)
# From this much input on (`plan_for_input`), the tasks of a `Stage.small_tasks` stage run on the pool too: they
# are still tenths of a second each, but a round has one per trajectories part or bucket group. At 2 GB (demo
# corpus, 30 parts) the five such rounds of the dedup stage took 18.8 s one after another in this process, and
# 11.5 s on a pool of two (the same outputs).
SMALL_IN_POOL_BYTES = 256 * 1024 * 1024

# The function of the stage being run; set before its pool is forked, so every worker of that pool has it.
_job: TaskFn | None = None
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent: int) -> None:
    """A worker ends when the process that forked it dies, however it dies. Killed (SIGKILL, the kernel's
    out-of-memory killer), the parent closes nothing: the worker, which holds both ends of its task pipe since the
    fork, would wait on it for ever, and one that was mid-task would go on writing into the output while the run is
    started again."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: forking is not used there (`can_fork`)
        return
    if os.getppid() != parent:  # it died before the line above took effect
        os._exit(1)


def can_fork() -> bool:
    """Whether worker processes can be forked here (Linux; macOS's system libraries are not fork-safe)."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def _run(task: dict[str, Any]) -> tuple[dict[str, Any] | None, bytes]:
    """One task in a worker, on the worker's task thread (`on_task_thread`): (result, b"") or (None, its exception
    pickled); memory released after."""
    return on_task_thread(lambda: _run_here(task))


def _run_here(task: dict[str, Any]) -> tuple[dict[str, Any] | None, bytes]:
    assert _job is not None
    try:
        out: tuple[dict[str, Any] | None, bytes] = (_job(task), b"")
    except Exception as exc:
        out = (None, pack_error(exc))
    release_memory()
    return out


def in_this_process(executor: Executor) -> Executor:
    """`executor`, unless it runs tasks on forked workers (``processes``, or ``auto`` having chosen it): then its
    in-process runner. For stages whose tasks share an object of this process with the driver, of which a forked
    worker would only have a copy (the model-in-the-loop stages' budget ledger, `pipeline.llm_budget`)."""
    inner = getattr(executor, "chosen", None) or executor  # `auto`: what it chose
    return inner.local if isinstance(inner, ProcessExecutor) else executor


class WorkerDied(RuntimeError):
    """Worker processes died (killed, out of memory) more often than `MAX_RETRIES` while running a stage."""


class ProcessExecutor:
    """Runs a stage's tasks on ``workers`` forked processes; what stays in this process runs on `local` (the
    in-process runner, `pipeline.executors.LocalExecutor`)."""

    name = "processes"

    def __init__(self, workers: int, local: Executor,
                 warm: tuple[str | None, str | None] | None = None,
                 echo: Callable[[str], None] | None = None) -> None:
        """`warm`: the run's tokenizer (spec, engine), loaded here while the first stage's workers run, so the
        workers of later stages are forked with it (each would otherwise load its own)."""
        self.workers = max(1, int(workers))
        self.local = local
        self._warm = warm
        self._warming: threading.Thread | None = None
        self._echo = echo or (lambda line: print(line, file=sys.stderr))
        self.forked = 0  # worker processes started (for tests and the curious)
        self.small_in_pool = False

    def plan_for_input(self, total_bytes: int) -> None:
        """Once the input is large (≥ `SMALL_IN_POOL_BYTES`), small tasks run on the pool as well."""
        self.small_in_pool = total_bytes >= SMALL_IN_POOL_BYTES

    def map(self, fn: TaskFn, tasks: list[dict[str, Any]], progress: Progress,
            threads: int = 1, small: bool = False) -> list[dict[str, Any]]:
        """Results in task order; `threads` (the in-process runner's hint) is used only when the stage runs in
        this process: in the pool, every task has a process of its own."""
        workers = min(self.workers, len(tasks))
        if (small and not self.small_in_pool) or workers < 2 or not can_fork():
            return self.local.map(fn, tasks, progress, threads=threads, small=small)
        results: list[dict[str, Any] | None] = [None] * len(tasks)
        todo = list(range(len(tasks)))
        for attempt in range(MAX_RETRIES + 1):
            try:
                self._run_pool(fn, tasks, todo, results, progress, min(workers, len(todo)))
                break
            except BrokenProcessPool as exc:
                todo = [i for i in todo if results[i] is None]
                names = ", ".join(tasks[i]["task_id"] for i in todo[:3]) + (" …" if len(todo) > 3 else "")
                if attempt == MAX_RETRIES:
                    raise WorkerDied(
                        f"a worker process died {MAX_RETRIES + 1} times (killed, or out of memory?) with tasks "
                        f"{names} unfinished; finished tasks are kept: run the same command again to resume, "
                        "or with --executor local to see the failure in this process") from exc
                self._echo(f"warning: a worker process died (killed, or out of memory?); running the "
                           f"{len(todo)} unfinished task(s) again ({names})")
        return [r for r in results if r is not None]

    def _run_pool(self, fn: TaskFn, tasks: list[dict[str, Any]], todo: list[int],
                  results: list[dict[str, Any] | None], progress: Progress, workers: int) -> None:
        global _job
        if self._warming is not None:  # no thread of ours runs while this process forks
            self._warming.join()
        sys.stdout.flush()  # a child flushes what it inherited when it exits: print it once, here
        sys.stderr.flush()
        _job = fn
        errors: dict[int, bytes] = {}
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_die_with_parent, initargs=(os.getpid(),))
        try:
            # As many tasks in the pool as it has workers: a task is handed over when a worker is free, so after
            # a failure no task not yet begun is left queued to start.
            queue = iter(todo)
            futures: dict[Future, int] = {}
            for i in itertools.islice(queue, workers):
                futures[self._submit(pool, tasks[i], first=not futures, workers=workers)] = i
            waiting = set(futures)
            while waiting:
                done, waiting = wait(waiting, return_when=FIRST_COMPLETED)
                for future in done:
                    result, error = future.result()  # a broken pool raises here
                    i = futures[future]
                    if error:
                        errors[i] = error
                    else:
                        assert result is not None
                        results[i] = result
                        progress.count(result)
                    if not errors and (j := next(queue, None)) is not None:
                        nxt = self._submit(pool, tasks[j])
                        futures[nxt] = j
                        waiting.add(nxt)
        except KeyboardInterrupt:  # Ctrl-C reaches the workers too; SIGTERM (`Terminated`) only this process
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                with contextlib.suppress(OSError):
                    process.kill()  # an interrupted run ends now, not after the tasks it had begun
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            _job = None
        if errors:  # the first failed task in task order, as the in-process runner would have met it
            raise unpack_error(errors[min(errors)])

    def _submit(self, pool: ProcessPoolExecutor, task: dict[str, Any], first: bool = False,
                workers: int = 0) -> Future:
        if not first:
            return pool.submit(_run, task)
        # The first submit forks every worker of the pool. What this process holds now is frozen for the fork:
        # a worker's collections (`release_memory`) then skip it, instead of touching, and so copying, every
        # page of it.
        gc.freeze()
        try:
            future = pool.submit(_run, task)
        finally:
            gc.unfreeze()
        self.forked += workers
        self._start_warming()
        return future

    def _start_warming(self) -> None:
        if self._warm is None or self._warming is not None:
            return
        self._warming = threading.Thread(target=load_tokenizer_quietly, args=self._warm, name="lwm-warm", daemon=True)
        self._warming.start()

    def close(self) -> None:
        if self._warming is not None:
            self._warming.join()
