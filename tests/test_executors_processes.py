"""The worker-process executor (`pipeline.process_executor`): a stage's tasks on processes forked from this one,
with the in-process runner's results, order and errors, workers that die retried, and the same bytes."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.executors import LocalExecutor
from pipeline.process_executor import MAX_RETRIES, SMALL_IN_POOL_BYTES, ProcessExecutor, WorkerDied, can_fork
from pipeline.progress import Progress
from tests.helpers import ROOT, clean_env, write_corpus

pytestmark = pytest.mark.skipif(not can_fork(), reason="worker processes are forked (Linux only)")


def _progress(n: int) -> Progress:
    return Progress("test", n, mode="off", stream=io.StringIO())


def _tasks(n: int, **extra) -> list[dict]:
    return [{"task_id": f"t{i}", "i": i, **extra} for i in range(n)]


def test_tasks_run_on_forked_workers_and_results_come_in_task_order():
    offset = 100  # a closure: the function is not pickled, the workers are forked with it

    def fn(task):
        time.sleep(0.02 * (6 - task["i"]))  # later tasks end first
        return {"task_id": task["task_id"], "pid": os.getpid(), "n": task["i"] + offset, "rows": 1, "bytes": 2}

    progress = _progress(6)
    ex = ProcessExecutor(2, LocalExecutor())
    results = ex.map(fn, _tasks(6), progress)
    assert [r["task_id"] for r in results] == [f"t{i}" for i in range(6)]
    assert [r["n"] for r in results] == list(range(100, 106))
    pids = {r["pid"] for r in results}
    assert len(pids) == 2 and os.getpid() not in pids and ex.forked == 2
    assert (progress.done, progress.rows, progress.bytes) == (6, 6, 12)


def test_one_task_and_small_tasks_run_in_this_process():
    def fn(task):
        return {"task_id": task["task_id"], "pid": os.getpid()}

    ex = ProcessExecutor(2, LocalExecutor())
    assert [r["pid"] for r in ex.map(fn, _tasks(1), _progress(1))] == [os.getpid()]
    assert {r["pid"] for r in ex.map(fn, _tasks(4), _progress(4), small=True)} == {os.getpid()}
    one = ProcessExecutor(1, LocalExecutor())
    assert {r["pid"] for r in one.map(fn, _tasks(4), _progress(4), threads=2)} == {os.getpid()}
    assert ex.forked == 0


def test_a_threaded_stage_runs_on_the_workers_and_each_worker_runs_its_tasks_on_one_thread_not_its_main_one():
    # `threads` is the in-process runner's hint (the shard tasks release the GIL); the pool gives each task a
    # process. In a worker, every task runs on the same thread, which is not the worker's main thread.
    import threading

    def fn(task):
        time.sleep(0.01)
        return {"task_id": task["task_id"], "pid": os.getpid(), "thread": threading.get_ident(),
                "main": threading.current_thread() is threading.main_thread(),
                "name": threading.current_thread().name}

    ex = ProcessExecutor(2, LocalExecutor())
    results = ex.map(fn, _tasks(8), _progress(8), threads=2)
    assert [r["task_id"] for r in results] == [f"t{i}" for i in range(8)]
    assert os.getpid() not in {r["pid"] for r in results} and ex.forked == 2
    assert not any(r["main"] for r in results) and {r["name"] for r in results} == {"lwm-task"}
    threads_of = {}
    for r in results:
        threads_of.setdefault(r["pid"], set()).add(r["thread"])
    assert len(threads_of) == 2 and all(len(t) == 1 for t in threads_of.values())


def test_small_tasks_of_a_large_input_run_on_forked_workers():
    def fn(task):
        return {"task_id": task["task_id"], "pid": os.getpid()}

    ex = ProcessExecutor(2, LocalExecutor())
    ex.plan_for_input(SMALL_IN_POOL_BYTES - 1)
    assert {r["pid"] for r in ex.map(fn, _tasks(4), _progress(4), small=True)} == {os.getpid()}
    ex.plan_for_input(SMALL_IN_POOL_BYTES)
    results = ex.map(fn, _tasks(4), _progress(4), small=True)
    assert [r["task_id"] for r in results] == [f"t{i}" for i in range(4)]
    assert os.getpid() not in {r["pid"] for r in results} and ex.forked == 2


def test_the_first_failing_task_in_order_is_raised_as_itself_and_later_tasks_do_not_begin(tmp_path):
    def fn(task):
        (tmp_path / task["task_id"]).touch()
        if task["i"] == 0:
            time.sleep(0.5)  # t1 fails first in time; t0 comes first in order and fails after it
            raise ValueError("t0 failed")
        if task["i"] == 1:
            raise KeyError("t1 failed")
        return {"task_id": task["task_id"]}

    with pytest.raises(ValueError, match="t0 failed"):
        ProcessExecutor(2, LocalExecutor()).map(fn, _tasks(20), _progress(20))
    started = sorted(p.name for p in tmp_path.iterdir())
    assert started == ["t0", "t1"]


def test_a_task_that_exits_ends_the_stage_with_its_exit_and_no_worker_hangs():
    # SystemExit is no Exception: it leaves the worker's task thread and is raised here, as a task on the
    # worker's main thread raised it
    def fn(task):
        if task["i"] == 1:
            sys.exit(3)
        return {"task_id": task["task_id"]}

    with pytest.raises(SystemExit) as exited:
        ProcessExecutor(2, LocalExecutor()).map(fn, _tasks(3), _progress(3))
    assert exited.value.code == 3


def test_an_exception_that_does_not_pickle_comes_back_as_its_line():
    class Local(Exception):  # defined here: a worker cannot pickle it
        pass

    def fn(task):
        if task["i"] == 1:
            raise Local("not picklable")
        return {"task_id": task["task_id"]}

    with pytest.raises(RuntimeError, match="Local: not picklable"):
        ProcessExecutor(2, LocalExecutor()).map(fn, _tasks(3), _progress(3))


def test_a_worker_killed_mid_task_is_replaced_and_its_task_run_again(tmp_path):
    lines: list[str] = []

    def fn(task):
        if task["i"] == 2 and not (tmp_path / "died").exists():
            (tmp_path / "died").touch()
            os.kill(os.getpid(), signal.SIGKILL)
        (tmp_path / f"{task['task_id']}.{os.getpid()}").touch()
        return {"task_id": task["task_id"], "rows": 1}

    progress = _progress(6)
    results = ProcessExecutor(2, LocalExecutor(), echo=lines.append).map(fn, _tasks(6), progress)
    assert [r["task_id"] for r in results] == [f"t{i}" for i in range(6)]
    assert progress.rows == 6  # a task counted once, whether or not it ran twice
    assert len(lines) == 1 and lines[0].startswith("warning: a worker process died"), lines
    assert any(p.name.startswith("t2.") for p in tmp_path.iterdir())


def test_workers_that_keep_dying_end_the_stage_with_a_clear_error():
    lines: list[str] = []

    def fn(task):
        if task["i"] == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"task_id": task["task_id"]}

    # t2 may still be running on the other worker when t1's kills the pool: then it is unfinished too
    with pytest.raises(WorkerDied, match=r"died 4 times .* t1(, t2)? unfinished.*run the same command again"):
        ProcessExecutor(2, LocalExecutor(), echo=lines.append).map(fn, _tasks(3), _progress(3))
    assert len(lines) == MAX_RETRIES


def test_workers_of_later_stages_are_forked_with_the_tokenizer_loaded():
    from stages.tokenizer.engines import _load_resolved

    def loaded(task):
        return {"task_id": task["task_id"], "cached": _load_resolved.cache_info().currsize}

    _load_resolved.cache_clear()
    ex = ProcessExecutor(2, LocalExecutor(), warm=(None, None))
    first = ex.map(loaded, _tasks(2), _progress(2))
    second = ex.map(loaded, _tasks(2), _progress(2))
    ex.close()
    assert [r["cached"] for r in first] == [0, 0]  # forked before the load began
    assert [r["cached"] for r in second] == [1, 1]


def test_what_was_printed_before_the_fork_is_printed_once(tmp_path):
    script = (
        "import sys\n"
        "from pipeline.executors import LocalExecutor\n"
        "from pipeline.process_executor import ProcessExecutor\n"
        "from pipeline.progress import Progress\n"
        "print('before the workers', end='')\n"  # buffered: stdout is a pipe
        "ProcessExecutor(2, LocalExecutor()).map(lambda t: {'task_id': t['task_id']},\n"
        "                                        [{'task_id': str(i)} for i in range(4)], Progress('t', 4, mode='off'))\n"
        "print(' and after')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=clean_env(),
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "before the workers and after\n"


def _run(src: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "-i", str(src), "-o", str(out),
                           "--progress", "off", "--max-quarantine-rate", "1", *flags],
                          capture_output=True, text=True, env=clean_env(), timeout=600)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "_timings.json"}


def _same_bytes(src: Path, tmp_path: Path) -> None:
    local = _run(src, tmp_path / "local", "--executor", "local")
    assert local.returncode == 0, local.stderr[-3000:]
    processes = _run(src, tmp_path / "processes", "--executor", "processes", "--num-cpus", "2")
    assert processes.returncode == 0, processes.stderr[-3000:]
    a, b = _files(tmp_path / "local"), _files(tmp_path / "processes")
    assert any(k.startswith("shards/") for k in a)
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []


def test_worker_processes_and_this_process_write_the_same_bytes(tmp_path):
    _same_bytes(write_corpus(tmp_path / "in", files=7, per_file=25, big=60), tmp_path)


def test_worker_processes_and_this_process_write_the_same_bytes_on_the_real_samples(shared_data, tmp_path):
    _same_bytes(shared_data, tmp_path)


def _run_until_mid_samples(tmp_path: Path, **popen) -> tuple[subprocess.Popen, list, Path, Path, tuple]:
    """`lwm run` on worker processes, started and caught in its sample stage (a task's marker written, about 16
    to go): the run, its forked workers, the input, the output and the flags."""
    import psutil

    src = write_corpus(tmp_path / "in", files=7, per_file=60, big=1500)
    config = tmp_path / "small-tasks.toml"  # about 16 sample tasks: what happens next lands mid-stage
    config.write_text("[ingest]\nsplit_bytes = 150000\ngroup_bytes = 150000\n")
    out = tmp_path / "out"
    flags = ("--config", str(config), "--executor", "processes", "--num-cpus", "2")
    cmd = [sys.executable, "-m", "pipeline.cli", "run", "-i", str(src), "-o", str(out), "--progress", "off",
           "--max-quarantine-rate", "1", *flags]
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=clean_env(), start_new_session=True, **popen)
    markers = out / "_tasks" / "samples"
    deadline = time.monotonic() + 120
    while not (markers.is_dir() and any(markers.glob("*.json"))):
        assert run.poll() is None, "the run ended before its sample stage was reached"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    workers = psutil.Process(run.pid).children(recursive=True)
    assert workers  # the sample stage's forked workers
    return run, workers, src, out, flags


def test_an_interrupted_run_leaves_no_worker_behind_and_resumes_to_the_same_bytes(tmp_path):
    import psutil

    # Ctrl-C in a terminal: SIGINT to the run's whole process group (not ignored, whatever started the tests)
    run, workers, src, out, flags = _run_until_mid_samples(
        tmp_path, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    config = tmp_path / "small-tasks.toml"
    os.killpg(run.pid, signal.SIGINT)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 130, stderr[-2000:]  # the shell's status for Ctrl-C, and one line saying so
    assert stderr.strip().splitlines()[-1] == "lwm: interrupted (finished tasks are kept: the same command resumes)"
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == []
    assert not (out / "_SUCCESS").exists()

    again = _run(src, out, *flags)
    assert again.returncode == 0, again.stderr[-3000:]
    timings = json.loads((out / "_timings.json").read_text())
    assert timings["ingest"]["skipped"] == timings["ingest"]["tasks"] and timings["samples"]["skipped"] >= 1
    local = _run(src, tmp_path / "local", "--config", str(config), "--executor", "local")
    assert local.returncode == 0, local.stderr[-3000:]
    a, b = _files(tmp_path / "local"), _files(out)
    assert [k for k in a if k.startswith(("shards/", "manifest")) and a[k] != b.get(k)] == []


def test_workers_end_when_the_run_is_killed_outright(tmp_path):
    import psutil

    run, workers, _, _, _ = _run_until_mid_samples(tmp_path, stderr=subprocess.DEVNULL)
    run.kill()  # SIGKILL to the run alone (the out-of-memory killer's way): nothing of it closes its pipes
    run.wait(timeout=30)
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == [], [p.pid for p in alive]


def test_sigterm_to_the_run_alone_ends_its_workers_at_once(tmp_path):
    """`kill PID` (or a container's stop) signals the `lwm` process only: it ends its forked workers instead of
    waiting for the tasks they had begun, exits 143 with one line, and the same command resumes."""
    import psutil

    src = write_corpus(tmp_path / "in", files=4, per_file=10)
    config = tmp_path / "one-file-a-task.toml"
    config.write_text("[ingest]\ngroup_files = 1\n")
    out = tmp_path / "out"
    env = {**clean_env(), "LWM_TEST_TASK_DELAY": "60"}  # every ingest task would take a minute
    run = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "run", "-i", str(src), "-o", str(out), "--progress",
                            "off", "--executor", "processes", "--num-cpus", "2", "--config", str(config)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    workers: list = []
    while len(workers) < 2:
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
        workers = psutil.Process(run.pid).children(recursive=True)
    time.sleep(0.5)
    started = time.monotonic()
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=50)
    assert time.monotonic() - started < 30  # not the minute the tasks would have taken
    assert run.returncode == 143, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == "lwm: terminated (finished tasks are kept: the same command resumes)"
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == []
