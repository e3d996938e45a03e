"""A scripted block writer for the WMAT tests: answers block requests by a scenario per (task, step).

The scenario of a step is a stable hash of its task text and step number (`scenario_of`), so a
test can say, from the trajectories alone, what the server answered:

- ``valid``: a well-formed abstract block (keywords from the task, q 80% on success, 20% else);
- ``spoiler_then_valid``: first the future pasted into ``<imaginary>``, a valid block when re-asked;
- ``spoiler``: the future pasted every time (rejected after the re-ask);
- ``malformed``: ``<imaginary>`` never closed, every time;
- ``missing_q``: no ``<confidence>`` tag first, a valid block when re-asked.

On the last step the future reveals nothing new (the search demo's last observation is a plain
receipt), so the spoiler scenarios answer a valid block there.
"""

from __future__ import annotations

import hashlib
import re
import threading

from tests.judge_server import Answer

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
