"""Helpers shared by the test modules: corpora, configs, the `lwm` command, output comparison,
adapter runs, the loopback model server and its scripts, synthetic training shards and the
decontamination corpora.

Test modules import from here (and fixtures from conftest.py), never from each other.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from pipeline.config import resolve
from schemas.errors import InvalidRecord
from schemas.shard import SHARD_SCHEMA
from schemas.stats import Stats
from schemas.trajectory import Trajectory
from stages.decontam import iter_references, reference_units
from stages.ingest import registry
from stages.ingest.reading import InputUnit
from stages.llm.instructions import SYSTEM_PROMPT as INSTRUCTION_SYSTEM
from stages.llm.rejection import PAIRWISE_SYSTEM

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


# ------------------------------------------------------------------ adapters: one input unit through one adapter

# Shared by the adapter tests: read and normalize one input unit through one adapter.

def ingest_unit(adapter, path: Path | str, is_dir: bool = False, **opts):
    """Read and normalize one unit; return (trajectories, quarantined records)."""
    opts = registry.resolve_opts(adapter, opts)
    trajs, bad = [], []
    for record in adapter.read(InputUnit(str(path), is_dir), opts):
        if isinstance(record, InvalidRecord):
            bad.append(record)
            continue
        try:
            trajs.extend(adapter.normalize(record, opts))
        except InvalidRecord as exc:
            bad.append(exc)
    return trajs, bad


# Shared by the adapters' fuzz tests: damage a parsed document at random (hypothesis's `st.randoms`).
JUNK = [None, 0, 2.5, True, "x", [], {}, ["a"], {"a": 1}, [[1]]]


def mutated(value, rnd):
    """`value` with random members replaced by values of the wrong type or removed."""
    if rnd.random() < 0.08:
        return rnd.choice(JUNK)
    if isinstance(value, dict):
        return {k: mutated(v, rnd) for k, v in value.items() if rnd.random() > 0.03}
    if isinstance(value, list):
        return [mutated(v, rnd) for v in value if rnd.random() > 0.03]
    return value


# ------------------------------------------------------------------ a loopback OpenAI-compatible server

# A loopback OpenAI-compatible judge for tests: answers /v1/chat/completions from a script.
#
# ``reply(body, n)`` (n = how many requests this server has seen before) returns one of
# ``Answer(text, usage)`` (200 with a chat completion), ``Status(code, retry_after)``,
# ``Slow(seconds, then)`` (sleeps, then answers `then` — longer than the client's timeout makes a
# timeout), ``Raw(bytes)`` (200 with a body that is not a chat completion) or ``Broken(bytes)`` (these
# bytes as the whole answer, status line and headers included, then the connection is closed: an answer
# cut short, or one that is not HTTP).

@dataclass
class Answer:
    text: str
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 100, "completion_tokens": 20})


@dataclass
class Status:
    code: int
    retry_after: str | None = None
    body: bytes = b""


@dataclass
class Slow:
    seconds: float
    then: Any


@dataclass
class Raw:
    body: bytes


@dataclass
class Trickle:
    """`answer` (an `Answer`) sent in pieces of `piece` bytes, `gap` seconds apart: a server that keeps sending slowly."""

    answer: Any
    gap: float
    piece: int = 8


@dataclass
class Broken:
    wire: bytes

    @classmethod
    def cut_short(cls) -> Broken:
        """A 200 whose body ends long before its Content-Length: a proxy that dropped the connection."""
        return cls(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                   b'{"choices": [{"message": {"content": "hi')


def scores_answer(value: int = 5, reasoning: str = "Looks right.") -> str:
    scores = {d: value for d in ("format", "factuality", "consistency", "realism", "quality")}
    return f"{reasoning}\n<final_evaluation>\n```json\n{json.dumps({'strengths': [], 'weaknesses': [], 'scores': scores})}\n```\n</final_evaluation>"


class JudgeServer:
    """Start with `with JudgeServer(reply) as judge:`; `judge.url` is the ``/v1`` base URL."""

    def __init__(self, reply) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self.send_response(404)
                    self.end_headers()
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    n = len(server.requests)
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                self._counted = True
                try:
                    self._answer(server.reply(body, n))
                finally:
                    self._done()

            def _done(self):
                """The request stops counting as in flight before its answer is sent: the client may send its
                next request as soon as it has read the answer, possibly before this thread runs again."""
                if self._counted:
                    self._counted = False
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, action):
                while isinstance(action, Slow):
                    time.sleep(action.seconds)
                    action = action.then
                self._done()
                if isinstance(action, Broken):
                    self.wfile.write(action.wire)
                    self.wfile.flush()
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(action, Status):
                    self.send_response(action.code)
                    if action.retry_after is not None:
                        self.send_header("Retry-After", action.retry_after)
                    self.send_header("Content-Length", str(len(action.body)))
                    self.end_headers()
                    self.wfile.write(action.body)
                    return
                trickle = action if isinstance(action, Trickle) else None
                action = trickle.answer if trickle else action
                if isinstance(action, Raw):
                    payload = action.body
                else:
                    payload = json.dumps({
                        "id": "x", "object": "chat.completion",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": action.text},
                                     "finish_reason": "stop"}],
                        "usage": {**action.usage,
                                  "total_tokens": action.usage["prompt_tokens"] + action.usage["completion_tokens"]},
                    }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                # the client may have given up (a timeout); that is the point of some tests
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    if trickle is None:
                        self.wfile.write(payload)
                        return
                    for start in range(0, len(payload), trickle.piece):
                        self.wfile.write(payload[start:start + trickle.piece])
                        self.wfile.flush()
                        time.sleep(trickle.gap)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


# ------------------------------------------------------------------ the scripted model for the model-in-the-loop stages

# A scripted model and judge for the model-in-the-loop stage tests, and a corpus whose trajectories
# name their scenario in every action (``scn=<name>``), so the script knows what to answer.
#
# Generation requests (the sft prompt) are answered per scenario and ``seed`` (candidate i has seed i):
# a candidate is ``Thinking … <predicted_observation>\nQ<v>\n</predicted_observation>`` and the
# judge, seeing ``Q<v>`` as the prediction, gives every dimension the score v (reward 5·v).

# judge value of candidates 0, 1, 2 (None: no tag pair; "500": server error; "slow": timeout)
CANDIDATES = {
    "good": (3, 5, 4),
    "tie": (5, 2, 5),
    "tiebad": (4, 4, 1),
    "malformed": (None, None, None),
    "low": (2, 3, 1),
    "flaky": (5, 4, 4),  # every candidate's first attempt gets a 429
    "slow": ("slow", 5, 3),  # candidate 0 always times out
    "down": ("500", "500", "500"),
    "judgebad": (5, 5, 5),  # the judge never answers with scores
}

SPOILER_OBS = "OSError: [Errno 28] No space left on device while unpacking wheel numpy-1.26.4 into site-packages"
GOOD_INSTRUCTION = "Simulate a machine whose disk is almost full, so installing packages fails with a no-space error."
INSTRUCTIONS = {
    "ierr": [GOOD_INSTRUCTION],
    # first answer copies the observation; the re-ask answers in its own words
    "ispoil": [f"The install prints: {SPOILER_OBS}", GOOD_INSTRUCTION],
    "ispoilall": [f"Say {SPOILER_OBS}", f"Again: {SPOILER_OBS}"],
    "inone": ["NONE"],
    "imalformed": [None, None],
}


def candidate_text(scn: str, seed: int, value) -> str:
    if value is None:
        return f"Thinking about {scn} {seed}. The result is Q5 without tags."
    return f"Thinking about {scn}, candidate {seed}: the search returns one line.\n<predicted_observation>\nQ{value}\n</predicted_observation>"


def scenario(text: str) -> str:
    found = re.findall(r"scn=(\w+)", text)
    return found[-1] if found else ""


class Script:
    """The server's reply function; counts what it was asked, by kind."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.kinds: dict[str, int] = {}
        self._lock = threading.Lock()

    def _count(self, key: str, kind: str) -> int:
        with self._lock:
            n = self.seen.get(key, 0)
            self.seen[key] = n + 1
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            return n

    def __call__(self, body, n):
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"]
        if system.startswith("You grade a world model"):
            self._count(user, "judge")
            if scenario(user.split("# Predicted observation")[0]) == "judgebad":
                return Answer("The prediction is fine, no scores.")
            m = re.search(r"# Predicted observation \(world model\)\n```\nQ(\d)", user)
            return Answer(scores_answer(int(m.group(1))))
        if system == PAIRWISE_SYSTEM:
            self._count(user, "pairwise")
            return Answer("<winner>B</winner>" if scenario(user) == "tie" else "Both look the same to me.")
        if system == INSTRUCTION_SYSTEM:
            scn = scenario(user)
            k = 1 if "previous answer" in user else 0
            self._count(user, "instruction")
            text = INSTRUCTIONS.get(scn, [GOOD_INSTRUCTION])[k]
            return Answer("No tag here." if text is None else f"<simulation_instruction>\n{text}\n</simulation_instruction>")
        scn, seed = scenario(user), int(body.get("seed", 0))
        value = CANDIDATES.get(scn, (5, 4, 3))[seed]
        first = self._count(json.dumps(body, sort_keys=True), "generate") == 0
        if value == "500":
            return Status(500)
        if value == "slow":
            return Slow(1.0, Answer(candidate_text(scn, seed, 5)))
        if scn == "flaky" and first:
            return Status(429, retry_after="0")
        return Answer(candidate_text(scn, seed, value), usage={"prompt_tokens": 50, "completion_tokens": 10})


def write_llm_corpus(path: Path, scenarios, turns: int = 3, instruction_for: tuple[str, ...] = ()) -> Path:
    """One lwm-jsonl file: one search trajectory per scenario, each action naming it."""
    lines = []
    for i, scn in enumerate(scenarios):
        steps = []
        for t in range(turns):
            obs = SPOILER_OBS if scn.startswith("i") and t == turns - 1 else f"result {t} for {scn}: alpha beta gamma {i}"
            steps.append({"action": json.dumps({"tool": "search", "arg": f"scn={scn} step {t}"}), "observation": obs})
        system = {"task_description": f"find things {i}", "action_space": "tools: search"}
        if scn in instruction_for:
            system["simulation_instruction"] = "Simulate a search API that is rate limited after two calls."
        lines.append(json.dumps({"traj_id": f"t-{scn}", "domain": "search", "split_key": f"k-{scn}",
                                 "system": system, "turns": steps}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def llm_config(inputs, out, url: str, pool: str, **llm) -> dict:
    from pipeline.config import resolve

    ratios = {p: (1.0 if p == pool else 0.0) for p in ("cpt", "sft", "rl", "eval")}
    return resolve(
        {"pools": {"ratios": ratios, "sft_turns": 1}, "filter": {"min_turns": 1}},
        {"run": {"input": [str(i) for i in inputs], "out": str(out)}, "executor": {"kind": "local", "progress": "off"},
         "llm": {"endpoint": url, "model": "scripted", "timeout_s": 0.5, "max_retries": 1, "backoff_s": 0.01,
                 "concurrency": 4, **llm}},
    )


class TurnCountStage:
    """A stage outside the package, named by its path in ``llm.stages``: asks the model once per
    trajectory and records the answer's length (nothing in the samples changes)."""

    name = "turn_count"

    def __init__(self) -> None:
        import pyarrow as pa

        self.schema = pa.schema([("traj_id", pa.string()), ("answer_chars", pa.int64())])

    def wants(self, traj, ctx) -> bool:
        return True

    def _request(self, traj):
        # one distinct request per trajectory: identical requests would be answered from the cache
        from stages.llm.stage import Request

        return Request([{"role": "system", "content": INSTRUCTION_SYSTEM},
                        {"role": "user", "content": f"scn=inone {len(traj.turns)} turns of {traj.traj_id}"}])

    def dry_requests(self, traj, ctx):
        return [self._request(traj)], (1, 1)

    def process(self, trajs, ctx):
        answers = ctx.send([self._request(t) for t in trajs])
        ctx.stats.add("asked", len(trajs))
        return [{"traj_id": t.traj_id, "answer_chars": len(a.text or "")} for t, a in zip(trajs, answers)]

    def apply(self, traj, rows, ctx):
        return {}


TURN_COUNT = TurnCountStage()


class SummaryRowStage(TurnCountStage):
    """`TurnCountStage` that also writes a row naming no trajectory (a count per batch)."""

    name = "turn_count_summary"

    def process(self, trajs, ctx):
        return [*super().process(trajs, ctx), {"traj_id": "", "answer_chars": len(trajs)}]


class OwnOccurrenceStage(TurnCountStage):
    """`TurnCountStage` whose rows have a column of the name lwm adds to every stage's rows."""

    name = "own_occurrence"

    def __init__(self) -> None:
        import pyarrow as pa

        super().__init__()
        self.schema = self.schema.append(pa.field("occurrence", pa.string()))


SUMMARY_ROW = SummaryRowStage()
OWN_OCCURRENCE = OwnOccurrenceStage()


# ------------------------------------------------------------------ the scripted WMAT block writer

# A scripted block writer for the WMAT tests: answers block requests by a scenario per (task, step).
#
# The scenario of a step is a stable hash of its task text and step number (`scenario_of`), so a
# test can say, from the trajectories alone, what the server answered:
#
# - ``valid``: a well-formed abstract block (keywords from the task, q 80% on success, 20% else);
# - ``spoiler_then_valid``: first the future pasted into ``<imaginary>``, a valid block when re-asked;
# - ``spoiler``: the future pasted every time (rejected after the re-ask);
# - ``malformed``: ``<imaginary>`` never closed, every time;
# - ``missing_q``: no ``<confidence>`` tag first, a valid block when re-asked.
#
# On the last step the future reveals nothing new (the search demo's last observation is a plain
# receipt), so the spoiler scenarios answer a valid block there.

SCENARIOS = ("valid", "valid", "valid", "valid", "spoiler_then_valid", "spoiler", "malformed", "missing_q")


def scenario_of(task: str, step: int, total: int) -> str:
    digest = hashlib.sha256(f"{task}\x1f{step}\x1f{total}".encode()).digest()
    name = SCENARIOS[digest[0] % len(SCENARIOS)]
    if name.startswith("spoiler") and step == total:
        return "valid"
    return name


def valid_block(task: str, success: bool) -> str:
    words = [w for w in re.findall(r"[a-z]+", task.lower()) if len(w) > 4][:3] or ["answer"]
    q = 80 if success else 20
    return ("<imaginary>Search for [the topic], open [a promising result], read until [the key finding] "
            "appears, then answer with it.</imaginary>\n"
            f"<keyword>{', '.join(words)}</keyword>\n"
            "<analysis>The finding is not known yet; the next step gathers evidence toward it.</analysis>\n"
            f"<confidence>{q}%</confidence>")


class BlockWriter:
    """The reply function of a `JudgeServer`; records the scenario of every answered request."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str, bool]] = []  # (task, step, scenario, reask)
        self._lock = threading.Lock()

    def __call__(self, body, n):
        user = body["messages"][-1]["content"]
        task = re.search(r"# Task\n(.*?)\n\n# Action space", user, re.S).group(1)
        step, total = (int(x) for x in re.search(r"step (\d+) of (\d+), before this action", user).groups())
        success = "## Outcome of the episode\nsuccess" in user
        reask = "Your previous answer" in user
        name = scenario_of(task, step, total)
        with self._lock:
            self.calls.append((task, step, name, reask))
        future = user.split("# Ground truth, do not reveal", 1)[1].split("## Outcome of the episode", 1)[0]
        if name == "valid" or (reask and name in ("spoiler_then_valid", "missing_q")):
            return Answer(valid_block(task, success))
        if name.startswith("spoiler"):
            return Answer(valid_block(task, success).replace("<imaginary>", f"<imaginary>{future.strip()} "))
        if name == "malformed":
            return Answer(valid_block(task, success).replace("</imaginary>", ""))
        return Answer(re.sub(r"\n<confidence>.*?</confidence>", "", valid_block(task, success)))


# ------------------------------------------------------------------ synthetic training shards and a tiny model

# Small synthetic shards that follow the SPEC §9 column contract (`schemas.shard.SHARD_SCHEMA`), for the
# training tests.
#
# Layout: ``<root>/shards/<pool>/part-NNNNN.parquet`` (zstd), ``<root>/manifest.json`` and, last,
# ``<root>/_SUCCESS``. Samples have learnable structure: each turn is an action of random ids
# followed by an observation that counts upward from the action's last id, so a small model can
# predict every observation token from the one or two tokens before it.

SYSTEM, USER, ASSISTANT, END = 1, 2, 3, 4
FIRST_CONTENT_ID = 8
CATEGORY_KEEP = (("retrieval", 1.0), ("echo", 0.05), ("boilerplate", 0.1), ("transform", 0.5))



def synthetic_sample(rng: np.random.Generator, sample_id: str, pool: str, vocab: int, turns: int) -> dict:
    """One cpt-style sample: system tokens, then per turn an action (weight 0) and a weighted observation."""
    top = vocab - 1
    ids, weights = [SYSTEM, 5, 6, 7], [0.0] * 4
    spans, categories, keeps, stats = [], [], [], []
    for turn in range(turns):
        category, keep = CATEGORY_KEEP[turn % len(CATEGORY_KEEP)]
        action = rng.integers(FIRST_CONTENT_ID, top, size=int(rng.integers(2, 6))).tolist()
        ids += [USER, *action, ASSISTANT]
        weights += [0.0] * (len(action) + 2)
        observation = [
            FIRST_CONTENT_ID + (action[-1] + 1 + k - FIRST_CONTENT_ID) % (top - FIRST_CONTENT_ID) for k in range(5)
        ]
        start = len(ids)
        ids += [*observation, END]
        weights += [keep] * (len(observation) + 1)
        spans.append({"start": start, "end": len(ids)})
        categories.append(category)
        keeps.append(keep)
        stats.append({"ol": 0.1, "nov": 0.9, "jac": 0.1, "r": 2.0})
    return {
        "sample_id": sample_id,
        "traj_id": f"traj-{sample_id}",
        "domain": "terminal",
        "pool": pool,
        "template": "v1",
        "turn_idx": 0,
        "total_turns": turns,
        "input_ids": ids,
        "loss_weight": weights,
        "turn_spans": spans,
        "turn_category": categories,
        "turn_keep": keeps,
        "turn_stats": stats,
        "num_tokens": len(ids),
        "num_loss_tokens": sum(w > 0 for w in weights),
    }


def write_synthetic_shards(
    root: str,
    *,
    rows_per_file: tuple[int, ...] = (7, 5),
    pool: str = "cpt",
    row_group_rows: int = 3,
    vocab: int = 64,
    seed: int = 0,
    max_turns: int = 3,
    success: bool = True,
    manifest_max_tokens: bool = True,
    long_every: int = 0,
    long_turns: int = 0,
) -> str:
    """Write one pool of synthetic shards under `root` (any fsspec URL); returns the pool folder.

    `manifest_max_tokens` records each shard's longest sample in the manifest, as `lwm run` does.
    With `long_every` > 0, every `long_every`-th sample has `long_turns` turns instead (a long one).
    """
    rng = np.random.default_rng(seed)
    fs, base = fsspec.core.url_to_fs(root)
    pool_dir = posixpath.join(base, "shards", pool)
    fs.makedirs(pool_dir, exist_ok=True)
    shard_list, counter = [], 0
    for file_number, rows in enumerate(rows_per_file):
        samples = []
        for _ in range(rows):
            turns = int(rng.integers(1, max_turns + 1))
            if long_every and counter % long_every == long_every - 1:
                turns = long_turns
            samples.append(synthetic_sample(rng, f"{pool}-{counter:05d}", pool, vocab, turns))
            counter += 1
        table = pa.Table.from_pylist(samples, schema=SHARD_SCHEMA)
        name = f"part-{file_number:05d}.parquet"
        with fs.open(posixpath.join(pool_dir, name), "wb") as handle:
            pq.write_table(table, handle, compression="zstd", row_group_size=row_group_rows)
        entry = {"path": f"shards/{pool}/{name}", "rows": rows}
        if manifest_max_tokens:
            entry["max_tokens"] = max(s["num_tokens"] for s in samples)
        shard_list.append(entry)
    manifest = {"samples_per_pool": {pool: counter}, "shards": shard_list}
    with fs.open(posixpath.join(base, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    if success:
        with fs.open(posixpath.join(base, "_SUCCESS"), "w") as handle:
            handle.write("")
    return pool_dir if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(pool_dir)


def write_tiny_qwen(path: str, vocab: int = 96, seed: int = 0) -> str:
    """Save a randomly initialised, tiny Qwen3 causal LM (real attention, rotary embeddings, GQA) to `path`.

    Built from a config in the test, nothing downloaded; needs transformers.
    """
    import torch
    import transformers

    config = transformers.Qwen3Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    return path


def write_small_tokenizer(path: Path, texts: Iterable[str], vocab: int) -> Path:
    """A byte-level BPE `tokenizer.json` of at most `vocab` ids, with the ChatML tokens, learned from `texts`: shards
    that `lwm run --tokenizer` writes with it hold ids that a tiny model of `vocab` rows embeds."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.save(str(path))
    return path


# ------------------------------------------------------------------ decontamination corpora

# Corpora for measuring decontamination: distinct tasks that share a framework's boilerplate, and
# lightly edited copies of evaluation records.
#
# - `replicate`: a real trajectory (from ../shared/data) copied with distinct tasks. In each copy every
#   task word (a word of four or more letters of the task description, outside a short list of ordinary
#   English words) is replaced wherever it occurs — task, actions, observations — by a pseudo-word of that
#   copy, every number by another number, and about a quarter of the turns (never the first) are left
#   out. What the framework writes around the task (its prompts, harness commands, banners, listings
#   of ordinary files) stays, in some copies and not in others.
# - `lightly_edited`: the record's task rephrased and a few words changed in every other observation (one
#   word in 30, at most three, in observations of 20 words or more).
#
# Both are written here, independently of the decontamination code they measure.

ORDINARY = set(
    ["about", "above", "after", "again", "also", "always", "another", "answer", "any", "because", "been", "before", "being", "below", "between", "both", "could", "does", "doing", "done", "down", "each", "even", "every", "first", "from", "further", "have", "having", "here", "into", "just", "like", "make", "more", "most", "much", "must", "need", "only", "other", "over", "please", "same", "should", "some", "such", "than", "that", "their", "them", "then", "there", "these", "they", "this", "those", "through", "under", "until", "using", "very", "what", "when", "where", "which", "while", "will", "with", "without", "would", "your", "find", "file", "files", "give", "list", "show", "tell", "check", "create", "open", "make", "sure"]
)
WORD = re.compile(r"[A-Za-z][A-Za-z_]{3,}")
NUMBER = re.compile(r"\d+")
SYLLABLES = ["ka", "lo", "mi", "ru", "te", "zo", "vi", "na", "pe", "su", "do", "fa", "gu", "hi", "jo", "xe"]


def shared_trajectories(folder) -> list[dict]:
    """Every trajectory (two turns or more) an ingest adapter rebuilds from one ../shared/data folder."""
    out = []
    for uri in reference_units([str(folder)]):
        out.extend(t for _, t in iter_references(uri, Stats()) if len(t["turns"]) >= 2)
    return out


def task_words(traj: dict) -> set[str]:
    task = traj["system"].get("task_description") or ""
    return {w.lower() for w in WORD.findall(task) if w.lower() not in ORDINARY}


def _pseudo(rnd: random.Random) -> str:
    return "".join(rnd.choice(SYLLABLES) for _ in range(rnd.randint(2, 4)))


def _substitute(text: str | None, words: dict[str, str], rnd: random.Random) -> str | None:
    if not text:
        return text
    if words:
        pattern = re.compile(r"(?i)(?<![A-Za-z])(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")(?![A-Za-z])")
        text = pattern.sub(lambda m: words[m[1].lower()], text)
    digits = {}
    return NUMBER.sub(lambda m: digits.setdefault(m[0], str(rnd.randrange(10 ** len(m[0])))), text)


def replicate(traj: dict, copies: int, seed: int, prefix: str) -> list[dict]:
    """`copies` copies of `traj`, each with its own task (module docstring), as lwm-jsonl dicts."""
    out = []
    vocab = task_words(traj)
    for c in range(copies):
        rnd = random.Random(f"{seed}-{prefix}-{c}")
        words = {w: _pseudo(rnd) for w in sorted(vocab)}
        kept = [t for n, t in enumerate(traj["turns"]) if n == 0 or rnd.random() >= 0.25]
        system = dict(traj["system"])
        for key in ("task_description", "initial_state"):
            system[key] = _substitute(system.get(key), words, rnd)
        system["demonstrations"] = []
        out.append({
            "traj_id": f"{prefix}-{c:03d}", "domain": traj["domain"], "split_key": f"{prefix}-{c:03d}",
            "system": system,
            "turns": [{"action": _substitute(t["action"], words, rnd) or "",
                       "observation": _substitute(t["observation"], words, rnd) or ""} for t in kept],
        })
    return out


def lightly_edited(traj: dict, tid: str, split_key: str) -> dict:
    """A lightly edited copy of a trajectory: task rephrased, a few words changed in every other observation."""
    turns = []
    for n, t in enumerate(traj["turns"]):
        obs = t["observation"]
        words = obs.split(" ")
        if n % 2 == 1 and len(words) >= 20:
            k = min(3, max(1, len(words) // 30))
            for j in range(1, k + 1):
                words[j * len(words) // (k + 1)] = "edited"
            obs = " ".join(words)
        turns.append({"action": t["action"], "observation": obs})
    system = dict(traj["system"])
    system["task_description"] = "Restated: " + (system.get("task_description") or "the same task") + " (reworded)"
    return {"traj_id": tid, "domain": traj["domain"], "split_key": split_key, "system": system, "turns": turns}


def write_jsonl(path, trajs: list[dict]) -> None:
    path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in trajs), encoding="utf-8")


# --- trajectories for sample tests -------------------------------------------------------------


def make_traj(n_turns: int, seed: int = 0, domain: str = "terminal") -> Trajectory:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "délta", "数据", "😀", "{", "}", "\n", "  ", "\t", "-->", "0x1F", "'s", "é"]
    turns = []
    for t in range(n_turns):
        obs = "".join(rng.choice(words) + rng.choice(["", " ", "\n", "."]) for _ in range(rng.randint(0, 120)))
        if rng.random() < 0.2:
            obs = "\n" + obs
        act = json.dumps([{"keystrokes": f"cmd{t} --flag {rng.randint(0, 99)}\n", "duration": 0.1}])
        turns.append({"action": act, "observation": obs, "reasoning": "I check." if rng.random() < 0.3 else None})
    return Trajectory.from_dict({
        "traj_id": f"t{seed}", "domain": domain, "split_key": "k",
        "system": {"task_description": "Do the thing.", "action_space": "keystrokes JSON",
                   "initial_state": "root@box:/app# "},
        "turns": turns,
    })


_CALLS = 0


def count_calls(task: dict) -> dict:
    """A task function for executor tests: which process ran the task and how many tasks that process ran."""
    global _CALLS
    _CALLS += 1
    time.sleep(float(task.get("sleep", 0)))
    return {"task_id": task["task_id"], "pid": os.getpid(), "call": _CALLS, "rows": 1, "bytes": 0}


def pandas_imported(task: dict) -> dict:
    """A task function: converts a Python list with pyarrow, then says whether this process imported pandas."""
    import pyarrow as pa

    pa.array([1, 2, 3])
    return {"task_id": task["task_id"], "pid": os.getpid(), "pandas": "pandas" in sys.modules, "rows": 1, "bytes": 0}


def lwm_in_process(*args: str) -> subprocess.CompletedProcess:
    """`lwm ARGS` run by this process's command-line entry point, returned as a finished process would be.

    For tests about what a command does rather than about the process (its exit or its environment):
    it saves the seconds of imports each `python -m pipeline.cli` start costs. An unexpected exception
    is written at the end of stderr, as a traceback would be.
    """
    from click.testing import CliRunner

    from pipeline.cli import main

    result = CliRunner().invoke(main, list(args))
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["lwm", *args], result.exit_code, result.stdout, stderr)


def lwm_bound_by_file_modes(*args: str) -> subprocess.CompletedProcess:
    """`lwm ARGS` in a process that file modes bind (a ``chmod 000`` file is unreadable to it); skips the test where
    no such process can be started. As root that is root without the capabilities that pass modes by (an
    unprivileged user may not reach this interpreter)."""
    import pytest

    prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    if prefix and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: file modes cannot be made to bind")
    with tempfile.TemporaryDirectory() as folder:
        locked = Path(folder, "locked")
        locked.write_text("x")
        locked.chmod(0)
        probe = subprocess.run([*prefix, sys.executable, "-c", f"open({str(locked)!r})"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("file modes do not bind this process")
    return subprocess.run([*prefix, sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                          env=clean_env(), timeout=300)


# ------------------------------------------------------------------ process groups of several ranks in one test

RANKS_TIMEOUT_S = 300.0


def run_ranks(fn, args: tuple, tmp_path: Path, nprocs: int = 2, timeout: float = RANKS_TIMEOUT_S) -> None:
    """Run ``fn(rank, rendezvous, *args)`` in `nprocs` fresh processes and wait for all of them, at most `timeout`
    seconds: past it the ranks are killed and the test fails instead of hanging the suite.

    The processes are spawned, not forked: by the time a test runs, the test process holds threads (Arrow's pools,
    jemalloc's purger, Ray's clients) whose locks a fork copies in whatever state they are, and a forked rank that
    needs one of them waits forever. `rendezvous` is a file for ``init_process_group(init_method="file://…")``:
    a free port picked beforehand can be taken by another process before the ranks bind it. A rank ends with
    `training.__main__.exit_rank`.
    """
    import torch.multiprocessing

    rendezvous = tmp_path / "rendezvous"
    context = torch.multiprocessing.start_processes(fn, args=(str(rendezvous), *args), nprocs=nprocs, join=False,
                                                    start_method="spawn")
    deadline = time.monotonic() + timeout
    while not context.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
            raise AssertionError(f"{nprocs} ranks did not finish within {timeout:.0f} s (killed)")


# ------------------------------------------------------------------ the vendored AgentWorldBench evaluator

VENDORED_EVAL = Path(__file__).resolve().parent.parent.parent / "shared" / "vendor" / "agentworldbench-eval" / "eval"


def vendored_eval_function(module: str, name: str):
    """A function of the vendored evaluator's ``lwm_eval_utils`` package, imported as it ships (the test is
    skipped where the evaluator is absent)."""
    import importlib
    import sys

    import pytest

    if not VENDORED_EVAL.is_dir():
        pytest.skip(f"vendored AgentWorldBench evaluator not found at {VENDORED_EVAL}")
    sys.path.insert(0, str(VENDORED_EVAL))
    try:
        return getattr(importlib.import_module(f"lwm_eval_utils.{module}"), name)
    finally:
        sys.path.remove(str(VENDORED_EVAL))


def terminal_notes_run(base: Path) -> Path:
    """`lwm run` (one process) over 12 small terminal trajectories written under `base`/in; the output folder."""
    (base / "in").mkdir()
    (base / "in" / "a.jsonl").write_text("".join(json.dumps({
        "traj_id": f"t{i}", "domain": "terminal", "split_key": f"task-{i}",
        "system": {"task_description": f"task {i}", "action_space": "keys"},
        "turns": [{"action": f'[{{"keystrokes": "cat notes-{i}-{j}.txt\\n"}}]',
                   "observation": f"line {j} of the notes of task {i}"} for j in range(3)]}) + "\n" for i in range(12)))
    proc = lwm_in_process("run", "--executor", "local", "-i", str(base / "in"), "-o", str(base / "out"),
                          "--progress", "off")
    assert proc.returncode == 0, proc.stderr
    return base / "out"
