"""Around a task in a worker: the task thread it runs on, and Python's cycle collector, paused while a sample
task runs, as it was afterwards (the sample tasks of a real run leave no cycles for it to find)."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import pipeline.sample_task as sample_task
from pipeline.task_process import collector_paused, on_task_thread

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_off_inside_and_back_on_after_even_when_the_block_raises(collector_on):
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("the task failed")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector_on):
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_with_overlapping_blocks_on_two_threads_it_comes_back_after_the_last_one_ends(collector_on):
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with collector_paused():
            a_in.set()
            b_in.wait(10)
        seen["after first"] = gc.isenabled()
        a_out.set()

    def second():
        a_in.wait(10)
        with collector_paused():
            b_in.set()
            a_out.wait(10)
            seen["inside second, first done"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"after first": False, "inside second, first done": False}
    assert gc.isenabled()


def test_a_sample_task_runs_with_the_collector_paused_unless_it_augments_through_a_model(monkeypatch, collector_on):
    seen = []
    monkeypatch.setattr(sample_task, "_run_sample_task", lambda task: seen.append(gc.isenabled()) or {})
    sample_task.run_sample_task({"task_id": "t"})
    sample_task.run_sample_task({"task_id": "t", "llm": {"stages": ["instructions"]}})
    assert seen == [False, True]
    assert gc.isenabled()


# Run in a fresh interpreter: in a process that earlier tests have used, a task can let go of what they left in
# module caches (another tokenizer, say), and that is cyclic garbage of theirs, not of the task.
_NO_CYCLES = """
import gc, sys
from pathlib import Path
from pipeline.run import PLAN, run_pipeline
from tests.helpers import corpus_config, demo_inputs, write_corpus

tmp = Path(sys.argv[1])
stage = next(s for s in PLAN if s.name == "samples")
tasks, run_task = [], stage.run_task
stage.run_task = lambda task: tasks.append(task) or run_task(task)
inputs = [str(write_corpus(tmp / "in", files=3, per_file=12)), *demo_inputs(tmp / "demo", n=4)]
run_pipeline(corpus_config(inputs, tmp / "out"), echo=lambda *a, **k: None)
assert len(tasks) >= 2, tasks
rows = []
for task in tasks:
    gc.collect()
    rows.append(run_task(task)["rows"])  # a part whose trajectories dedup removed (copies) may give none
    found = gc.collect()
    assert found == 0, (task["task_id"], found)
print("tasks", sum(n > 0 for n in rows))
"""


def test_sample_tasks_of_a_run_leave_no_cycles_behind(tmp_path):
    """What pausing relies on: run again one by one, the sample tasks of a run over every domain's demo corpus
    and a generated one leave nothing for a full collection to find."""
    done = subprocess.run([sys.executable, "-c", _NO_CYCLES, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) >= 2


def _where() -> tuple[str, int, bool]:
    me = threading.current_thread()
    return me.name, threading.get_ident(), me is threading.main_thread()


def test_a_task_runs_on_one_thread_of_the_process_that_is_not_the_main_one_and_its_errors_come_back():
    first, second = on_task_thread(_where), on_task_thread(_where)
    assert first == second and first[0] == "lwm-task" and not first[2]
    with pytest.raises(ValueError, match="bad task"):
        on_task_thread(lambda: (_ for _ in ()).throw(ValueError("bad task")))
    with pytest.raises(SystemExit):  # not an Exception: raised here all the same, the thread serves on
        on_task_thread(lambda: sys.exit(2))
    assert on_task_thread(_where) == first


def test_a_ray_workers_task_runs_on_its_task_thread():
    import json

    from pipeline.ray_worker import run_task

    out = run_task(lambda task: {"task_id": task["task_id"], "where": list(_where())}, json.dumps({"task_id": "t"}))
    name, _, main = json.loads(out["result"])["where"]
    assert out["error"] == b"" and name == "lwm-task" and not main
