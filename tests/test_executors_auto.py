"""The default executor (``auto``): on this machine below ``executor.local_below_bytes`` of input (worker
processes with two CPUs or more, this process alone with one), Ray at or above it or when a cluster is given; it
says which and why, and never imports Ray when it stays on this machine.

The Ray side of the choice is checked here with the Ray constructor replaced by a recorder (no Ray start);
tests/test_ray_executor.py runs real tasks through an ``auto`` executor that chose Ray.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import pipeline.executors as executors
from pipeline.config import resolve
from pipeline.executors import AutoExecutor, LocalExecutor, make_executor
from pipeline.process_executor import ProcessExecutor
from tests.helpers import clean_env, write_corpus


def _cfg(**executor) -> dict:
    return resolve(overrides={"executor": executor})


@pytest.fixture
def no_ray(monkeypatch):
    """Record what would have started Ray instead of starting it."""
    started = []
    monkeypatch.setattr(executors, "_ray_executor", lambda cfg: started.append(cfg) or "ray executor")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return started


def test_the_default_kind_is_auto_and_its_threshold_a_config_key():
    cfg = resolve()
    assert cfg["executor"]["kind"] == "auto"
    assert cfg["executor"]["local_below_bytes"] == 256_000_000
    with pytest.raises(Exception, match="local_below_bytes"):
        _cfg(local_below_bytes=-1)


def test_below_the_threshold_auto_runs_worker_processes_and_says_why(no_ray, monkeypatch):
    monkeypatch.setattr(executors, "_cpus", lambda: 2)
    lines: list[str] = []
    ex = make_executor(_cfg(local_below_bytes=2_000_000), lines.append)
    assert isinstance(ex, AutoExecutor) and ex.chosen is None and lines == []  # nothing chosen before the size
    ex.plan_for_input(1_999_999)
    assert isinstance(ex.chosen, ProcessExecutor) and ex.name == "processes" and ex.chosen.workers == 2
    assert lines == ["executor: processes (input 2.0 MB < 2.0 MB: 2 worker processes on this machine; "
                     "Ray from that size on)"]
    assert no_ray == []
    ex.plan_for_input(10**12)  # decided once, for the whole run
    assert isinstance(ex.chosen, ProcessExecutor) and len(lines) == 1


def test_num_cpus_sets_the_worker_processes_and_one_cpu_runs_in_this_process(no_ray, monkeypatch):
    monkeypatch.setattr(executors, "_cpus", lambda: 2)
    lines: list[str] = []
    ex = make_executor(_cfg(num_cpus=3), lines.append)
    ex.plan_for_input(10)
    assert isinstance(ex.chosen, ProcessExecutor) and ex.chosen.workers == 3
    ex = make_executor(_cfg(num_cpus=1), lines.append)
    ex.plan_for_input(10)
    assert isinstance(ex.chosen, LocalExecutor)
    monkeypatch.setattr(executors, "_cpus", lambda: 1)
    ex = make_executor(_cfg(), lines.append)
    ex.plan_for_input(10)
    assert isinstance(ex.chosen, LocalExecutor)
    assert lines[1:] == ["executor: local (input 0.0 MB < 256.0 MB and one CPU: in this process)"] * 2
    monkeypatch.setattr(executors, "_cpus", lambda: 2)
    monkeypatch.setattr(executors, "can_fork", lambda: False)
    ex = make_executor(_cfg(), lines.append)
    ex.plan_for_input(10)
    assert isinstance(ex.chosen, LocalExecutor)
    assert lines[-1] == ("executor: local (input 0.0 MB < 256.0 MB and this system cannot fork worker processes: "
                         "in this process)")


def test_at_the_threshold_auto_chooses_ray_and_says_why(no_ray):
    lines: list[str] = []
    ex = make_executor(_cfg(local_below_bytes=2_000_000), lines.append)
    ex.plan_for_input(2_000_000)
    assert ex.chosen == "ray executor" and len(no_ray) == 1
    assert lines == ["executor: ray (input 2.0 MB ≥ 2.0 MB, where Ray takes over)"]


@pytest.mark.parametrize("via", ["config", "env"])
def test_a_given_cluster_means_ray_whatever_the_size(no_ray, monkeypatch, via):
    lines: list[str] = []
    if via == "env":
        monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    cfg = _cfg(ray_address="ray://head:10001" if via == "config" else "")
    ex = make_executor(cfg, lines.append)
    ex.plan_for_input(10)
    assert ex.chosen == "ray executor"
    assert lines == ["executor: ray (Ray cluster ray://head:10001 given)"]


def test_explicit_kinds_are_honoured_whatever_the_size(no_ray):
    lines: list[str] = []
    assert isinstance(make_executor(_cfg(kind="local", local_below_bytes=0), lines.append), LocalExecutor)
    assert isinstance(make_executor(_cfg(kind="processes", local_below_bytes=0), lines.append), ProcessExecutor)
    assert make_executor(_cfg(kind="ray", local_below_bytes=10**15), lines.append) == "ray executor"
    assert lines == []  # an explicit choice needs no explanation


def test_no_input_size_means_in_process(no_ray):
    lines: list[str] = []
    ex = AutoExecutor(_cfg(), lines.append)
    from pipeline.progress import Progress

    assert ex.map(lambda t: {"n": t["n"] * 2}, [{"n": 1}, {"n": 2}], Progress("t", 2, mode="off")) == [
        {"n": 2}, {"n": 4}]
    assert lines == ["executor: local (input size unknown)"]


def test_lwm_run_by_default_on_a_small_input_stays_on_this_machine_without_importing_ray(tmp_path):
    src = write_corpus(tmp_path / "in", files=2, per_file=5)
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipeline.cli", "run", "-i", str(src), "-o",
                           str(tmp_path / "out"), "--progress", "off", "--max-quarantine-rate", "1", "--num-cpus", "2"],
                          capture_output=True, text=True,
                          env=clean_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "out" / "_SUCCESS").exists()
    assert (f"executor: processes (input {size / 1e6:.1f} MB < 256.0 MB: 2 worker processes on this machine; "
            "Ray from that size on)") in proc.stderr
    imported = re.findall(r"^import time:.*\|\s*(ray(?:\.\S+)?)\s*$", proc.stderr, re.M)
    assert imported == []
    assert re.search(r"^import time:.*\|\s*pipeline\.executors\s*$", proc.stderr, re.M)  # the check can see


def test_the_cli_offers_auto_and_rejects_other_kinds(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--executor", "dask", "-i", "x", "-o",
                           str(tmp_path / "o")], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert proc.returncode == 2
    assert "'auto', 'processes', 'local', 'ray'" in proc.stderr, proc.stderr
