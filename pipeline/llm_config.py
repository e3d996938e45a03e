"""The ``[llm]`` config section: defaults, checks, the part that shapes output, and the stage registry.

Kept apart from the stage driver (`pipeline.llm_stage`) so that `pipeline.config` can resolve the
section without importing the driver.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from pipeline.config_schema import check_llm
from schemas.errors import ConfigError

LLM_DEFAULTS: dict[str, Any] = {
    "endpoint": "",  # base URL of an OpenAI-compatible server (…/v1); empty = the stages are off
    "model": "",
    "api_key_env": "OPENAI_API_KEY",  # name of the environment variable holding the key (never the key)
    "judge_endpoint": "",  # empty = endpoint
    # the judge's key: empty = the generator's key when the judge is on the generator's server, else none
    "judge_api_key_env": "",
    "judge_model": "",  # empty = model
    "stages": ["instructions", "sft_reasoning"],
    "concurrency": 8,  # requests in flight per task
    "batch": 32,  # trajectories whose requests are sent together
    "timeout_s": 120.0,
    "max_retries": 4,
    "backoff_s": 1.0,
    "max_backoff_s": 30.0,
    "max_requests": 0,  # per invocation, over all workers; 0 = no limit
    "max_tokens": 0,  # prompt + completion tokens per invocation; 0 = no limit
    "dry_run": False,
    "dry_run_show": 2,  # rendered requests printed per stage
    "temperature": 0.8,
    "max_completion_tokens": 2048,
    "judge_max_tokens": 4096,  # completion tokens of one judge answer (a grade or a comparison); as the rl reward's
    "seed": 0,
    # rejection-sampled sft reasoning
    "candidates": 3,
    "threshold": 20.0,  # reward on the rubric scale [0, 25]; 20 = mean judge score 4 of 5
    "reasoning_weight": 1.0,  # loss weight of the kept reasoning tokens
    "max_prompt_chars": 200_000,
    # simulation instructions
    "instruction_pools": ["cpt", "sft", "rl"],
    "instruction_max_chars": 600,
    "instruction_obs_chars": 1500,  # each observation shown to the model is cut to this many characters
    "instruction_reasks": 1,
    "spoiler_ngram": 8,  # an instruction sharing this many consecutive words with an observation is rejected
    # world-model blocks (WMAT: stages.llm.wmat_blocks, pipeline.wmat_pools)
    "wmat_pools": ["cpt", "sft"],  # trajectories of these pools get blocks
    "wmat_steps": 2,  # steps per trajectory that get a block
    "wmat_obs_chars": 1500,
    "wmat_reasks": 1,
    "wmat_spoiler_ngram": 5,  # a block sharing this many consecutive words with the future (only) is a spoiler
    "wmat_world_model_weight": 1.0,
    "wmat_policy_weight": 1.0,
    "wmat_observation_weight": 1.0,  # mid-training only; FE-SFT prompts have weight 0
}

# Keys that say where and how requests are sent; they never change the output bytes.
LLM_EXECUTION_KEYS = ("endpoint", "api_key_env", "judge_endpoint", "judge_api_key_env", "concurrency", "batch", "timeout_s", "max_retries",
                      "backoff_s", "max_backoff_s", "max_requests", "max_tokens", "dry_run", "dry_run_show")

_BUILTIN = {
    "instructions": "stages.llm.instructions:STAGE",
    "sft_reasoning": "stages.llm.rejection:STAGE",
    "wmat_blocks": "stages.llm.wmat_blocks:STAGE",
}
_REGISTRY: dict[str, str] = dict(_BUILTIN)


def resolve_llm(sections: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``[llm]`` sections (file, then overrides) over `LLM_DEFAULTS`, checked: one `ConfigError` line naming the
    first key whose value is of the wrong type or range, and its flag when it has one."""
    out = dict(LLM_DEFAULTS)
    for section in sections:
        if not isinstance(section, dict):
            raise ConfigError(f"llm: must be a table, not {section!r}")
        for key, value in section.items():
            if key not in LLM_DEFAULTS:
                raise ConfigError(f"unknown config key 'llm.{key}'")
            out[key] = value
    check_llm(out)
    check_stage_names(out)
    if out["endpoint"] and not out["model"]:
        raise ConfigError("llm.model is required with llm.endpoint")
    if out["dry_run"] and not (out["endpoint"] and out["stages"]):  # else the whole run would go ahead, for real
        raise ConfigError("llm.dry_run (--llm-dry-run): no model stage is configured, so there is nothing to show; "
                          "give llm.endpoint (--llm-endpoint), llm.model (--llm-model) and at least one of llm.stages")
    return out


def check_stage_names(llm: dict[str, Any]) -> None:
    """Each ``llm.stages`` entry is a built-in or registered name, or a ``"module:attribute"`` path (which
    `check_stages` resolves)."""
    for name in llm["stages"]:
        if name not in _REGISTRY and ":" not in name:
            raise ConfigError(f"llm.stages: unknown stage {name!r}; known: {', '.join(sorted(_REGISTRY))}")


def llm_enabled(cfg: dict[str, Any]) -> bool:
    llm = cfg.get("llm")
    return bool(llm and llm.get("endpoint") and llm.get("stages"))


def register_stage(name: str, target: str) -> None:
    """Make a stage available to ``llm.stages`` in this process; `target` is ``"module:attribute"``.

    Ray workers are other processes: there, name a stage that is not built in by its
    ``"module:attribute"`` path in ``llm.stages`` instead.
    """
    _REGISTRY[name] = target


def get_stage(name: str):
    """The stage object of an ``llm.stages`` entry: a built-in or registered name, or ``"module:attribute"``. A
    name that resolves to nothing is a `ConfigError` saying why (no such module, an import that fails, no such
    attribute)."""
    target = _REGISTRY.get(name) or _BUILTIN.get(name) or (name if ":" in name else None)
    if target is None:
        raise ConfigError(f"unknown llm stage {name!r}")
    module, _, attr = target.partition(":")
    if not module or not attr or ":" in attr:
        raise ConfigError(f"{target!r} is not a \"module:attribute\" path")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"cannot import module {module!r}: {exc}") from None
    except Exception as exc:  # the module's own code failed as it was imported: whatever it raised is the reason
        raise ConfigError(f"importing module {module!r} failed: {type(exc).__name__}: {exc}") from None
    if not hasattr(loaded, attr):
        raise ConfigError(f"module {module!r} has no attribute {attr!r}")
    return getattr(loaded, attr)


STAGE_METHODS = ("wants", "process", "dry_requests", "apply")


def stage_problem(stage: Any) -> str:
    """What keeps `stage` from being run as a model-in-the-loop stage (`stages.llm.stage.LLMStage`), or ``""``: a
    ``name`` that can name its output folder, a pyarrow ``schema`` with ``traj_id`` and without ``occurrence``
    (which lwm adds), and the four methods."""
    import pyarrow as pa

    lacking = [a for a in ("name", "schema") if not hasattr(stage, a)]
    lacking += [m for m in STAGE_METHODS if not callable(getattr(stage, m, None))]
    if lacking:
        return f"it lacks {', '.join(lacking)} (what a stage has: stages/llm/stage.py)"
    name, schema = stage.name, stage.schema
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        return f"its name must be a string that can name a folder, not {name!r}"
    if not isinstance(schema, pa.Schema):
        return f"its schema must be a pyarrow.Schema, not {type(schema).__name__}"
    if "traj_id" not in schema.names:
        return "its schema has no 'traj_id' column, which names the trajectory of each row"
    if "occurrence" in schema.names:
        return ("its schema has a column 'occurrence', which lwm adds to every stage's rows (which trajectory of "
                "those sharing a traj_id a row belongs to); rename it")
    return ""


def check_stages(llm: dict[str, Any]) -> None:
    """Every ``llm.stages`` entry resolves to an object a run can use (`stage_problem`): one `ConfigError` line
    naming the key, the entry and what is wrong, before any work, instead of an error once ingest has run."""
    for entry in llm["stages"]:
        try:
            stage = get_stage(entry)
        except ConfigError as exc:
            raise ConfigError(f"llm.stages: {entry!r}: {exc}") from None
        if problem := stage_problem(stage):
            raise ConfigError(f"llm.stages: {entry!r} is not a stage: {problem}")


def output_llm_config(llm: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in llm.items() if k not in LLM_EXECUTION_KEYS}
