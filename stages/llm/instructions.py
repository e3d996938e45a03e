"""Simulation instructions: a short statement of the non-default conditions a trajectory reveals.

A world model trained only on default behaviour cannot be steered to inject an error, hide a
result or split an output. The schema's ``simulation_instruction`` (rendered into the system
prompt by every template) is how it is steered; this stage derives one per trajectory that has
none, with a model, from the trajectory itself:

- the model sees the task, every action and every observation (each cut to
  ``llm.instruction_obs_chars``) and answers ``<simulation_instruction>…</simulation_instruction>``,
  holding ``NONE`` when the environment behaved in the default way throughout;
- **no spoilers**: the instruction must state conditions, not copy what the environment returned.
  An answer that shares ``llm.spoiler_ngram`` consecutive words (lowercased word characters) with
  any observation is rejected, as is one longer than ``llm.instruction_max_chars`` or without the
  tag pair; rejected answers are re-asked ``llm.instruction_reasks`` times (a distinct request,
  told why), then the trajectory goes on without an instruction (it is not dropped: its samples are
  made as without this stage) and the reason is counted (``without_instruction.<reason>``);
- a trajectory whose source already has an instruction keeps it and costs no request;
- only trajectories of ``llm.instruction_pools`` are asked (the eval pool is left as recorded).

Rows (``llm/instructions/part-<task>.parquet``): traj_id, status (``derived`` | ``none`` |
``source`` | ``rejected``), reason, instruction.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from schemas.trajectory import Trajectory
from stages.llm.stage import Applied, Request, StageContext, all_unanswered, unanswered_reason
from stages.pools import pool_of

TAG_OPEN, TAG_CLOSE = "<simulation_instruction>", "</simulation_instruction>"
NONE_ANSWER = "NONE"
_WORD = re.compile(r"\w+")

SYSTEM_PROMPT = """You write simulation instructions for a world model: a language model that plays the environment
(a terminal, a tool server, a website, a phone) of an agent. By default the world model simulates
an environment where everything works as usual. A simulation instruction tells it which
non-default conditions to simulate, so that the same environment can be made to fail, hide
results or behave unusually on purpose.

You receive one recorded episode: the task, each action of the agent and each observation the
real environment returned. State, in one to three short sentences, the conditions of this
environment that the observations reveal and that differ from a default, healthy environment:
errors and their causes, missing files or resources, permissions, rate limits, timeouts, empty
or truncated results, unusual states or data. Describe the conditions as settings of the
environment ("the disk has under 100 MB free", "the search API returns no results for product
names"), never as a transcript: do not quote or copy output text, file contents, listings or
error messages from the observations, and do not reveal the outcome of particular actions step
by step.

Answer with exactly one block:
<simulation_instruction>
...the instruction...
</simulation_instruction>
If the environment behaved in the default way throughout, put NONE inside the block."""

REASK_NOTE = {
    "spoiler": "Your previous answer copied text from the observations. State the conditions in your own words, "
               "without quoting any output.",
    "malformed": "Your previous answer did not contain exactly one <simulation_instruction> block.",
    "too_long": "Your previous answer was too long. Keep the instruction to one to three short sentences.",
}

SCHEMA = pa.schema([
    ("traj_id", pa.string()),
    ("status", pa.string()),
    ("reason", pa.string()),
    ("instruction", pa.string()),
])


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def shared_ngram(instruction: str, observations: list[str], n: int) -> str | None:
    """The first run of `n` consecutive words of `instruction` found in any observation, or None."""
    iw = words(instruction)
    if n <= 0 or len(iw) < n:
        return None
    grams = {tuple(iw[i : i + n]) for i in range(len(iw) - n + 1)}
    for obs in observations:
        ow = words(obs)
        for i in range(len(ow) - n + 1):
            if tuple(ow[i : i + n]) in grams:
                return " ".join(ow[i : i + n])
    return None


def _cut(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters]"


def episode_text(traj: Trajectory, obs_chars: int) -> str:
    parts = [f"# Domain\n{traj.domain}\n"]
    if traj.system.task_description:
        parts.append(f"# Task\n{traj.system.task_description}\n")
    if traj.system.initial_state:
        parts.append(f"# Initial state\n{_cut(traj.system.initial_state, obs_chars)}\n")
    for i, turn in enumerate(traj.turns, 1):
        parts.append(f"## Turn {i}\n### Action\n{turn.action}\n### Observation\n{_cut(turn.observation, obs_chars)}\n")
    return "\n".join(parts)


def instruction_messages(traj: Trajectory, obs_chars: int, note: str = "") -> list[dict[str, str]]:
    user = episode_text(traj, obs_chars) + "\nWrite the simulation instruction for this episode."
    if note:
        user += "\n\n" + note
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_instruction(text: str | None, max_chars: int) -> tuple[str | None, str]:
    """(instruction or None for NONE, "") or (None, reason) for an answer that cannot be used."""
    if not text:
        return None, "malformed"
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL)
    if text.count(TAG_OPEN) != 1 or text.count(TAG_CLOSE) != 1:
        return None, "malformed"
    start, end = text.index(TAG_OPEN) + len(TAG_OPEN), text.index(TAG_CLOSE)
    if end < start:
        return None, "malformed"
    body = " ".join(text[start:end].split())
    if not body:
        return None, "malformed"
    if body.strip(" .").upper() == NONE_ANSWER:
        return None, ""
    if max_chars and len(body) > max_chars:
        return None, "too_long"
    return body, ""


class InstructionStage:
    name = "instructions"
    schema = SCHEMA
    uses_judge = False

    def wants(self, traj: Trajectory, ctx: StageContext) -> bool:
        pools = ctx.cfg["pools"]
        return pool_of(traj.split_key, pools["ratios"], pools["seed"]) in set(ctx.llm["instruction_pools"])

    def _request(self, traj: Trajectory, ctx: StageContext, attempt: int, reason: str = "") -> Request:
        note = REASK_NOTE.get(reason, "") if attempt else ""
        return Request(instruction_messages(traj, int(ctx.llm["instruction_obs_chars"]), note),
                       salt="" if attempt == 0 else f"reask-{attempt}-{reason}",
                       params={"temperature": 0.0 if attempt == 0 else ctx.llm["temperature"],
                               "max_tokens": ctx.llm["max_completion_tokens"]})

    def dry_requests(self, traj: Trajectory, ctx: StageContext):
        if traj.system.simulation_instruction:
            return [], (0, 0)
        return [self._request(traj, ctx, 0)], (1, 1 + int(ctx.llm["instruction_reasks"]))

    def _check(self, traj: Trajectory, answer, ctx: StageContext) -> tuple[str | None, str]:
        if not answer.ok:
            return None, unanswered_reason(answer)
        text, reason = parse_instruction(answer.text, int(ctx.llm["instruction_max_chars"]))
        if text is not None:
            gram = shared_ngram(text, [t.observation for t in traj.turns], int(ctx.llm["spoiler_ngram"]))
            if gram is not None:
                return None, "spoiler"
        return text, reason

    def process(self, trajs: list[Trajectory], ctx: StageContext) -> list[dict[str, Any]]:
        rows: dict[str, dict[str, Any]] = {}
        pending = []
        for traj in trajs:
            ctx.stats.add("trajectories")
            if traj.system.simulation_instruction:
                rows[traj.traj_id] = {"traj_id": traj.traj_id, "status": "source", "reason": "", "instruction": None}
                ctx.stats.add("status.source")
            else:
                pending.append(traj)
        reasons: dict[str, str] = {}
        for attempt in range(int(ctx.llm["instruction_reasks"]) + 1):
            if not pending:
                break
            answers = ctx.send([self._request(t, ctx, attempt, reasons.get(t.traj_id, "")) for t in pending])
            retry = []
            for traj, answer in zip(pending, answers):
                text, reason = self._check(traj, answer, ctx)
                if reason:
                    ctx.stats.add(f"rejected_answers.{reason}")
                    reasons[traj.traj_id] = reason
                    if answer.ok:  # a request without an answer was retried by the client, or is refused for good
                        retry.append(traj)
                        continue
                status = "rejected" if reason else ("derived" if text is not None else "none")
                rows[traj.traj_id] = {"traj_id": traj.traj_id, "status": status, "reason": reason,
                                      "instruction": ctx.redacted(text)}
            pending = retry
        for traj in pending:
            rows[traj.traj_id] = {"traj_id": traj.traj_id, "status": "rejected", "reason": reasons[traj.traj_id],
                                  "instruction": None}
        out = []
        for traj in trajs:
            row = rows[traj.traj_id]
            if row["status"] != "source":
                ctx.stats.add(f"status.{row['status']}")
            if row["status"] == "rejected":  # the trajectory goes on, without an instruction
                ctx.stats.add(f"without_instruction.{row['reason']}")
            out.append(row)
        return out

    def apply(self, traj: Trajectory, rows: list[dict[str, Any]], ctx: StageContext) -> Applied:
        for row in rows:
            if row["status"] == "derived" and not traj.system.simulation_instruction:
                traj.system.simulation_instruction = row["instruction"]
        # no answer yet: the instruction a later run may derive would change every later prompt
        return Applied(unanswered=all_unanswered(rows, "rejected"))


STAGE = InstructionStage()
