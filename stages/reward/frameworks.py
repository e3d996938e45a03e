"""The reward under the signatures RL frameworks call — thin wrappers over `score_batch`.

- verl: ``compute_score(data_source, solution_str, ground_truth, extra_info)`` — point
  ``reward.custom_reward_function.path`` at this file and ``name`` at ``compute_score``; judge
  settings come from ``reward.custom_reward_function.reward_kwargs`` or the environment. It reads ``extra_info``
  as `lwm export verl` writes it (``domain``, ``verifier``, ``history``, ``current_prompt``) and
  returns a dict whose ``score`` is the reward (the other keys are logged by verl).
- TRL: ``trl_reward(prompts, completions, **columns)`` — pass it in ``GRPOTrainer(reward_funcs=[…])``;
  it reads the ``reference``, ``domain`` and ``verifier`` columns `lwm export trl` writes and
  derives the history from the conversational prompt. `make_trl_reward(**settings)` binds settings.

Judge settings (keyword or environment): ``judge_url`` (``LWM_JUDGE_URL``), ``judge_model``
(``LWM_JUDGE_MODEL``), ``judge_api_key`` (``LWM_JUDGE_API_KEY``), ``judge_cache`` (``LWM_JUDGE_CACHE``),
``judge_concurrency``, ``judge_timeout_s``, ``judge_max_tokens``, ``judge_temperature``; reward settings:
the fields of `RewardConfig`. One client per distinct setting is kept per process, so its
concurrency limit holds across the threads a framework scores in.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from stages.llm.client import ChatClient
from stages.reward.core import RewardConfig, RewardInput, score_batch, split_prompt

_CLIENTS: dict[tuple, ChatClient] = {}
_CLIENTS_LOCK = threading.Lock()
_CONFIG_FIELDS = tuple(RewardConfig.__dataclass_fields__)


def _setting(settings: dict[str, Any], key: str, env: str | None = None, default: Any = None) -> Any:
    if settings.get(key) is not None:
        return settings[key]
    if env and os.environ.get(env):
        return os.environ[env]
    return default


def _number(kind: type, settings: dict[str, Any], key: str, env: str | None, default: Any, least: float):
    """A numeric setting at least `least`; a bad value is a `ValueError` naming where it came from."""
    value = _setting(settings, key, env, default)
    where = env if env and settings.get(key) is None and os.environ.get(env) else key
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be {'an integer' if kind is int else 'a number'}, not {value!r}") from None
    if not number >= least:  # also refuses NaN
        raise ValueError(f"{where} must be at least {least}, not {value!r}")
    return number


def judge_client(**settings: Any) -> ChatClient:
    """The process-wide judge client for these settings (module docstring for the keys)."""
    url = _setting(settings, "judge_url", "LWM_JUDGE_URL")
    model = _setting(settings, "judge_model", "LWM_JUDGE_MODEL")
    if not url or not model:
        raise ValueError("the world-model reward needs a judge: set judge_url and judge_model "
                         "(or LWM_JUDGE_URL and LWM_JUDGE_MODEL)")
    key = (
        url, model,
        _setting(settings, "judge_api_key", "LWM_JUDGE_API_KEY"),
        _setting(settings, "judge_cache", "LWM_JUDGE_CACHE"),
        _number(int, settings, "judge_concurrency", "LWM_JUDGE_CONCURRENCY", 8, 1),
        _number(float, settings, "judge_timeout_s", None, 120.0, 0.001),
        _number(int, settings, "judge_max_retries", None, 4, 0),
        _number(float, settings, "judge_backoff_s", None, 1.0, 0.0),
        _number(int, settings, "judge_max_tokens", None, 4096, 1),
        _number(float, settings, "judge_temperature", None, 0.0, 0.0),
    )
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = ChatClient(
                url, model, key[2], cache_dir=key[3], max_concurrency=key[4], timeout_s=key[5],
                max_retries=key[6], backoff_s=key[7], default_params={"max_tokens": key[8], "temperature": key[9]},
            )
        return _CLIENTS[key]


def reward_config(**settings: Any) -> RewardConfig:
    """`RewardConfig` from the keys of `settings` that name its fields."""
    return RewardConfig(**{k: settings[k] for k in _CONFIG_FIELDS if settings.get(k) is not None})


def _domain(data_source: str, extra: dict[str, Any]) -> str:
    return extra.get("domain") or data_source.rsplit("/", 1)[-1]


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **settings: Any) -> dict[str, float]:
    """verl's reward function: one response → ``{"score": reward, …parts}``."""
    extra = dict(extra_info or {})
    history = tuple((h["prompt"], h["observation"]) for h in extra.get("history") or ())
    item = RewardInput(
        domain=_domain(data_source, extra),
        completion=solution_str,
        reference=ground_truth,
        current_prompt=extra.get("current_prompt") or "",
        history=history,
        verifier=extra.get("verifier") or None,
    )
    (result,) = score_batch([item], judge_client(**settings), reward_config(**settings))
    return result.as_dict()


def _completion_text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    # conversational: a list of messages; the assistant's text is what it generated
    return "".join(m.get("content") or "" for m in completion if m.get("role", "assistant") == "assistant")


def trl_reward(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
    """TRL's reward function: one float per completion (columns ``reference``, ``domain``, ``verifier``)."""
    settings = {k: v for k, v in columns.items() if not isinstance(v, list)}
    references, domains = columns["reference"], columns["domain"]
    verifiers = columns.get("verifier") or [None] * len(completions)
    items = []
    for prompt, completion, ref, domain, kind in zip(prompts, completions, references, domains, verifiers):
        if isinstance(prompt, str):
            history, current = (), prompt
        else:
            history, current = split_prompt(prompt)
        items.append(RewardInput(domain, _completion_text(completion), ref, current, history, kind or None))
    results = score_batch(items, judge_client(**settings), reward_config(**settings))
    return [r.reward for r in results]


def make_trl_reward(**settings: Any):
    """`trl_reward` with judge and reward settings bound (TRL passes only dataset columns)."""

    def world_model_reward(prompts, completions, **columns):
        return trl_reward(prompts, completions, **{**columns, **settings})

    return world_model_reward
