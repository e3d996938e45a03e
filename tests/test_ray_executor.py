"""The Ray executor gives exactly the bytes of the in-process runner (SPEC §3, determinism contract).

One local Ray session (2 CPUs, no dashboard) serves the whole module. The corpus helpers here
(`write_corpus`, `output_bytes`, `corpus_config`) are shared by the other Ray and resume tests.
"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.config import resolve
from pipeline.run import run_pipeline

ROOT = Path(__file__).resolve().parent.parent
LWM = str(Path(sys.executable).with_name("lwm"))
COMPARED = ("shards", "trajectories", "quarantine", "raw")
DOMAINS = ("mcp", "search", "terminal", "swe", "android", "web", "os")
WORDS = ["alpha", "beta", "gamma", "delta", "README.md", "src", "main.py", "error", "ok", "42", "true", "null", "/app", "build", "test", "passed"]

# Small ranges and groups so that a few hundred trajectories still make many tasks of every shape.
CORPUS_CONFIG = {
    "ingest": {"split_bytes": 64 * 1024, "group_files": 2},
    "pools": {"ratios": {"cpt": 0.55, "sft": 0.2, "rl": 0.1, "eval": 0.15}, "sft_turns": 2},
    "shards": {"max_rows": 40},
}


def _trajectory(rnd: random.Random, i: int, domain: str) -> dict:
    turns = []
    for t in range(rnd.randint(2, 8)):
        action = json.dumps({"tool": rnd.choice(["run", "open", "search"]), "arg": f"{t}-{i} " + rnd.choice(WORDS)})
        if rnd.random() < 0.25:  # an echo-like observation, so several mask categories occur
            observation = f"ok {action}"
        else:
            observation = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 60)))
        turns.append({"action": action, "observation": observation})
    value = {
        "domain": domain,
        "split_key": f"task-{i % 41}",
        "system": {"task_description": f"{domain} task {i}", "action_space": "tools: run, open, search"},
        "turns": turns,
    }
    if i % 5:
        value["traj_id"] = f"{domain}-{i:05d}"  # others get ids from file + line
    return value


def write_corpus(root: Path, files: int = 7, per_file: int = 25, seed: int = 0, big: int = 0) -> Path:
    """lwm-jsonl files across the seven domains, with one malformed line and one 1-turn trajectory;
    `big` extra trajectories go to one larger file, so it is split into byte ranges."""
    rnd = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in range(files):
        domain = DOMAINS[f % len(DOMAINS)]
        lines = []
        for _ in range(per_file):
            lines.append(json.dumps(_trajectory(rnd, n, domain)))
            n += 1
        if f == 1:
            lines.insert(7, '{"domain": "search", "turns": [')
        if f == 2:
            short = _trajectory(rnd, n, domain)
            short["turns"] = short["turns"][:1]
            lines.append(json.dumps(short))
        (root / f"{domain}-{f}.jsonl").write_text("\n".join(lines) + "\n")
    if big:
        lines = [json.dumps(_trajectory(rnd, n + k, DOMAINS[k % len(DOMAINS)])) for k in range(big)]
        (root / "zz-big.jsonl").write_text("\n".join(lines) + "\n")
    return root


def demo_inputs(root: Path, n: int = 8) -> list[str]:
    """The demo corpus of every domain (and android's native logs), when the demo writer is available."""
    try:
        from pipeline.demo import write_demo
    except ImportError:
        return []
    out = []
    for domain in DOMAINS:
        write_demo(domain, str(root / domain), seed=0, n=n)
        out.append(str(root / domain))
    write_demo("android", str(root / "android-native"), seed=0, n=3, native=True)
    return [*out, str(root / "android-native")]


def corpus_config(inputs: list[str], out: Path, kind: str = "local", **run) -> dict:
    return resolve(
        CORPUS_CONFIG,
        {"run": {"input": inputs, "out": str(out), **run}, "executor": {"kind": kind, "progress": "off"}},
    )


def config_toml(path: Path) -> Path:
    """CORPUS_CONFIG as a TOML file for the command line."""
    lines = ["[ingest]"]
    lines += [f"{k} = {v}" for k, v in CORPUS_CONFIG["ingest"].items()]
    lines += ["[pools]", f"sft_turns = {CORPUS_CONFIG['pools']['sft_turns']}", "[pools.ratios]"]
    lines += [f"{k} = {v}" for k, v in CORPUS_CONFIG["pools"]["ratios"].items()]
    lines += ["[shards]", f"max_rows = {CORPUS_CONFIG['shards']['max_rows']}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def output_bytes(out: Path, layers: tuple[str, ...] = COMPARED) -> dict[str, bytes]:
    """Every file of the compared layers plus manifest.json, by relative path (what `diff -r` compares)."""
    files = {"manifest.json": (out / "manifest.json").read_bytes()}
    for layer in layers:
        for p in sorted((out / layer).rglob("*")):
            if p.is_file():
                files[str(p.relative_to(out))] = p.read_bytes()
    return files


def assert_same_outputs(a: Path, b: Path) -> None:
    left, right = output_bytes(a), output_bytes(b)
    assert sorted(left) == sorted(right)
    differing = [k for k in left if left[k] != right[k]]
    assert not differing, f"files differ: {differing[:5]}"


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    return env


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
    assert stderr.splitlines()[-1] == "lwm: error: output not writable: OUT/trajectories (File exists)"
