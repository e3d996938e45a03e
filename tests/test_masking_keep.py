"""Keep modes: weight/turn/token weights, determinism from stable hashes, and kept fractions."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from masking.keep import (
    KEEP_MODES,
    check_keep_mode,
    masking_key,
    same_weight,
    token_draws,
    token_weights,
    turn_draw,
    turn_weight,
)
from schemas.errors import ConfigError

KEYS = [masking_key(0, f"traj-{i:05d}", i % 7 + 1) for i in range(4000)]


def _within_sampling_error(kept: int, n: int, keep: float) -> bool:
    sigma = math.sqrt(n * keep * (1 - keep))
    return abs(kept - n * keep) <= 4 * sigma


def test_weight_mode_gives_every_token_the_keep_ratio():
    assert turn_weight(0.1, "weight", "k") == 0.1
    assert token_weights(0.1, "weight", "k", 5) == [0.1] * 5
    assert token_weights(0.5, "weight", "k", 0) == []


def test_turn_mode_is_all_or_nothing_per_turn():
    for key in KEYS[:50]:
        weights = token_weights(0.5, "turn", key, 9)
        assert weights in ([1.0] * 9, [0.0] * 9)
        assert weights[0] == turn_weight(0.5, "turn", key)


def test_token_mode_has_no_single_turn_weight():
    assert turn_weight(0.5, "token", "k") is None


@pytest.mark.parametrize("mode", ["turn", "token"])
def test_random_modes_are_deterministic_per_key(mode):
    for key in KEYS[:20]:
        assert token_weights(0.3, mode, key, 40) == token_weights(0.3, mode, key, 40)


def test_turn_mode_differs_across_keys():
    decisions = [turn_weight(0.5, "turn", key) for key in KEYS[:100]]
    assert set(decisions) == {0.0, 1.0}


def test_token_mode_differs_across_keys():
    masks = {tuple(token_weights(0.5, "token", key, 64)) for key in KEYS[:100]}
    assert len(masks) == 100


def test_seed_changes_the_draws():
    assert turn_draw(masking_key(0, "traj", 3)) != turn_draw(masking_key(1, "traj", 3))
    assert token_draws(masking_key(0, "traj", 3), 8) != token_draws(masking_key(1, "traj", 3), 8)


@pytest.mark.parametrize("keep", [0.05, 0.1, 0.5, 0.9])
def test_turn_mode_kept_fraction_matches_keep(keep):
    kept = sum(turn_weight(keep, "turn", key) for key in KEYS)
    assert _within_sampling_error(int(kept), len(KEYS), keep)


@pytest.mark.parametrize("keep", [0.05, 0.1, 0.5, 0.9])
def test_token_mode_kept_fraction_matches_keep(keep):
    n = 50
    kept = sum(sum(token_weights(keep, "token", key, n)) for key in KEYS[:400])
    assert _within_sampling_error(int(kept), 400 * n, keep)


def test_token_mode_keeps_about_keep_within_one_long_turn():
    weights = token_weights(0.1, "token", "one long observation", 20_000)
    assert _within_sampling_error(int(sum(weights)), 20_000, 0.1)


@pytest.mark.parametrize("mode", ["turn", "token"])
def test_keep_one_keeps_all_and_keep_zero_keeps_none(mode):
    for key in KEYS[:50]:
        assert token_weights(1.0, mode, key, 7) == [1.0] * 7
        assert token_weights(0.0, mode, key, 7) == [0.0] * 7


def test_token_draws_do_not_depend_on_how_many_are_asked_for():
    key = masking_key(0, "traj", 2)
    assert token_draws(key, 10) == token_draws(key, 1000)[:10]
    assert token_weights(0.3, "token", key, 10) == token_weights(0.3, "token", key, 1000)[:10]


@given(st.text(max_size=40), st.floats(min_value=0, max_value=1), st.integers(min_value=0, max_value=64))
def test_token_weights_are_draws_below_keep(key, keep, n):
    weights = token_weights(keep, "token", key, n)
    draws = token_draws(key, n)
    assert all(0.0 <= u < 1.0 for u in draws)
    assert weights == [1.0 if u < keep else 0.0 for u in draws]


@given(st.text(max_size=40), st.floats(min_value=0, max_value=1))
def test_turn_weight_is_the_draw_below_keep(key, keep):
    u = turn_draw(key)
    assert 0.0 <= u < 1.0
    assert turn_weight(keep, "turn", key) == (1.0 if u < keep else 0.0)


def test_draws_are_pinned():
    # The hash scheme is part of the determinism contract: these values may only change on purpose.
    key = masking_key(0, "traj", 1)
    assert key == "0\x1ftraj\x1f1"
    assert turn_draw(key) == 0.13232255696253414
    assert token_draws(key, 3) == [0.2082882194225375, 0.6239670577116999, 0.22352236913194135]


def test_unknown_mode_is_a_config_error():
    assert check_keep_mode("turn") == "turn"
    assert KEEP_MODES == ("weight", "turn", "token")
    with pytest.raises(ConfigError, match=r"unknown keep mode 'tokens' \(expected one of weight, turn, token\)"):
        token_weights(0.5, "tokens", "k", 3)


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="keep must be in"):
        turn_weight(1.5, "weight", "k")
    with pytest.raises(ValueError, match="n_tokens"):
        token_weights(0.5, "token", "k", -1)


@given(st.sampled_from(KEEP_MODES), st.sampled_from([0.0, -0.0, 1.0, 0.05, 0.3, 0.999]), st.sampled_from(KEYS[:50]),
       st.integers(0, 40))
def test_same_weight_is_the_one_weight_token_weights_gives_every_token(mode, keep, key, n):
    """The samples' fast path (one weight for the turn, no list of it) agrees with `token_weights`."""
    weight = same_weight(keep, mode, key)
    weights = token_weights(keep, mode, key, n)
    if weight is None:  # only per-token draws, which differ between tokens
        assert mode == "token" and 0.0 < keep < 1.0
    else:
        assert weights == [weight] * n
        assert all(math.copysign(1.0, w) == math.copysign(1.0, weight) for w in weights)  # -0.0 kept as it is
