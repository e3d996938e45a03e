"""A scripted model and judge for the model-in-the-loop stage tests, and a corpus whose trajectories
name their scenario in every action (``scn=<name>``), so the script knows what to answer.

Generation requests (the sft prompt) are answered per scenario and ``seed`` (candidate i has seed i):
a candidate is ``Thinking … <predicted_observation>\\nQ<v>\\n</predicted_observation>`` and the
judge, seeing ``Q<v>`` as the prediction, gives every dimension the score v (reward 5·v).
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

from stages.llm.instructions import SYSTEM_PROMPT as INSTRUCTION_SYSTEM
from stages.llm.rejection import PAIRWISE_SYSTEM
from tests.judge_server import Answer, Slow, Status, scores_answer

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
