"""A real multi-process Ray cluster on loopback: a head and a second node, each with one CPU.

Both nodes are started with the venv's ``ray start … --block`` in a private temp dir, with their
own authentication token, so nothing leaks to or from other Ray instances on the machine. Teardown
kills exactly the process trees these two commands started (``ray stop`` would stop every Ray
process of the user on the machine), whatever the test's outcome.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pipeline.run import run_pipeline
from tests.helpers import LWM, assert_same_outputs, clean_env, config_toml, corpus_config, write_corpus

psutil = pytest.importorskip("psutil")
RAY = str(Path(sys.executable).with_name("ray"))
TASK_DELAY = "0.8"  # seconds each ingest task waits, long enough to see which node runs it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise AssertionError(f"ray start did not report {text!r}:\n{log.read_text(errors='replace')[-3000:]}")


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    psutil.wait_procs(tree, timeout=10)
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster():
    # Short path: Ray's unix sockets live under the temp dir and socket paths are limited to ~107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="lwmray-", dir="/tmp"))
    port = _free_port()
    env = clean_env()
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), LWM_TEST_TASK_DELAY=TASK_DELAY)
    common = ["--num-cpus", "1", "--temp-dir", str(temp), "--node-ip-address", "127.0.0.1",
              "--disable-usage-stats", "--block"]
    nodes: list[subprocess.Popen] = []
    try:
        for name, args in (
            ("head", ["--head", "--port", str(port), "--include-dashboard=false"]),
            ("worker", ["--address", f"127.0.0.1:{port}"]),
        ):
            log = temp / f"{name}.log"
            with open(log, "wb") as f:
                nodes.append(subprocess.Popen([RAY, "start", *args, *common], stdout=f, stderr=subprocess.STDOUT,
                                              env=env, start_new_session=True))
            _wait_for(log, "Ray runtime started", nodes[-1])
        driver_env = {k: v for k, v in env.items() if k != "LWM_TEST_TASK_DELAY"}
        yield {"address": f"127.0.0.1:{port}", "env": driver_env, "nodes": nodes}
    finally:
        for proc in reversed(nodes):
            _kill_tree(proc)
        shutil.rmtree(temp, ignore_errors=True)


def _node_of(pid: int, nodes: list[subprocess.Popen]) -> int | None:
    try:
        ancestors = {p.pid for p in psutil.Process(pid).parents()}
    except psutil.NoSuchProcess:
        return None
    return next((i for i, n in enumerate(nodes) if n.pid in ancestors), None)


def test_a_two_node_loopback_cluster_gives_the_bytes_of_a_local_run(cluster, tmp_path):
    corpus = write_corpus(tmp_path / "in", big=150)
    run_pipeline(corpus_config([str(corpus)], tmp_path / "local"), echo=lambda m: None)
    out = tmp_path / "cluster"
    cmd = [LWM, "run", "--executor", "ray", "--ray-address", cluster["address"], "--input", str(corpus),
           "--out", str(out), "--config", str(config_toml(tmp_path / "c.toml")), "--progress", "off"]
    assert "RAY_ADDRESS" not in cluster["env"]
    seen_nodes: set[int] = set()
    with open(tmp_path / "driver.log", "wb") as log:
        driver = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=cluster["env"])
        try:
            # A task's temporary output names carry its worker's pid; map each to the node that runs it.
            while driver.poll() is None:
                for tmp in out.glob("trajectories/*.tmp-*"):
                    node = _node_of(int(tmp.name.split(".tmp-")[1].split("-")[0]), cluster["nodes"])
                    if node is not None:
                        seen_nodes.add(node)
                time.sleep(0.1)
        finally:
            if driver.poll() is None:
                driver.kill()
            driver.wait()
    assert driver.returncode == 0, (tmp_path / "driver.log").read_text()[-3000:]
    assert seen_nodes == {0, 1}  # ingest tasks ran on the head and on the second node
    assert_same_outputs(tmp_path / "local", out)
    assert (out / "_SUCCESS").exists()
    assert not list(out.rglob("*.tmp-*"))


DISCONNECT_SCRIPT = """
import sys
import ray
from pipeline.ray_executor import RayExecutor

executor = RayExecutor(address=sys.argv[1])
assert ray.is_initialized()
executor.close()
print("connected after close:", ray.is_initialized())
"""


def test_a_driver_on_a_cluster_disconnects_at_close_and_leaves_the_cluster_running(cluster):
    # Left connected, the driver's exit runs Ray's own hook, which sleeps half a second before disconnecting.
    runs = [subprocess.run([sys.executable, "-c", DISCONNECT_SCRIPT, cluster["address"]], capture_output=True,
                           text=True, env=cluster["env"], timeout=120) for _ in range(2)]
    for proc in runs:  # the second driver finds the cluster the first one left
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "connected after close: False" in proc.stdout
    assert all(node.poll() is None for node in cluster["nodes"])
