"""Run configuration: defaults, unknown keys, bad values, hashing."""

from __future__ import annotations

import pytest

from pipeline.config import config_hash, parse_opt, resolve
from pipeline.ray_executor import RECYCLE_BYTES, RayExecutor
from schemas.errors import ConfigError


def test_defaults_resolve_and_hash_ignores_execution_keys():
    a = resolve()
    b = resolve(overrides={"executor": {"kind": "local", "num_cpus": 3}, "run": {"out": "/elsewhere"}})
    assert config_hash(a) == config_hash(b)
    c = resolve(overrides={"pools": {"sft_turns": "all"}})
    assert config_hash(a) != config_hash(c)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"run": {"nope": 1}}, "unknown config key 'run.nope'"),
        ({"pools": {"ratios": {"cpt": 1.0, "dev": 0.1}}}, "unknown pool 'dev'"),
        ({"pools": {"sft_turns": 0}}, "sft_turns"),
        ({"run": {"max_quarantine_rate": 2}}, "max_quarantine_rate"),
        ({"executor": {"max_tasks_per_worker": -1}}, "max_tasks_per_worker"),
        ({"executor": {"max_tasks_per_worker": "sometimes"}}, "max_tasks_per_worker"),
        ({"render": {"chat_format": "llama"}}, "chat_format"),
    ],
)
def test_bad_values_are_one_clear_error(override, message):
    with pytest.raises(ConfigError, match=message):
        resolve(overrides=override)


def test_parse_opt_types_values():
    assert parse_opt(["a=1", "b=true", "c=x.y.-1", "d=[1, 2]"]) == {"a": 1, "b": True, "c": "x.y.-1", "d": [1, 2]}
    with pytest.raises(ConfigError):
        parse_opt(["novalue"])


def test_auto_worker_recycling_follows_input_size():
    ex = RayExecutor.__new__(RayExecutor)  # no Ray needed for the decision itself
    ex._auto, ex.max_tasks_per_worker = True, 0
    ex.plan_for_input(RECYCLE_BYTES - 1)
    assert ex.max_tasks_per_worker == 0
    ex.plan_for_input(RECYCLE_BYTES)
    assert ex.max_tasks_per_worker == 1
    ex._auto, ex.max_tasks_per_worker = False, 5
    ex.plan_for_input(10 * RECYCLE_BYTES)
    assert ex.max_tasks_per_worker == 5
