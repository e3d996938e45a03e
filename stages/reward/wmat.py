"""Rewards of world-model agentic training (WMAT): grounding, calibration, and the two advantages.

Pure functions; the format they read is `stages.reward.wmat_format`.

- ``R_ground`` (`grounding_reward`): the share of predicted keywords that occur in the later real
  trajectory (the turns from the current step on). A keyword occurs when its words, lowercased,
  appear as a contiguous run of the future text's words. Only the first `max_keywords` keywords
  count, and the share is taken over at least `min_keywords`, so listing many guesses or a single
  safe one is not free. In [0, 1].
- ``R_calib`` (`calibration_reward`): ``I − (q − I)²`` with ``I ∈ {0, 1}`` the episode's final
  correctness and ``q ∈ [0, 1]`` the stated confidence. In [0, 1] when I = 1 and [−1, 0] when
  I = 0; it falls as ``|q − I|`` grows. A missing or unparseable q scores as maximally wrong
  (``I − 1``).
- ``R_WM = R_calib + R_ground`` (`world_model_reward`) drives the world-model span's advantage.
- `group_normalize`: ``(x − mean) / (std + eps)`` over one group (population std); a group whose
  values are all equal gets zeros.
- `compose_advantages`: per rollout of one prompt group, the world-model span's advantage (R_WM
  normalized in the group) and the policy span's ``A_E + ω·A_S`` (episode reward normalized in the
  group, plus ω times the confidence normalized within its step group). ω: 0.2 for search, 0.1 for
  math (`OMEGA`); rollouts without a confidence get ``A_S = 0``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import regex

from stages.reward.wmat_format import FormatCheck, check_output

OMEGA = {"search": 0.2, "math": 0.1}
DEFAULT_OMEGA = 0.2
EPS = 1e-6

_WORD = regex.compile(r"[\p{L}\p{N}_']+")


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def keyword_hits(keywords: Sequence[str], future_text: str) -> list[bool]:
    """For each keyword, whether its words occur as a contiguous run of `future_text`'s words."""
    future = _words(future_text)
    grams: dict[int, set[tuple[str, ...]]] = {}
    hits = []
    for kw in keywords:
        words = tuple(_words(kw))
        n = len(words)
        if n == 0:
            hits.append(False)
            continue
        if n not in grams:
            grams[n] = {tuple(future[i : i + n]) for i in range(len(future) - n + 1)}
        hits.append(words in grams[n])
    return hits


def grounding_reward(keywords: Sequence[str], future_text: str, max_keywords: int = 10,
                     min_keywords: int = 1) -> float:
    """R_ground: hits among the first `max_keywords` keywords over max(their count, `min_keywords`)."""
    counted = list(keywords)[: max(0, max_keywords)]
    denominator = max(len(counted), min_keywords, 1)
    return sum(keyword_hits(counted, future_text)) / denominator


def calibration_reward(confidence: float | None, correct: bool | int) -> float:
    """R_calib = I − (q − I)², q in [0, 1] (None: maximally wrong, I − 1)."""
    i = 1.0 if correct else 0.0
    if confidence is None or not math.isfinite(confidence):
        return i - 1.0
    q = min(1.0, max(0.0, float(confidence)))
    return i - (q - i) ** 2


@dataclass(frozen=True)
class WorldModelReward:
    """R_WM and its parts for one output."""

    r_wm: float
    r_calib: float
    r_ground: float
    format_ok: bool
    format_reason: str
    confidence: float | None

    def as_dict(self) -> dict[str, float]:
        return {"score": self.r_wm, "r_calib": self.r_calib, "r_ground": self.r_ground,
                "format_ok": float(self.format_ok),
                "confidence": -1.0 if self.confidence is None else self.confidence}


def world_model_reward(output: str | FormatCheck, future_text: str, correct: bool | int,
                       max_keywords: int = 10, min_keywords: int = 1) -> WorldModelReward:
    """R_WM = R_calib + R_ground of one output; a malformed output gets R_ground 0 and q missing (so does no
    output at all: None, or anything but text, as a framework may pass for an empty generation)."""
    if isinstance(output, FormatCheck):
        check = output
    else:
        check = check_output(output if isinstance(output, str) else "")
    if not check.ok:
        r_calib = calibration_reward(None, correct)
        return WorldModelReward(r_calib, r_calib, 0.0, False, check.reason, None)
    out = check.output
    r_ground = grounding_reward(out.keywords, future_text, max_keywords, min_keywords)
    r_calib = calibration_reward(out.confidence, correct)
    return WorldModelReward(r_calib + r_ground, r_calib, r_ground, True, "", out.confidence)


def group_normalize(values: Sequence[float], eps: float = EPS) -> list[float]:
    """``(x − mean) / (std + eps)`` over the group (population std); all-equal values give zeros."""
    n = len(values)
    if n == 0:
        return []
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / n
    std = math.sqrt(var)
    if std <= eps * max(1.0, abs(mean)):
        return [0.0] * n
    return [(v - mean) / (std + eps) for v in values]


def normalize_within(values: Sequence[float | None], groups: Sequence[Hashable]) -> list[float]:
    """`group_normalize` within each group of `groups`; None values get 0 and are left out."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, (v, g) in enumerate(zip(values, groups, strict=True)):
        if v is not None:
            members[g].append(i)
    out = [0.0] * len(values)
    for idx in members.values():
        for i, z in zip(idx, group_normalize([float(values[i]) for i in idx])):
            out[i] = z
    return out


def omega_for(domain: str) -> float:
    """ω of a domain (0.2 search, 0.1 math, else `DEFAULT_OMEGA`)."""
    return OMEGA.get(domain, DEFAULT_OMEGA)


@dataclass(frozen=True)
class SpanAdvantages:
    """Advantages of one rollout: the world-model span's and the policy span's."""

    world_model: float
    policy: float


def compose_advantages(
    episode_rewards: Sequence[float],
    wm_rewards: Sequence[float],
    confidences: Sequence[float | None],
    step_groups: Sequence[Hashable] | None = None,
    omega: float = DEFAULT_OMEGA,
) -> list[SpanAdvantages]:
    """Advantages of the N rollouts of one prompt group (module docstring).

    `step_groups` names the step group of each rollout (rollouts at the same state); omitted, the
    whole prompt group is one step group, as for single-step samples.
    """
    n = len(episode_rewards)
    if not (len(wm_rewards) == len(confidences) == n):
        raise ValueError("episode_rewards, wm_rewards and confidences must have one value per rollout")
    groups = list(step_groups) if step_groups is not None else [0] * n
    a_wm = group_normalize(list(wm_rewards))
    a_e = group_normalize(list(episode_rewards))
    a_s = normalize_within(list(confidences), groups)
    return [SpanAdvantages(w, e + omega * s) for w, e, s in zip(a_wm, a_e, a_s)]


def span_token_advantages(num_tokens: int, wm_span: tuple[int, int], policy_span: tuple[int, int],
                          adv: SpanAdvantages) -> list[float]:
    """Per-token advantages of one response: A_WM on the world-model token span, the policy
    advantage on the policy token span, 0 elsewhere (spans are ``[start, end)`` token offsets)."""
    out = [0.0] * num_tokens
    for (start, end), value in ((wm_span, adv.world_model), (policy_span, adv.policy)):
        for i in range(max(0, start), min(num_tokens, end)):
            out[i] = value
    return out
