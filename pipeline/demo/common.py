"""What every demo domain shares: seeded randomness, the task/attempt loop and the lwm-jsonl layout.

A domain module describes itself with a `DomainSpec`: how to draw a task, how to play one attempt
at it (an `Episode`), and its fixed demonstrations and simulation instructions. `build_corpus`
turns that into trajectory dicts; several attempts at one task share its ``split_key``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas.trajectory import make_traj_id

GENERATOR = "lwmkit-demo"
DEMO_FORMAT = "lwm-jsonl"
# How many attempts one task gets; most tasks are tried more than once, as in real sandbox runs.
ATTEMPT_CHOICES = (1, 2, 2, 3, 3, 4)
SIMULATION_INSTRUCTION_RATE = 0.4


@dataclass(frozen=True)
class Episode:
    """One simulated attempt at a task, before it becomes a trajectory dict."""

    task_description: str
    action_space: str
    turns: list[dict[str, Any]]
    initial_state: str | None = None
    outcome: dict[str, Any] | None = None


@dataclass(frozen=True)
class DomainSpec:
    """A demo domain: its task sampler, its attempt player and its fixed system prompt parts."""

    domain: str
    new_task: Callable[[random.Random], Any]
    play_attempt: Callable[[random.Random, Any], Episode]
    demonstrations: tuple[tuple[str, str], ...]
    simulation_instructions: tuple[str, ...]


def seeded_rng(seed: int, *labels: object) -> random.Random:
    """A `random.Random` keyed by a stable hash of the seed and labels (never Python's salted hash)."""
    key = "\x1f".join(str(x) for x in (seed, *labels))
    return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))


def action_json(value: Any) -> str:
    """Canonical action text: compact JSON with the project's separators, key order as given."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def make_turn(action: str, observation: str, reasoning: str | None = None, meta: dict | None = None) -> dict:
    """One turn in the lwm-jsonl layout; `meta` becomes JSON text."""
    return {
        "action": action,
        "observation": observation,
        "reasoning": reasoning,
        "meta": json.dumps(meta, ensure_ascii=False, sort_keys=True) if meta else None,
    }


def turn_budget(rng: random.Random) -> int:
    """Number of turns of an attempt: 2-15, with an occasional long one."""
    if rng.random() < 0.05:
        return rng.randint(16, 24)
    return rng.randint(2, 15)


def outcome_of(rng: random.Random, success: bool) -> dict[str, Any] | None:
    """An outcome record; a few sandboxes do not grade, so some attempts have none."""
    if rng.random() < 0.1:
        return None
    reward = 1.0 if success else round(rng.choice((0.0, 0.0, 0.25, 0.5)), 2)
    return {"success": success, "reward": reward}


def build_corpus(spec: DomainSpec, seed: int, n: int) -> list[dict[str, Any]]:
    """`n` trajectory dicts of `spec.domain`; a pure function of (domain, seed, n)."""
    task_rng = seeded_rng(seed, spec.domain, "tasks")
    corpus: list[dict[str, Any]] = []
    task_no = 0
    while len(corpus) < n:
        task = spec.new_task(task_rng)
        split_key = f"demo-{spec.domain}-s{seed}-task{task_no:04d}"
        attempts = min(task_rng.choice(ATTEMPT_CHOICES), n - len(corpus))
        for attempt_no in range(attempts):
            rng = seeded_rng(seed, spec.domain, task_no, attempt_no)
            episode = spec.play_attempt(rng, task)
            corpus.append(_trajectory_dict(spec, rng, episode, seed, split_key, attempt_no, len(corpus)))
        task_no += 1
    return corpus


def _trajectory_dict(
    spec: DomainSpec, rng: random.Random, episode: Episode, seed: int, split_key: str, attempt_no: int, index: int
) -> dict[str, Any]:
    instruction = None
    if spec.simulation_instructions and rng.random() < SIMULATION_INSTRUCTION_RATE:
        instruction = rng.choice(spec.simulation_instructions)
    meta = {"generator": GENERATOR, "seed": seed, "index": index, "attempt": attempt_no + 1}
    return {
        "traj_id": make_traj_id(DEMO_FORMAT, f"{GENERATOR}:{spec.domain}:{seed}:{index}"),
        "domain": spec.domain,
        "split_key": split_key,
        "source": {"kind": "sandbox", "format": DEMO_FORMAT, "uri": "", "locator": ""},
        "system": {
            "task_description": episode.task_description,
            "action_space": episode.action_space,
            "initial_state": episode.initial_state,
            "demonstrations": [{"action": a, "observation": o} for a, o in spec.demonstrations],
            "simulation_instruction": instruction,
        },
        "turns": episode.turns,
        "outcome": episode.outcome,
        "meta": json.dumps(meta, sort_keys=True),
    }


def write_jsonl_atomic(path: str, records: list[dict[str, Any]]) -> None:
    """Write one JSON object per line (UTF-8, sorted keys) to a temp name, then rename over `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".jsonl", dir=directory)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes the file private; the corpus is meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False, sort_keys=True))
                out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        # A failed write must not leave a half file behind under any name.
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
