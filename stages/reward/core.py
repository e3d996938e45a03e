"""The world-model reward: strict extraction → rule verifier → rubric judge → one number.

Combination (`RewardConfig`, every choice configurable):

- the rubric reward is mean(five judge scores) × 5 ∈ [5, 25] (`stages.reward.rubric`);
- the rule reward is 25 when the sample's verifier passes, else 0 (`stages.reward.verifiers`);
- with a verifier, reward = (w_rubric · rubric + w_rule · rule) / (w_rubric + w_rule), a weighted
  mean with weights 9 : 1 by default, so the reward stays in [0, 25] on the rubric's scale;
- without a verifier (`without_verifier`): ``"rubric"`` (default) — the rubric alone, i.e. the
  weights renormalised over what exists, so samples with and without a verifier share one scale;
  ``"zero"`` — the missing rule counts as a failed one;
- when the judge gives no valid score (`on_judge_failure`): ``"zero"`` (default) — the whole
  reward is 0, as the recipe says of an invalid judge answer; ``"rule"`` — the rubric counts 0 and
  the rule part keeps its weight. An answer without five valid scores is first re-asked
  `judge_reasks` times (default 1); an endpoint that still fails after the client's retries is not;
- a format failure (missing or duplicated ``<predicted_observation>`` tag) gives
  `format_failure_reward` (default 0) and is never sent to the judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stages.render import PREDICT_INSTRUCTION
from stages.reward.extract import extract_prediction
from stages.reward.judge_prompts import judge_system_prompt, judge_user_prompt
from stages.reward.rubric import RubricScores, parse_judge_answer
from stages.reward.verifiers import NO_VERIFIER, VERIFIER_KINDS, ReferenceMismatch, verifier_kind, verify

MAX_REWARD = 25.0
RULE_PASS_REWARD = MAX_REWARD
_OBS_HEADER = "**Environment Observation:**"


@dataclass(frozen=True)
class RewardConfig:
    """How the parts become one reward (module docstring)."""

    rubric_weight: float = 9.0
    rule_weight: float = 1.0
    without_verifier: str = "rubric"  # rubric | zero
    on_judge_failure: str = "zero"  # zero | rule
    format_failure_reward: float = 0.0
    judge_reasks: int = 1  # extra judge calls when an answer has no valid scores

    def __post_init__(self) -> None:
        if self.without_verifier not in ("rubric", "zero"):
            raise ValueError(f"without_verifier must be 'rubric' or 'zero', not {self.without_verifier!r}")
        if self.on_judge_failure not in ("zero", "rule"):
            raise ValueError(f"on_judge_failure must be 'zero' or 'rule', not {self.on_judge_failure!r}")
        weights = (self.rubric_weight, self.rule_weight)
        if not all(math.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:  # NaN compares False
            raise ValueError(f"reward weights must be finite, non-negative and not both 0, not "
                             f"rubric {self.rubric_weight!r} and rule {self.rule_weight!r}")
        if not math.isfinite(self.format_failure_reward):
            raise ValueError(f"format_failure_reward must be finite, not {self.format_failure_reward!r}")


@dataclass(frozen=True)
class RewardInput:
    """One prediction to score, with what the judge sees."""

    domain: str
    completion: str
    reference: str
    current_prompt: str
    history: tuple[tuple[str, str], ...] = ()
    verifier: str | None = None  # None: decided from the reference now


@dataclass
class RewardResult:
    """The reward and its parts (None where a part did not apply)."""

    reward: float
    format_status: str
    verifier: str
    rule: bool | None = None
    rubric: float | None = None
    judge_error: str = ""
    scores: dict[str, int] = field(default_factory=dict)

    @property
    def judge_failed(self) -> bool:
        return bool(self.judge_error)

    def as_dict(self) -> dict[str, Any]:
        """Flat numbers (verl logs every key of a returned dict per sample, so all are floats)."""
        return {
            "score": float(self.reward),
            "format_ok": float(self.format_status == "ok"),
            "rule": -1.0 if self.rule is None else float(self.rule),
            "rubric": -1.0 if self.rubric is None else float(self.rubric),
            "judge_failed": float(self.judge_failed),
        }


def combine(rubric: float | None, rule: bool | None, cfg: RewardConfig) -> float:
    """One reward from a rubric reward (None: the judge failed) and a rule result (None: no verifier)."""
    if rule is None and cfg.without_verifier == "zero":
        rule = False
    if rubric is None:
        if cfg.on_judge_failure == "zero" or rule is None:
            return 0.0
        rubric = 0.0
    if rule is None:
        return float(rubric)
    rule_reward = RULE_PASS_REWARD if rule else 0.0
    return (cfg.rubric_weight * rubric + cfg.rule_weight * rule_reward) / (cfg.rubric_weight + cfg.rule_weight)


def strip_observation_header(text: str) -> str:
    """An observation without the ``**Environment Observation:**`` header the history replies carry."""
    s = text.lstrip()
    return s[len(_OBS_HEADER):].lstrip("\n") if s.startswith(_OBS_HEADER) else text


def split_prompt(messages: Sequence[dict[str, str]]) -> tuple[tuple[tuple[str, str], ...], str]:
    """(history pairs, current prompt) of a rendered rl prompt: system?, (user, assistant)*, user.

    History observations lose their ``**Environment Observation:**`` header and the current prompt
    its prediction instruction (it is addressed to the world model, not the judge).
    """
    turns = [m for m in messages if m.get("role") != "system"]
    if not turns or turns[-1].get("role") != "user":
        raise ValueError("an rl prompt ends with the user message of the target turn")
    history = []
    for i in range(0, len(turns) - 1, 2):
        user, reply = turns[i], turns[i + 1] if i + 1 < len(turns) - 1 else None
        if reply is None or user.get("role") != "user" or reply.get("role") != "assistant":
            raise ValueError("an rl prompt alternates user and assistant messages")
        history.append((user["content"], strip_observation_header(reply["content"])))
    current = turns[-1]["content"]
    if current.endswith(PREDICT_INSTRUCTION):
        current = current[: -len(PREDICT_INSTRUCTION)]
    return tuple(history), current


def judge_messages(item: RewardInput, prediction: str) -> list[dict[str, str]]:
    """The judge's chat messages for one extracted prediction."""
    user = judge_user_prompt(list(item.history), item.current_prompt, prediction, item.reference)
    return [{"role": "system", "content": judge_system_prompt(item.domain)}, {"role": "user", "content": user}]


def score_batch(items: Sequence[RewardInput], judge, cfg: RewardConfig | None = None) -> list[RewardResult]:
    """Rewards of `items`; `judge` is a `stages.llm.client.ChatClient` (or anything with `chat_many`)."""
    cfg = cfg or RewardConfig()
    results: list[RewardResult] = []
    pending: dict[int, list[dict[str, str]]] = {}
    for i, item in enumerate(items):
        kind = item.verifier if item.verifier is not None else verifier_kind(item.domain, item.reference)
        if kind not in VERIFIER_KINDS and kind != NO_VERIFIER:
            raise ValueError(f"unknown verifier kind {kind!r}; known: {', '.join(VERIFIER_KINDS)}, {NO_VERIFIER}")
        ex = extract_prediction(item.completion)
        if not ex.ok:
            results.append(RewardResult(cfg.format_failure_reward, ex.status, kind))
            continue
        try:
            rule = verify(kind, ex.prediction, item.reference)
        except ReferenceMismatch:
            rule = None  # the recorded kind does not fit this reference: no rule reward
        results.append(RewardResult(0.0, "ok", kind, rule=rule))
        pending[i] = judge_messages(item, ex.prediction)
    parsed: dict[int, RubricScores] = {}
    todo = list(pending)
    for attempt in range(cfg.judge_reasks + 1):
        if not todo:
            break
        salt = "" if attempt == 0 else f"reask-{attempt}"
        answers = judge.chat_many([pending[i] for i in todo], cache_salt=salt)
        reask = []
        for i, answer in zip(todo, answers):
            if not answer.ok:  # the client already retried; asking again would only repeat that
                parsed[i] = RubricScores(error=f"judge call failed: {answer.error}")
                continue
            parsed[i] = parse_judge_answer(answer.text)
            if not parsed[i].ok:
                reask.append(i)
        todo = reask
    for i, scores in parsed.items():
        res = results[i]
        res.rubric = scores.reward if scores.ok else None
        res.judge_error = scores.error
        res.scores = dict(scores.scores)
        res.reward = combine(res.rubric, res.rule, cfg)
    return results
