"""The WMAT world-model reward (R_WM) under the signatures RL frameworks call.

- verl: ``compute_score(data_source, solution_str, ground_truth, extra_info)`` — point
  ``custom_reward_function.path`` at this file and ``name`` at ``compute_score``. `ground_truth`
  is the later real trajectory as text (or a dict with ``future`` and ``correct``); the episode's
  final correctness ``I`` comes from ``extra_info["correct"]`` (or the dict). Returns a dict
  whose ``score`` is R_WM; ``r_calib``, ``r_ground``, ``format_ok`` and ``confidence`` are logged.
- TRL: ``trl_reward(prompts, completions, future, correct, **columns)`` — one R_WM per
  completion, for ``GRPOTrainer(reward_funcs=[…])`` over a dataset with ``future`` and
  ``correct`` columns.

Both frameworks normalize one scalar per rollout over its group, which gives the world-model
span's advantage. The policy span's ``A_E + ω·A_S`` needs per-span advantages, which neither
framework's stock estimator applies: `stages.reward.wmat.compose_advantages` and
`span_token_advantages` compute them for a custom estimator.
Settings (keyword): ``max_keywords`` (10), ``min_keywords`` (1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stages.reward.wmat import world_model_reward


def _correct(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "correct")
    return bool(value)


def _completion_text(completion: Any) -> str:
    """A completion's text: itself, or its assistant messages' contents; '' for none (None), which is malformed."""
    if isinstance(completion, str):
        return completion
    if not isinstance(completion, list | tuple):
        return ""
    return "".join(m.get("content") or "" for m in completion
                   if isinstance(m, dict) and m.get("role", "assistant") == "assistant" and isinstance(m.get("content") or "", str))


def _limits(settings: dict[str, Any]) -> dict[str, int]:
    return {k: int(settings[k]) for k in ("max_keywords", "min_keywords") if settings.get(k) is not None}


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  **settings: Any) -> dict[str, float]:
    """verl's reward function: one response → ``{"score": R_WM, …parts}``."""
    extra = dict(extra_info or {})
    if isinstance(ground_truth, dict):
        future, correct = ground_truth.get("future") or "", ground_truth.get("correct", extra.get("correct"))
    else:
        future, correct = ground_truth or "", extra.get("correct")
    if correct is None:
        raise ValueError("the WMAT reward needs the episode's final correctness: extra_info['correct']")
    return world_model_reward(solution_str, future, _correct(correct), **_limits(settings)).as_dict()


def trl_reward(prompts: Sequence[Any], completions: Sequence[Any], future: Sequence[str],
               correct: Sequence[Any], **columns: Any) -> list[float]:
    """TRL's reward function: R_WM per completion (columns ``future`` and ``correct``)."""
    limits = _limits({k: v for k, v in columns.items() if not isinstance(v, list)})
    return [world_model_reward(_completion_text(c), f, _correct(i), **limits).r_wm
            for c, f, i in zip(completions, future, correct, strict=True)]
