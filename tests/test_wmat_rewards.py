"""WMAT rewards: R_ground, R_calib, R_WM, group normalization, advantage composition, framework wrappers."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stages.reward import wmat_frameworks
from stages.reward.wmat import (
    EPS,
    calibration_reward,
    compose_advantages,
    grounding_reward,
    group_normalize,
    keyword_hits,
    normalize_within,
    omega_for,
    span_token_advantages,
    world_model_reward,
)
from stages.reward.wmat_format import render_block, render_policy

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False)
words = st.text(alphabet="abcdefghij ", min_size=0, max_size=40)

FUTURE = ("Search results for \"wind turbine noise study\"\n[1] Wind turbine noise: field study\n"
          "A 2023 field study found results vary with temperature.")


# -- R_calib ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("q", "i", "expected"), [(1.0, 1, 1.0), (0.0, 1, 0.0), (0.5, 1, 0.75),
                                                   (0.0, 0, 0.0), (1.0, 0, -1.0), (0.3, 0, -0.09)])
def test_calibration_reward_values(q, i, expected):
    assert calibration_reward(q, i) == pytest.approx(expected)


@given(q=unit, correct=st.booleans())
def test_calibration_reward_bounds(q, correct):
    r = calibration_reward(q, correct)
    assert (0.0 <= r <= 1.0) if correct else (-1.0 <= r <= 0.0)


@given(a=unit, b=unit, correct=st.booleans())
def test_calibration_reward_falls_as_the_gap_to_the_outcome_grows(a, b, correct):
    i = 1.0 if correct else 0.0
    gap_a, gap_b = abs(a - i), abs(b - i)
    ra, rb = calibration_reward(a, correct), calibration_reward(b, correct)
    if gap_a < gap_b:
        assert ra >= rb
        if gap_b - gap_a > 1e-6:
            assert ra > rb
    elif gap_a == gap_b:
        assert ra == pytest.approx(rb)


@given(q=unit, correct=st.booleans())
def test_missing_confidence_scores_no_better_than_any_stated_one(q, correct):
    missing = calibration_reward(None, correct)
    assert missing == (0.0 if correct else -1.0)
    assert missing <= calibration_reward(q, correct)


# -- R_ground -----------------------------------------------------------------------------------


def test_keyword_hits_need_whole_words_in_a_contiguous_run():
    assert keyword_hits(["field study", "Wind Turbine", "study found", "turb", "temperature study", "", "2023"],
                        FUTURE) == [True, True, True, False, False, False, True]


def test_grounding_reward_is_the_share_of_keywords_in_the_future():
    assert grounding_reward(["wind turbine", "temperature", "humidity", "Lyon"], FUTURE) == pytest.approx(0.5)
    assert grounding_reward([], FUTURE) == 0.0
    # a single safe keyword is diluted by min_keywords; guesses past max_keywords do not count
    assert grounding_reward(["noise"], FUTURE, min_keywords=3) == pytest.approx(1 / 3)
    assert grounding_reward(["noise", "x1", "x2", "study"], FUTURE, max_keywords=2) == pytest.approx(0.5)


@given(kws=st.lists(words, max_size=12), future=words)
def test_grounding_reward_bounds(kws, future):
    assert 0.0 <= grounding_reward(kws, future) <= 1.0


@given(kws=st.lists(words, min_size=1, max_size=8), future=words, extra=words)
def test_grounding_reward_never_falls_when_the_future_grows(kws, future, extra):
    assert grounding_reward(kws, future + "\n" + extra) >= grounding_reward(kws, future)


# -- R_WM ---------------------------------------------------------------------------------------


def _output(keywords, q):
    return render_block("Open a result and read it.", keywords, "No page open yet.", q) + "\n" + \
        render_policy("", '{"action": "click", "id": 1}')


def test_world_model_reward_adds_calibration_and_grounding():
    r = world_model_reward(_output(["field study", "Lyon"], 0.8), FUTURE, correct=True)
    assert r.format_ok and r.confidence == pytest.approx(0.8)
    assert r.r_ground == pytest.approx(0.5)
    assert r.r_calib == pytest.approx(1 - 0.2**2)
    assert r.r_wm == pytest.approx(0.5 + 0.96)


def test_malformed_output_gets_no_grounding_and_the_worst_calibration():
    text = _output(["field study"], 0.8).replace("<confidence>80%</confidence>", "")
    r = world_model_reward(text, FUTURE, correct=False)
    assert not r.format_ok and r.format_reason == "missing_tag:confidence"
    assert (r.r_ground, r.r_calib, r.r_wm) == (0.0, -1.0, -1.0)


@given(kws=st.lists(st.text(alphabet="abcdef ", min_size=1, max_size=12), min_size=1, max_size=6),
       q=st.integers(min_value=0, max_value=100), correct=st.booleans(), future=words)
def test_world_model_reward_bounds(kws, q, correct, future):
    assume(any(k.strip() for k in kws))
    r = world_model_reward(_output([k.strip() for k in kws if k.strip()], q / 100), future, correct)
    assert r.format_ok
    assert -1.0 <= r.r_wm <= 2.0
    assert r.r_wm == pytest.approx(r.r_calib + r.r_ground)


# -- group normalization ------------------------------------------------------------------------


@given(st.lists(finite, min_size=2, max_size=32))
def test_group_normalization_has_zero_mean_unit_scale_and_keeps_order(values):
    z = group_normalize(values)
    assert len(z) == len(values)
    std = statistics.pstdev(values)
    if std <= EPS * max(1.0, abs(statistics.fmean(values))):
        assert z == [0.0] * len(values)
        return
    assert abs(statistics.fmean(z)) < 1e-6
    assert statistics.pstdev(z) == pytest.approx(std / (std + EPS), rel=1e-6)
    for i in range(len(values)):
        for j in range(len(values)):
            if values[i] < values[j]:
                assert z[i] <= z[j]  # strictly less up to float rounding of tiny gaps


@given(st.lists(finite, min_size=2, max_size=16), st.floats(min_value=0.5, max_value=10), finite)
def test_group_normalization_ignores_shift_and_positive_scale(values, scale, shift):
    assume(statistics.pstdev(values) > 1e-2)
    a = group_normalize(values)
    b = group_normalize([scale * v + shift for v in values])
    # exact but for eps: z − z' ≈ z · (eps / std) · (1/scale − 1), at most 1e-4 · |z| here, and |z| ≤ √(n − 1) < 4
    assert a == pytest.approx(b, abs=4e-4)
    assert a == pytest.approx(b, abs=1.01e-4 * max(1.0, max(map(abs, a))))


@given(st.floats(min_value=-100, max_value=100, allow_nan=False), st.integers(min_value=1, max_value=10))
def test_a_group_of_equal_rewards_has_no_advantage(value, n):
    assert group_normalize([value] * n) == [0.0] * n


def test_normalize_within_keeps_groups_apart_and_skips_missing():
    z = normalize_within([1.0, 3.0, None, 10.0, 10.0, 0.0], ["a", "a", "a", "b", "b", "b"])
    assert z[0] == pytest.approx(-1.0, abs=1e-5) and z[1] == pytest.approx(1.0, abs=1e-5)
    assert z[2] == 0.0
    assert z[3] == z[4] > 0 > z[5]


# -- advantage composition ----------------------------------------------------------------------


def test_policy_advantage_is_episode_advantage_plus_omega_times_confidence_advantage():
    episode = [1.0, 0.0, 1.0, 0.0]
    wm = [1.5, -0.5, 0.2, -1.0]
    conf = [0.9, 0.1, 0.5, 0.5]
    out = compose_advantages(episode, wm, conf, omega=0.2)
    a_e, a_s, a_wm = group_normalize(episode), group_normalize(conf), group_normalize(wm)
    for k, adv in enumerate(out):
        assert adv.world_model == pytest.approx(a_wm[k])
        assert adv.policy == pytest.approx(a_e[k] + 0.2 * a_s[k])
    # hand-computed: episode ±1 → A_E = ±1/(1+eps); confidences mean 0.5, pstdev sqrt(0.08)
    s = math.sqrt(0.08)
    assert out[0].policy == pytest.approx(1 + 0.2 * 0.4 / s, rel=1e-4)
    assert out[1].policy == pytest.approx(-1 - 0.2 * 0.4 / s, rel=1e-4)
    assert out[2].policy == pytest.approx(1.0, rel=1e-4)


def test_confidence_is_normalized_within_its_step_group():
    out = compose_advantages([0, 0, 0, 0], [0, 0, 0, 0], [0.2, 0.4, 0.6, 0.9], step_groups=[1, 1, 2, 2], omega=0.1)
    assert [a.policy for a in out] == pytest.approx([-0.1, 0.1, -0.1, 0.1], abs=1e-4)
    assert all(a.world_model == 0.0 for a in out)


@given(st.lists(st.tuples(unit, finite, st.one_of(st.none(), unit)), min_size=1, max_size=16),
       st.floats(min_value=0, max_value=1))
def test_advantages_of_a_group_sum_to_zero_per_span(rows, omega):
    episode, wm, conf = (list(c) for c in zip(*rows))
    out = compose_advantages(episode, wm, conf, omega=omega)
    assert abs(sum(a.world_model for a in out)) < 1e-6 * len(out)
    assert abs(sum(a.policy for a in out)) < 1e-6 * len(out)


def test_omega_follows_the_recipe():
    assert omega_for("search") == 0.2 and omega_for("math") == 0.1


def test_span_token_advantages_place_each_advantage_on_its_span():
    adv = compose_advantages([1, 0], [1, 0], [0.9, 0.1])[0]
    vec = span_token_advantages(10, (1, 4), (5, 9), adv)
    assert vec[0] == vec[4] == vec[9] == 0.0
    assert set(vec[1:4]) == {adv.world_model} and set(vec[5:9]) == {adv.policy}


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError):
        compose_advantages([1.0, 0.0], [1.0], [0.5, 0.5])


# -- framework signatures -----------------------------------------------------------------------


def test_verl_compute_score_returns_r_wm_and_parts():
    text = _output(["field study", "Lyon"], 0.8)
    got = wmat_frameworks.compute_score("lwm/search", text, FUTURE, {"correct": True})
    assert got["score"] == pytest.approx(0.5 + 0.96)
    assert got["r_ground"] == pytest.approx(0.5) and got["format_ok"] == 1.0
    as_dict = wmat_frameworks.compute_score("lwm/search", text, {"future": FUTURE, "correct": 0})
    assert as_dict["r_calib"] == pytest.approx(-0.64)
    with pytest.raises(ValueError, match="correct"):
        wmat_frameworks.compute_score("lwm/search", text, FUTURE, {})


def test_trl_reward_scores_string_and_conversational_completions():
    text = _output(["field study"], 1.0)
    rewards = wmat_frameworks.trl_reward(
        ["p1", [{"role": "user", "content": "p2"}]],
        [text, [{"role": "assistant", "content": "not in format"}]],
        future=[FUTURE, FUTURE], correct=[True, False], max_keywords=4,
    )
    assert rewards == pytest.approx([2.0, -1.0])


@settings(max_examples=25)
@given(q=st.integers(min_value=0, max_value=100))
def test_wrappers_agree_with_the_core(q):
    text = _output(["wind turbine", "humidity"], q / 100)
    core = world_model_reward(text, FUTURE, True).r_wm
    assert wmat_frameworks.compute_score("x", text, FUTURE, {"correct": "true"})["score"] == core
    assert wmat_frameworks.trl_reward(["p"], [text], [FUTURE], [1]) == [core]


def test_no_output_at_all_is_a_malformed_one_in_every_framework_entry():
    from stages.reward.wmat import calibration_reward, world_model_reward
    from stages.reward.wmat_frameworks import compute_score, trl_reward

    for correct in (0, 1):
        expected = calibration_reward(None, correct)  # R_ground 0, the missing-q R_calib
        r = world_model_reward(None, "the future", correct)
        assert (r.r_wm, r.r_ground, r.format_ok) == (expected, 0.0, False)
        assert compute_score("search", None, {"future": "the future", "correct": correct})["score"] == expected
        completions = [None, [{"role": "assistant", "content": None}], 5]
        assert trl_reward([""] * 3, completions, ["the future"] * 3, [correct] * 3) == [expected] * 3
