"""The Ray executor gives exactly the bytes of the in-process runner (SPEC §3, determinism contract).

One local Ray session (2 CPUs, no dashboard) serves the whole module. The corpus helpers here
(`write_corpus`, `output_bytes`, `corpus_config`) are shared by the other Ray and resume tests.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.arrow_pool import POOL_VARIABLE, RUN_POOL
from pipeline.progress import Progress
from pipeline.ray_local import FULL_START_ENV, _dashboard_is_minimal
from pipeline.run import run_pipeline
from tests.helpers import (
    DOMAINS,
    LWM,
    assert_same_outputs,
    clean_env,
    config_toml,
    corpus_config,
    count_calls,
    demo_inputs,
    pandas_imported,
    write_corpus,
)


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_ADDRESS", raising=False)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
        try:
            yield ray
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("corpus")
    return [str(write_corpus(root / "gen", big=150)), *demo_inputs(root / "demo")]


@pytest.fixture(scope="module")
def local_run(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local") / "out"
    run_pipeline(corpus_config(corpus, out), echo=lambda m: None)
    return out


@pytest.fixture(scope="module")
def ray_run(ray_session, corpus, tmp_path_factory) -> Path:
    from pipeline.ray_executor import RayExecutor

    out = tmp_path_factory.mktemp("ray") / "out"
    run_pipeline(corpus_config(corpus, out, "ray"), echo=lambda m: None, executor=RayExecutor())
    return out


def test_ray_and_local_runs_are_byte_identical(local_run, ray_run):
    assert_same_outputs(local_run, ray_run)
    timings = json.loads((ray_run / "_timings.json").read_text())
    # every task shape ran on Ray: ranges (scan + ingest), groups, several sample and shard tasks
    assert timings["scan"]["tasks"] >= 3
    assert timings["ingest"]["tasks"] >= 6
    assert timings["shards"]["tasks"] >= 8
    manifest = json.loads((ray_run / "manifest.json").read_text())
    quarantined = [r for p in (ray_run / "quarantine").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert [(Path(r["uri"]).name, r["locator"], r["reason"]) for r in quarantined if "/gen/" in r["uri"]] == [
        ("search-1.jsonl", "line 8", "malformed_json")
    ]
    assert manifest["counts"]["filtered"]["min_turns"] >= 1
    assert set(manifest["counts"]["domains"]) == set(DOMAINS)
    assert sum(s["rows"] for s in manifest["shards"]) == sum(manifest["counts"]["samples"][p] for p in
                                                              ("cpt", "sft", "rl", "eval"))


def test_ray_and_local_are_byte_identical_on_the_real_samples(ray_session, shared_data, tmp_path):
    from pipeline.ray_executor import RayExecutor

    runs = {}
    for kind in ("local", "ray"):
        cfg = corpus_config([str(shared_data)], tmp_path / kind, kind, max_quarantine_rate=1.0)
        executor = RayExecutor() if kind == "ray" else None
        runs[kind] = run_pipeline(cfg, echo=lambda m: None, executor=executor)
    assert_same_outputs(tmp_path / "local", tmp_path / "ray")
    kept = runs["ray"]["counts"]["trajectories"]["kept"]
    assert kept >= 10  # the real folders hold at least a dozen usable runs across the adapters
    assert len(runs["ray"]["shards"]) >= 4


def test_one_and_two_cpus_through_the_cli_give_the_same_bytes_and_a_quiet_stderr(corpus, ray_run, tmp_path):
    out = tmp_path / "one-cpu"
    cmd = [LWM, "run", "--executor", "ray", "--num-cpus", "1", "--config", str(config_toml(tmp_path / "c.toml")),
           "--out", str(out), "--progress", "lines"]
    for spec in corpus:
        cmd += ["--input", spec]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_same_outputs(ray_run, out)
    # Ray Data's own INFO lines and notices stay off the terminal; our progress lines are there
    for noise in ("execution finished", "Progress bars disabled", "RayDeprecationWarning", "streaming_executor",
                  "Token authentication"):
        assert noise not in proc.stderr, noise
    assert "[ingest] " in proc.stderr and "[shards] " in proc.stderr


def test_a_task_exception_is_raised_on_the_driver_as_itself_in_task_order(ray_session):
    from pipeline.progress import Progress
    from pipeline.ray_executor import RayExecutor
    from schemas.errors import ConfigError

    def fail_on_odd(task):
        if task["n"] % 2:
            raise ConfigError(f"task {task['n']} cannot write its output")
        return {"task_id": task["task_id"], "rows": 1}

    tasks = [{"task_id": f"t{n}", "n": n} for n in range(5)]
    with pytest.raises(ConfigError, match=r"^task 1 cannot write its output$"):
        RayExecutor().map(fail_on_odd, tasks, Progress("test", len(tasks), mode="off"))


def test_a_task_error_under_ray_is_the_same_one_line_as_under_the_local_runner(tmp_path):
    """An ingest task cannot create its trajectories folder (a file holds the name): the same stderr, the
    same exit status under both executors, and neither a traceback nor Ray's token-auth notice."""
    src = write_corpus(tmp_path / "in", files=2, per_file=5)
    seen = {}
    for kind in ("local", "ray"):
        out = tmp_path / kind
        out.mkdir()
        (out / "trajectories").write_text("a file where the layer's folder goes\n")
        proc = subprocess.run([LWM, "run", "--executor", kind, "--num-cpus", "1", "-i", str(src), "-o", str(out),
                               "--progress", "off"], capture_output=True, text=True, env=clean_env(), timeout=240)
        for noise in ("Traceback", "RayTaskError", "UserCodeException", "Token authentication"):
            assert noise not in proc.stderr, proc.stderr[-3000:]
        seen[kind] = (proc.returncode, proc.stderr.replace(str(out), "OUT"))
    assert seen["ray"] == seen["local"]
    status, stderr = seen["ray"]
    assert status == 2
    assert stderr.splitlines()[-1] == "lwm: error: output not writable: OUT/trajectories (it is a file, not a folder)"


class _Timed(Progress):
    """Progress that remembers when each task's update arrived."""

    def __init__(self, total: int) -> None:
        super().__init__("test", total, mode="off")
        self.seen: list[float] = []

    def update(self, tasks: int = 1, rows: int = 0, nbytes: int = 0) -> None:
        self.seen.append(time.monotonic())
        super().update(tasks, rows, nbytes)


def test_results_come_in_task_order_and_progress_moves_as_tasks_finish(ray_session):
    from pipeline.ray_executor import RayExecutor

    tasks = [{"task_id": "t0", "sleep": 3.0}] + [{"task_id": f"t{n}"} for n in range(1, 5)]
    progress = _Timed(len(tasks))
    start = time.monotonic()
    results = RayExecutor().map(count_calls, tasks, progress)
    assert [r["task_id"] for r in results] == [t["task_id"] for t in tasks]
    assert progress.done == len(tasks) and progress.rows == len(tasks)
    # the four quick tasks were reported while the slow first one still ran on the other worker
    assert sorted(progress.seen)[3] - start < 2.5 <= sorted(progress.seen)[4] - start
    assert all(r["pid"] != os.getpid() for r in results)


def test_workers_are_reused_across_stages(ray_session):
    from pipeline.ray_executor import RayExecutor

    ex = RayExecutor()
    first = ex.map(count_calls, [{"task_id": f"a{n}"} for n in range(4)], Progress("a", 4, mode="off"))
    second = ex.map(count_calls, [{"task_id": f"b{n}"} for n in range(4)], Progress("b", 4, mode="off"))
    pids = {r["pid"] for r in first + second}
    assert len(pids) <= 2 < len(first + second)  # two CPUs: at most two processes ran all eight tasks
    assert max(r["call"] for r in second) >= 3  # a process of the first stage ran tasks of the second


def test_workers_convert_with_pyarrow_without_importing_pandas(ray_session, ray_run):
    from pipeline.ray_executor import RayExecutor

    # after a whole run on these workers, and in fresh ones (a process per task)
    for ex in (RayExecutor(), RayExecutor(max_tasks_per_worker=1)):
        results = ex.map(pandas_imported, [{"task_id": f"p{n}"} for n in range(4)], Progress("p", 4, mode="off"))
        assert [r["pandas"] for r in results] == [False] * 4


def test_max_tasks_per_worker_one_gives_every_task_a_fresh_process(ray_session):
    from pipeline.ray_executor import RayExecutor

    results = RayExecutor(max_tasks_per_worker=1).map(count_calls, [{"task_id": f"c{n}"} for n in range(4)],
                                                      Progress("c", 4, mode="off"))
    assert len({r["pid"] for r in results}) == 4  # two CPUs, four processes: each exited after its task


def test_a_worker_process_is_replaced_after_max_tasks_per_worker_tasks(ray_session):
    # What a large input gets by default (`RECYCLE_TASKS`): bounded reuse, neither a process per task nor forever.
    from pipeline.ray_executor import RayExecutor

    results = RayExecutor(max_tasks_per_worker=2).map(count_calls, [{"task_id": f"r{n}"} for n in range(6)],
                                                      Progress("r", 6, mode="off"))
    per_process = Counter(r["pid"] for r in results)
    assert max(per_process.values()) <= 2 and len(per_process) >= 3  # two CPUs, six tasks, two tasks a process
    assert max(per_process.values()) == 2  # ... and a process did run a second task


def test_small_tasks_do_not_count_towards_a_workers_replacement(ray_session):
    # `Stage.small_tasks` (the dedup stage's small rounds): under ``auto`` replacement a worker runs them without
    # using up its `RECYCLE_TASKS`, which count the other tasks only.
    from pipeline.ray_executor import RECYCLE_BYTES, RayExecutor

    ex = RayExecutor()
    ex.plan_for_input(RECYCLE_BYTES)  # a large input: workers are replaced
    ex.max_tasks_per_worker = 2  # in place of `RECYCLE_TASKS`, so that six tasks cross it
    small = ex.map(count_calls, [{"task_id": f"s{n}"} for n in range(6)], Progress("s", 6, mode="off"), small=True)
    assert len({r["pid"] for r in small}) <= 2  # two CPUs, six small tasks: no process was replaced
    large = ex.map(count_calls, [{"task_id": f"l{n}"} for n in range(6)], Progress("l", 6, mode="off"))
    per_process = Counter(r["pid"] for r in large)
    assert max(per_process.values()) <= 2 and len(per_process) >= 3  # the other tasks: two a process


def test_explicit_ray_and_auto_above_the_threshold_run_on_ray_workers(ray_session):
    from pipeline.config import resolve
    from pipeline.executors import make_executor
    from pipeline.ray_executor import RayExecutor

    explicit = make_executor(resolve(overrides={"executor": {"kind": "ray", "local_below_bytes": 10**15}}))
    assert isinstance(explicit, RayExecutor)
    lines: list[str] = []
    auto = make_executor(resolve(overrides={"executor": {"local_below_bytes": 1000}}), lines.append)
    auto.plan_for_input(1000)
    assert isinstance(auto.chosen, RayExecutor)
    assert lines == ["executor: ray (input 0.0 MB ≥ 0.0 MB, where Ray takes over)"]
    for ex in (explicit, auto):
        ex.plan_for_input(10)
        results = ex.map(count_calls, [{"task_id": "d0"}, {"task_id": "d1"}], Progress("d", 2, mode="off"))
        assert all(r["pid"] != os.getpid() for r in results)


_BACKGROUND_START = """
import json, os, sys, time
from pipeline.progress import Progress
from pipeline.ray_executor import RECYCLE_BYTES, RayExecutor

ex = RayExecutor(num_cpus=2)
if sys.argv[1:] == ["large"]:
    ex.plan_for_input(RECYCLE_BYTES)  # a large input: no task may run in the driver

def until_ray_is_up(task):
    import __main__  # the driver's executor, looked up here so that the function ships without it
    if task.get("wait") and hasattr(__main__, "ex"):  # in the driver: Ray is still starting
        deadline = time.monotonic() + 200
        while not __main__.ex.ray_ready and time.monotonic() < deadline:
            time.sleep(0.05)
    import pyarrow as pa
    return {"task_id": task["task_id"], "pid": os.getpid(), "rayon": os.environ.get("RAYON_NUM_THREADS"),
            "pool": pa.default_memory_pool().backend_name, "rows": 1}

tasks = [{"task_id": "t0", "wait": True}] + [{"task_id": f"t{n}"} for n in range(1, 5)]
results = ex.map(until_ray_is_up, tasks, Progress("t", len(tasks), mode="off"))
# Which of Ray's processes were still running when Ray's own shutdown came to them, and whether any outlives it.
import psutil
import ray._private.node as ray_node
ray_processes = psutil.Process().children(recursive=True)
alive_at_stop = {}
kill = ray_node.Node._kill_process_impl
def noting(self, process_type, **kwargs):
    infos = self.all_processes.get(process_type, [])
    alive_at_stop[process_type] = any(i.process.poll() is None for i in infos)
    return kill(self, process_type, **kwargs)
ray_node.Node._kill_process_impl = noting
started = sorted(ex._ray._private.worker._global_node.all_processes)
ex.close()
deadline = time.monotonic() + 30
left = ray_processes
while left and time.monotonic() < deadline:
    left = [p for p in ray_processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    time.sleep(0.1)
print(json.dumps({"driver": os.getpid(), "results": results, "driver_rayon": os.environ.get("RAYON_NUM_THREADS"),
                  "alive_at_stop": alive_at_stop, "left": [p.pid for p in left], "started": started}))
"""


@pytest.mark.parametrize("full_start", [False, True], ids=["lean", "full"])
def test_a_local_ray_starts_while_the_first_tasks_run_in_the_driver_then_takes_the_rest(tmp_path, full_start):
    """Ray starts in the background: tasks met before it is up run in the driver, the others on Ray workers
    (whose environment, unlike the driver's, holds the one-thread setting); results stay in task order.
    The start leaves out the processes a batch run does not use, unless `LWM_RAY_FULL_START=1`."""
    env = {k: v for k, v in clean_env().items() if k not in ("RAYON_NUM_THREADS", FULL_START_ENV, POOL_VARIABLE)}
    if full_start:
        env[FULL_START_ENV] = "1"
    proc = subprocess.run([sys.executable, "-c", _BACKGROUND_START],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for noise in ("Traceback", "SIGTERM handler", "Token authentication"):
        assert noise not in proc.stderr, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    results = seen["results"]
    assert [r["task_id"] for r in results] == [f"t{n}" for n in range(5)]
    assert results[0]["pid"] == seen["driver"]
    assert all(r["pid"] != seen["driver"] and r["rayon"] == "1" for r in results[1:])
    assert seen["driver_rayon"] is None  # set for the Ray processes only, not left in the driver
    assert all(r["pool"] == RUN_POOL for r in results[1:])  # the workers allocate Arrow memory with the run's pool
    unused = {"monitor", "log_monitor"} | ({"dashboard"} if _dashboard_is_minimal() else set())
    assert {"raylet", "gcs_server", "dashboard"} - unused <= set(seen["started"])
    if full_start:
        assert unused <= set(seen["started"])
        # The autoscaler monitor is stopped before Ray's shutdown (which would stop the GCS first and leave
        # the monitor a one-second grace to report to it).
        assert seen["alive_at_stop"]["monitor"] is False
    else:
        assert not unused & set(seen["started"]), seen["started"]
    # The other processes are Ray's to stop, and none is left.
    assert seen["alive_at_stop"]["raylet"] is True and seen["alive_at_stop"]["gcs_server"] is True
    assert seen["left"] == []


_HAND_OFF = """
import json, os, sys, time
from pipeline.progress import Progress
from pipeline.ray_executor import RayExecutor

ex = RayExecutor(num_cpus=2)

def task_fn(task):
    import __main__
    out = {"task_id": task["task_id"], "pid": os.getpid(), "rows": 1}
    if hasattr(__main__, "ex"):  # in the driver: keep running this task until a Ray worker has run t1
        deadline = time.monotonic() + 200
        while not __main__.ex.ray_ready and time.monotonic() < deadline:
            time.sleep(0.05)
        deadline = time.monotonic() + 20
        while not os.path.exists("t1.done") and time.monotonic() < deadline:
            time.sleep(0.05)
        out["saw_t1_done"] = os.path.exists("t1.done")
        if sys.argv[1:] == ["fail"]:
            raise ValueError("t0 failed")
    else:
        time.sleep(0.5 if task["task_id"] == "t3" else 0)
        open(task["task_id"] + ".done", "w").close()
    return out

tasks = [{"task_id": f"t{n}"} for n in range(4)]
try:
    results, error = ex.map(task_fn, tasks, Progress("t", len(tasks), mode="off")), None
except ValueError as exc:
    results, error = [], str(exc)
done = sorted(f for f in os.listdir(".") if f.endswith(".done"))  # before Ray's stop could end a task
ex.close()
print(json.dumps({"driver": os.getpid(), "results": results, "error": error, "done": done}))
"""


def test_tasks_not_yet_begun_go_to_ray_while_the_driver_finishes_its_own(tmp_path):
    """Once Ray is up, the stage's remaining tasks are handed to its workers at once, not after the task the
    driver is running: here that task waits (at most 20 s) for a file that only a worker's run of t1 writes."""
    proc = subprocess.run([sys.executable, "-c", _HAND_OFF],
                          capture_output=True, text=True, env=clean_env(), timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    results = seen["results"]
    assert [r["task_id"] for r in results] == ["t0", "t1", "t2", "t3"]
    assert results[0]["pid"] == seen["driver"] and results[0]["saw_t1_done"] is True
    assert all(r["pid"] != seen["driver"] for r in results[1:])


def test_a_failing_driver_task_is_the_error_after_the_tasks_handed_to_ray_end(tmp_path):
    """The driver's task comes first in task order, so its error is the run's, raised once every task already
    handed to Ray has ended (as under Ray, where every submitted task runs)."""
    proc = subprocess.run([sys.executable, "-c", _HAND_OFF, "fail"],
                          capture_output=True, text=True, env=clean_env(), timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["error"] == "t0 failed"
    assert seen["done"] == ["t1.done", "t2.done", "t3.done"]


def test_with_a_task_per_worker_process_no_task_runs_in_the_driver(tmp_path):
    """With a large input, while Ray starts, the driver waits instead of running tasks itself, so its memory
    stays that of a driver."""
    env = {k: v for k, v in clean_env().items() if k != "RAYON_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", _BACKGROUND_START, "large"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["task_id"] for r in seen["results"]] == [f"t{n}" for n in range(5)]
    assert all(r["pid"] != seen["driver"] and r["rayon"] == "1" for r in seen["results"])


def test_sigterm_ends_a_ray_run_with_one_line_and_leaves_no_ray_process(tmp_path):
    """SIGTERM (a scheduler's stop, `kill`) ends `lwm run` as Ctrl-C does: through Ray's shutdown, so none of
    the processes it started (GCS, raylet, agents, workers) outlives it; exit 143 and one line."""
    import signal

    import psutil

    src = write_corpus(tmp_path / "in", files=3, per_file=10)
    out = tmp_path / "out"
    env = {**clean_env(), "LWM_TEST_TASK_DELAY": "5"}
    run = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "run", "--executor", "ray", "--num-cpus", "2",
                            "--progress", "off", "-i", str(src), "-o", str(out)],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    driver = psutil.Process(run.pid)
    deadline = time.monotonic() + 120
    started: list[psutil.Process] = []
    while not any("raylet" in " ".join(p.cmdline()) for p in started if p.is_running()):
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
        started = driver.children(recursive=True)
    time.sleep(2)  # the agents and workers too
    started = driver.children(recursive=True)
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 143, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == "lwm: terminated (finished tasks are kept: the same command resumes)"
    _, alive = psutil.wait_procs(started, timeout=20)
    assert not alive, [" ".join(p.cmdline())[:80] for p in alive]
