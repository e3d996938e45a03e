"""The in-process runner: tasks one after another, or, for a stage that says its tasks release the GIL
(`Stage.local_threads`), a few at once on threads, with the same results, order and errors."""

from __future__ import annotations

import io
import threading
import time

import fsspec
import pytest

import pipeline.executors as executors
from pipeline.engine import RunContext, Stage, run_stage
from pipeline.executors import LocalExecutor
from pipeline.progress import Progress
from pipeline.run import PLAN


def _progress(n: int) -> Progress:
    return Progress("test", n, mode="off", stream=io.StringIO())


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(executors, "_cpus", lambda: 2)


def test_a_threaded_stage_runs_two_tasks_at_once_and_returns_them_in_order(two_cpus):
    meet = threading.Barrier(2, timeout=20)  # passes only when two tasks wait at it together

    def fn(task):
        meet.wait()
        time.sleep(0.01 * (4 - task["i"]))  # later tasks end first
        return {"task_id": task["task_id"], "rows": task["i"], "bytes": 1}

    tasks = [{"task_id": f"t{i}", "i": i} for i in range(4)]
    progress = _progress(4)
    results = LocalExecutor().map(fn, tasks, progress, threads=2)
    assert [r["task_id"] for r in results] == ["t0", "t1", "t2", "t3"]
    assert (progress.done, progress.rows, progress.bytes) == (4, 6, 4)


def test_without_the_hint_or_a_second_cpu_tasks_run_one_after_another(monkeypatch):
    active, most = 0, 0
    lock = threading.Lock()

    def fn(task):
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        time.sleep(0.02)
        with lock:
            active -= 1
        return {"task_id": task["task_id"]}

    tasks = [{"task_id": f"t{i}"} for i in range(4)]
    monkeypatch.setattr(executors, "_cpus", lambda: 2)
    LocalExecutor().map(fn, tasks, _progress(4))
    assert most == 1
    monkeypatch.setattr(executors, "_cpus", lambda: 1)
    LocalExecutor().map(fn, tasks, _progress(4), threads=2)
    assert most == 1


def test_the_first_failing_task_in_order_is_raised_and_no_later_task_begins(two_cpus):
    second_failed = threading.Event()
    started = []

    def fn(task):
        started.append(task["task_id"])
        if task["task_id"] == "t0":
            assert second_failed.wait(20)
            raise ValueError("t0 failed")
        if task["task_id"] == "t1":
            second_failed.set()
            raise KeyError("t1 failed")
        return {"task_id": task["task_id"]}

    with pytest.raises(ValueError, match="t0 failed"):  # t1 failed first in time, t0 comes first in order
        LocalExecutor().map(fn, [{"task_id": f"t{i}"} for i in range(4)], _progress(4), threads=2)
    assert sorted(started) == ["t0", "t1"]


def test_after_a_failure_a_task_already_running_ends_before_map_returns_and_none_is_started(two_cpus):
    first_failed, second_began, ended = threading.Event(), threading.Event(), []
    started = []

    def fn(task):
        started.append(task["task_id"])
        if task["task_id"] == "t1":
            first_failed.set()
            raise RuntimeError("t1 failed")
        return {"task_id": task["task_id"]}

    def slow_first(task):  # t0 ends well after t1 has failed: the failure is seen, t2 is not begun
        if task["task_id"] == "t0":
            assert first_failed.wait(20)
            time.sleep(0.5)
        return fn(task)

    with pytest.raises(RuntimeError, match="t1 failed"):
        LocalExecutor().map(slow_first, [{"task_id": f"t{i}"} for i in range(4)], _progress(4), threads=2)
    assert sorted(started) == ["t0", "t1"]

    def late_failure(task):  # t0 ends at once, t2 begins next to t1, and t1 fails while t2 runs
        if task["task_id"] == "t1":
            assert second_began.wait(20)
        if task["task_id"] == "t2":
            second_began.set()
            time.sleep(0.3)
            ended.append("t2")
        return fn(task)

    started.clear()
    with pytest.raises(RuntimeError, match="t1 failed"):
        LocalExecutor().map(late_failure, [{"task_id": f"t{i}"} for i in range(4)], _progress(4), threads=2)
    assert ended == ["t2"] and sorted(started) == ["t0", "t1", "t2"]


class _Recording(LocalExecutor):
    def __init__(self) -> None:
        self.threads: list[int] = []

    def map(self, fn, tasks, progress, threads=1, small=False):
        self.threads.append(threads)
        return super().map(fn, tasks, progress, threads=threads, small=small)


class _Threaded(Stage):
    name = "threaded"
    local_threads = 2

    def plan(self, ctx):
        return [{"task_id": "a", "out": ctx.cfg["run"]["out"], "spec": {}}]

    @staticmethod
    def run_task(task):
        return {"task_id": task["task_id"], "rows": 0, "bytes": 0}


def test_the_engine_passes_a_stage_s_hint_and_only_the_shards_stage_gives_one(tmp_path):
    executor = _Recording()
    cfg = {"run": {"out": str(tmp_path)}, "executor": {"progress": "off"}}
    ctx = RunContext(cfg, fsspec.filesystem("file"), str(tmp_path), executor, lambda _m: None)
    assert [r["task_id"] for r in run_stage(ctx, _Threaded())] == ["a"]
    assert executor.threads == [2]
    assert {s.name: s.local_threads for s in PLAN if s.local_threads != 1} == {"shards": 2}
