"""Helpers shared by the test modules: corpora, configs, the `lwm` command and output comparison.

Test modules import from here, never from each other.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from pipeline.config import resolve

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




# Four domains, one file, deterministic: the end-to-end shards corpus.
SHARDS_DOMAINS = ("mcp", "terminal", "android", "web")


def shards_corpus(path: Path, n: int = 160) -> None:
    rng = random.Random(7)
    lines = []
    for i in range(n):
        domain = SHARDS_DOMAINS[i % len(SHARDS_DOMAINS)]
        turns = []
        for _ in range(rng.randint(2, 7)):
            kind = rng.choice(["read", "echo", "ack", "status"])
            arg = f"item{rng.randint(0, 999)}"
            action = json.dumps({"name": "tool", "arguments": {"path": f"/srv/{arg}.txt", "text": f"note {arg}"}})
            obs = {
                "read": f"contents of {arg}: " + " ".join(f"w{rng.randint(0, 5000)}" for _ in range(40)),
                "echo": json.dumps({"path": f"/srv/{arg}.txt", "text": f"note {arg}"}),
                "ack": "OK",
                "status": "done",
            }[kind]
            turns.append({"action": action, "observation": obs})
        lines.append(json.dumps({
            "traj_id": f"t{i}", "domain": domain, "split_key": f"task{i // 2}",
            "system": {"task_description": f"Task {i}", "action_space": "tool(path, text)"},
            "turns": turns,
        }))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


_CALLS = 0


def count_calls(task: dict) -> dict:
    """A task function for executor tests: which process ran the task and how many tasks that process ran."""
    global _CALLS
    _CALLS += 1
    time.sleep(float(task.get("sleep", 0)))
    return {"task_id": task["task_id"], "pid": os.getpid(), "call": _CALLS, "rows": 1, "bytes": 0}
