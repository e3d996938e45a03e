"""Killed Ray workers and killed drivers: the output is still byte-identical to a clean run.

The module's Ray session is started with ``LWM_TEST_TASK_DELAY`` in its environment (its workers
inherit it; this process's own environment does not keep it), so every ingest task run on Ray
pauses with its temporary outputs open. A temporary name carries the writer's pid, which is how
the tests find the worker to kill.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from pipeline.run import run_pipeline
from tests.helpers import (
    LWM,
    assert_same_outputs,
    clean_env,
    config_toml,
    corpus_config,
    lwm_in_process,
    write_corpus,
)

psutil = pytest.importorskip("psutil")
TASK_DELAY = "1.0"


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_ADDRESS", raising=False)
        mp.setenv("LWM_TEST_TASK_DELAY", TASK_DELAY)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
        mp.delenv("LWM_TEST_TASK_DELAY")  # only the Ray processes keep it
        try:
            yield ray
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "in", big=150)


@pytest.fixture(scope="module")
def clean_run(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clean") / "out"
    run_pipeline(corpus_config([str(corpus)], out), echo=lambda m: None)
    return out


def _writer_pids(out: Path) -> set[int]:
    """Pids of the processes holding temporary outputs right now (``<name>.tmp-<pid>-<rand>``)."""
    return {int(p.name.split(".tmp-")[1].split("-")[0]) for p in out.rglob("*.tmp-*")}


def _is_ray_worker(pid: int) -> bool:
    try:
        return psutil.Process(pid).name().startswith("ray::")
    except psutil.NoSuchProcess:
        return False


def _timings(out: Path) -> dict:
    return json.loads((out / "_timings.json").read_text())


def test_a_worker_killed_mid_task_is_retried_and_the_output_is_unchanged(ray_session, corpus, clean_run, tmp_path):
    from pipeline.ray_executor import RayExecutor

    out = tmp_path / "out"
    errors: list[BaseException] = []

    def run() -> None:
        try:
            run_pipeline(corpus_config([str(corpus)], out, "ray"), echo=lambda m: None, executor=RayExecutor())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        for pid in _writer_pids(out / "trajectories") if out.exists() else ():
            if pid != os.getpid() and _is_ray_worker(pid):
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
        time.sleep(0.05)
    thread.join(timeout=180)
    assert not thread.is_alive() and not errors, errors
    assert killed is not None, "no ingest task was caught running"
    assert not psutil.pid_exists(killed)
    assert_same_outputs(clean_run, out)
    assert not list(out.rglob("*.tmp-*"))  # the killed attempt's partial files are gone
    assert _timings(out)["ingest"]["ran"] == _timings(out)["ingest"]["tasks"]


def test_a_killed_driver_resumes_with_finished_tasks_skipped(ray_session, corpus, clean_run, tmp_path):
    out = tmp_path / "out"
    address = ray_session.get_runtime_context().gcs_address
    args = ["run", "--executor", "ray", "--ray-address", address, "--input", str(corpus), "--out", str(out),
            "--config", str(config_toml(tmp_path / "c.toml")), "--progress", "off"]
    driver = subprocess.Popen([LWM, *args], env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    markers = out / "_tasks" / "ingest"
    deadline = time.monotonic() + 120
    while driver.poll() is None and time.monotonic() < deadline:
        # kill once some tasks are finished and others are in the middle of writing
        if markers.exists() and len(list(markers.glob("*.json"))) >= 2 and _writer_pids(out / "trajectories"):
            driver.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    driver.wait(timeout=30)
    assert driver.returncode == -signal.SIGKILL, driver.stderr.read().decode()[-2000:]
    assert not (out / "_SUCCESS").exists() and not (out / "manifest.json").exists()
    # Ray ends the dead driver's tasks; wait for them so the re-run does not race a dying writer.
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(p) for p in _writer_pids(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    finished = len(list(markers.glob("*.json")))
    left_behind = len(list(out.rglob("*.tmp-*")))

    again = lwm_in_process(*args)  # the next driver: `lwm run` in this process, on the same Ray
    assert again.returncode == 0, again.stderr[-2000:]
    ingest = _timings(out)["ingest"]
    assert 2 <= finished < ingest["tasks"]
    assert ingest["skipped"] == finished and ingest["ran"] == ingest["tasks"] - finished
    if left_behind:
        assert f"removed {left_behind} partial file(s)" in again.stderr
    assert not list(out.rglob("*.tmp-*"))
    assert (out / "_SUCCESS").exists()
    assert_same_outputs(clean_run, out)
