"""SFT reasoning by rejection sampling: k candidate answers per sft target, judged, the best kept.

For each target turn of an sft trajectory (the turns `stages.pools.choose_turns` picks, so the
samples stage builds exactly these targets):

1. the prompt is the sft sample itself as chat messages — the system prompt under the sample's
   template (with the simulation instruction, when that stage ran first), every earlier turn as
   action and observation, and the target action with the prediction instruction;
2. ``llm.candidates`` answers (default 3) are asked, each a distinct request (its own cache salt
   and ``seed``), reasoning followed by ``<predicted_observation>…</predicted_observation>``;
3. each well-formed candidate is scored against the real observation with the rubric judge and
   rule verifier of the rl reward (`stages.reward.score_batch`, the same prompts and parser);
4. when several candidates share the best score, the judge compares them pairwise (the current
   winner against the next tied candidate, ``<winner>A</winner>`` or ``B``); an unusable
   comparison keeps the earlier candidate and is counted (``ties.unresolved``);
5. the winner is kept when its reward reaches ``llm.threshold`` (on the rubric's [0, 25] scale),
   else the target is dropped as ``below_threshold``. A target none of whose candidates could be
   scored is dropped as ``request_failed`` (no answer came back), ``request_refused`` (the server
   refuses the requests themselves, a prompt over its context: recorded, not asked again at that
   endpoint), ``earlier_stage_unanswered`` (not asked: an earlier stage, such as the instructions,
   got no answer for the trajectory), ``malformed`` (answers without one tag pair or without
   reasoning) or ``judge_failed`` (the judge gave no valid scores).

The kept reasoning (the text before the tag, think tags removed) is the world model's reasoning for
that target (`stages.llm.stage.Applied`; the turn's own ``reasoning``, the agent's thought, is left
as it is), so the sft target is ``{reasoning}<predicted_observation>\\n{real observation}\\n
</predicted_observation>``: the observation is always the recorded one, the model only supplies
the reasoning. Its tokens get ``llm.reasoning_weight`` (1 by default), the observation keeps its
weight. A dropped target never becomes a sample (``filtered.llm_<reason>`` in the manifest).

Rows (``llm/sft_reasoning/part-<task>.parquet``): traj_id, turn_idx, status (kept | dropped),
reason, reasoning, score, winner, scores of every candidate (-1: not scored), tied.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from schemas.trajectory import Trajectory
from stages.llm.stage import EARLIER_STAGE_UNANSWERED, Applied, Request, StageContext, unanswered_reason
from stages.pools import choose_template, choose_turns, pool_of
from stages.render import history_reply, target_prompt, user_prompt
from stages.reward import RewardConfig, RewardInput, score_batch, split_prompt
from stages.reward.extract import OPEN_TAG, extract_prediction
from stages.templates import render_system

SCHEMA = pa.schema([
    ("traj_id", pa.string()),
    ("turn_idx", pa.int32()),
    ("status", pa.string()),
    ("reason", pa.string()),
    ("reasoning", pa.string()),
    ("score", pa.float64()),
    ("winner", pa.int32()),
    ("candidate_scores", pa.list_(pa.float64())),
    ("tied", pa.int32()),
])

PAIRWISE_SYSTEM = """You compare two predictions of a world model (a language model that plays the environment of an
agent) for the same action. You receive the earlier turns, the current action, prediction A,
prediction B and the real observation (the ground truth). Decide which prediction is closer to
the ground truth in format, in the facts the model could know, in consistency with the earlier
turns and in realism. Reason briefly, then answer with exactly <winner>A</winner> or
<winner>B</winner>."""

_WINNER = re.compile(r"<winner>\s*([AB])\s*</winner>", re.IGNORECASE)
# Why a candidate was not scored; a target none of whose candidates was is dropped for the first that applies.
_UNSCORED = ("judge_failed", "malformed", "request_failed", EARLIER_STAGE_UNANSWERED, "request_refused")


def reasoning_of(completion: str) -> str:
    """The text before the prediction tag, think tags removed, stripped; ends with a newline."""
    head = completion[: completion.index(OPEN_TAG)] if OPEN_TAG in completion else completion
    head = head.replace("<think>", "").replace("</think>", "").strip()
    return head + "\n" if head else ""


def parse_winner(text: str | None) -> str | None:
    found = _WINNER.findall(text or "")
    return found[-1].upper() if found else None


def prompt_messages(traj: Trajectory, t: int, system_text: str) -> list[dict[str, str]]:
    """The sft sample of target turn `t` as chat messages (what the rl pool stores as ``messages``)."""
    messages = [{"role": "system", "content": system_text}]
    for h in range(1, t):
        messages.append({"role": "user", "content": user_prompt(traj, h)})
        messages.append({"role": "assistant", "content": history_reply(traj.turns[h - 1].observation)})
    messages.append({"role": "user", "content": target_prompt(traj, t)})
    return messages


def pairwise_messages(item: RewardInput, a: str, b: str) -> list[dict[str, str]]:
    parts = []
    if item.history:
        parts.append("# Earlier turns\n")
        for prompt, observation in item.history:
            parts.append(f"{prompt}\n**Observation:**\n{observation}\n")
    parts.append(f"# Current turn\n{item.current_prompt}\n")
    parts.append(f"# Prediction A\n```\n{a}\n```\n")
    parts.append(f"# Prediction B\n```\n{b}\n```\n")
    parts.append(f"# Real observation (ground truth)\n```\n{item.reference}\n```\n")
    parts.append("Which prediction is closer to the ground truth? Answer <winner>A</winner> or <winner>B</winner>.")
    return [{"role": "system", "content": PAIRWISE_SYSTEM}, {"role": "user", "content": "\n".join(parts)}]


class _Target:
    def __init__(self, traj: Trajectory, t: int, messages: list[dict[str, str]]) -> None:
        self.traj, self.t, self.messages = traj, t, messages
        history, current = split_prompt(messages)
        self.item = RewardInput(traj.domain, "", traj.turns[t - 1].observation, current, history)
        self.answers: list[Any] = []
        self.scores: list[float] = []
        self.failures: dict[str, int] = {}
        self.reason, self.reasoning = "", ""
        self.best, self.tied, self.winner = -1.0, 0, -1


class RejectionStage:
    name = "sft_reasoning"
    schema = SCHEMA
    uses_judge = True  # each candidate is scored by the rubric judge

    def wants(self, traj: Trajectory, ctx: StageContext) -> bool:
        pools = ctx.cfg["pools"]
        return pool_of(traj.split_key, pools["ratios"], pools["seed"]) == "sft"

    def _targets(self, traj: Trajectory, ctx: StageContext) -> list[_Target]:
        cfg, pools = ctx.cfg, ctx.cfg["pools"]
        template = choose_template(traj.traj_id, "sft", list(cfg["templates"]["mapping"]["sft"]), pools["seed"])
        system_text = render_system(traj, template, tuple(cfg["templates"]["dirs"]))
        turns = choose_turns(traj.traj_id, "sft", len(traj.turns), pools["sft_turns"], pools["eval_subsample"],
                             pools["seed"])
        return [_Target(traj, t, prompt_messages(traj, t, system_text)) for t in turns]

    def _requests(self, target: _Target, ctx: StageContext) -> list[Request]:
        seed = int(ctx.llm["seed"])
        return [Request(target.messages, salt=f"candidate-{i}", params=ctx.gen_params(seed=seed + i))
                for i in range(int(ctx.llm["candidates"]))]

    def dry_requests(self, traj: Trajectory, ctx: StageContext):
        targets = self._targets(traj, ctx)
        k = int(ctx.llm["candidates"])
        # per target: k candidates and k judge calls at least; with every judge re-ask and k-1 comparisons at most
        most = k + k * (1 + RewardConfig().judge_reasks) + (k - 1)
        return [r for t in targets for r in self._requests(t, ctx)], (2 * k * len(targets), most * len(targets))

    def process(self, trajs: list[Trajectory], ctx: StageContext) -> list[dict[str, Any]]:
        targets = [tg for traj in trajs for tg in self._targets(traj, ctx)]
        limit = int(ctx.llm["max_prompt_chars"])
        live = []
        for tg in targets:
            ctx.stats.add("targets")
            if limit and sum(len(m["content"]) for m in tg.messages) > limit:
                tg.reason = "prompt_too_long"
            else:
                live.append(tg)
        requests = [r for tg in live for r in self._requests(tg, ctx)]
        answers = ctx.send(requests)
        k = int(ctx.llm["candidates"])
        for i, tg in enumerate(live):
            tg.answers = answers[i * k : (i + 1) * k]
        self._score(live, ctx)
        self._select(live, ctx)
        rows = []
        for tg in targets:
            kept = not tg.reason
            ctx.stats.add("kept" if kept else f"dropped.{tg.reason}")
            rows.append({"traj_id": tg.traj.traj_id, "turn_idx": tg.t, "status": "kept" if kept else "dropped",
                         "reason": tg.reason, "reasoning": tg.reasoning if kept else None,
                         "score": tg.best if tg.scores else None, "winner": tg.winner if kept else None,
                         "candidate_scores": list(tg.scores), "tied": tg.tied})
        return rows

    def _score(self, live: list[_Target], ctx: StageContext) -> None:
        items, owners = [], []
        for tg in live:
            tg.scores = [-1.0] * len(tg.answers)
            tg.failures = dict.fromkeys(_UNSCORED, 0)
            for j, ans in enumerate(tg.answers):
                if not ans.ok:
                    reason = unanswered_reason(ans)
                    tg.failures[reason] += 1
                    ctx.stats.add(f"candidates.{reason}")
                    continue
                if not extract_prediction(ans.text).ok or not reasoning_of(ans.text):
                    tg.failures["malformed"] += 1
                    ctx.stats.add("candidates.malformed")
                    continue
                items.append(RewardInput(tg.item.domain, ans.text, tg.item.reference, tg.item.current_prompt,
                                         tg.item.history))
                owners.append((tg, j))
        results = score_batch(items, ctx.judge) if items else []
        for (tg, j), res in zip(owners, results):
            if res.judge_failed:
                tg.failures["judge_failed"] += 1
                ctx.stats.add("candidates.judge_failed")
            else:
                tg.scores[j] = round(float(res.reward), 6)
                ctx.stats.add("candidates.scored")

    def _select(self, live: list[_Target], ctx: StageContext) -> None:
        threshold = float(ctx.llm["threshold"])
        ties = []
        for tg in live:
            tg.best, tg.tied, tg.winner = max(tg.scores, default=-1.0), 0, -1
            if tg.best < 0:
                tg.reason = next((reason for reason in _UNSCORED if tg.failures[reason]), "request_failed")
                continue
            tied = [j for j, s in enumerate(tg.scores) if s == tg.best]
            tg.tied, tg.winner = len(tied), tied[0]
            if tg.best < threshold:
                tg.reason = "below_threshold"
                continue
            if len(tied) > 1:
                ctx.stats.add("ties.targets")
                ties.append((tg, tied[1:]))
        # pairwise rounds: every tied target compares its current winner with its next tied candidate
        while ties:
            reqs = []
            for tg, rest in ties:
                a = extract_prediction(tg.answers[tg.winner].text).prediction
                b = extract_prediction(tg.answers[rest[0]].text).prediction
                reqs.append(Request(pairwise_messages(tg.item, a, b), salt=f"pairwise-{tg.winner}-{rest[0]}",
                                    params={"temperature": 0.0}))
            answers = ctx.send(reqs, judge=True)
            nxt = []
            for (tg, rest), ans in zip(ties, answers):
                ctx.stats.add("ties.comparisons")
                choice = parse_winner(ans.text) if ans.ok else None
                if choice is None:
                    ctx.stats.add("ties.unresolved")
                elif choice == "B":
                    tg.winner = rest[0]
                if rest[1:]:
                    nxt.append((tg, rest[1:]))
            ties = nxt
        for tg in live:
            if not tg.reason:
                tg.reasoning = ctx.redacted(reasoning_of(tg.answers[tg.winner].text))

    def apply(self, traj: Trajectory, rows: list[dict[str, Any]], ctx: StageContext) -> Applied:
        # reasoning and drops reach the samples only, no later stage's prompt: unanswered, they hold none back
        applied = Applied()
        for row in rows:
            t = int(row["turn_idx"])
            if row["status"] == "kept":
                applied.reasoning[t] = row["reasoning"]
            else:
                applied.dropped[t] = row["reason"]
        return applied


STAGE = RejectionStage()
