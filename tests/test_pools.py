"""Pools, turn choice and template choice: disjoint, stable, and with the paper's proportions."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from stages.pools import POOLS, choose_template, choose_turns, eval_turns, pool_of, sample_id

RATIOS = {"cpt": 0.80, "sft": 0.10, "rl": 0.05, "eval": 0.05}


def test_ratios_within_sampling_error():
    n = 20000
    counts = Counter(pool_of(f"task-{i}", RATIOS) for i in range(n))
    for pool, share in RATIOS.items():
        sigma = (share * (1 - share) / n) ** 0.5
        assert abs(counts[pool] / n - share) < 4 * sigma, (pool, counts[pool])


def test_pool_depends_only_on_split_key():
    keys = [f"k{i}" for i in range(500)]
    first = {k: pool_of(k, RATIOS) for k in keys}
    more = {k: pool_of(k, RATIOS) for k in keys + [f"other{i}" for i in range(500)]}
    assert all(more[k] == first[k] for k in keys)  # adding trajectories never moves one
    assert {pool_of("same", RATIOS) for _ in range(5)} == {pool_of("same", RATIOS)}


def test_disjoint_by_split_key():
    trajs = [(f"traj{i}", f"task{i // 3}") for i in range(3000)]  # three attempts per task
    pools_by_key: dict[str, set[str]] = {}
    for _, key in trajs:
        pools_by_key.setdefault(key, set()).add(pool_of(key, RATIOS))
    assert all(len(p) == 1 for p in pools_by_key.values())


def test_custom_ratios_and_zero_pools():
    only = {"cpt": 0.0, "sft": 1.0, "rl": 0.0, "eval": 0.0}
    assert {pool_of(f"x{i}", only) for i in range(200)} == {"sft"}


def test_eval_turn_choice():
    assert eval_turns(2) == [1, 2]
    assert eval_turns(5) == [1, 2, 3, 4, 5]
    assert eval_turns(6) == [1, 2, 4, 5, 6]
    assert eval_turns(37) == [1, 10, 19, 28, 37]
    assert eval_turns(1) == [1]


def test_eval_subsample_is_stable_and_about_half():
    picks = [choose_turns(f"t{i}", "eval", 37) for i in range(4000)]
    assert picks == [choose_turns(f"t{i}", "eval", 37) for i in range(4000)]
    kept = sum(len(p) for p in picks) / (5 * 4000)
    assert abs(kept - 0.5) < 0.03
    assert all(set(p) <= {1, 10, 19, 28, 37} for p in picks)


def test_rl_is_exactly_one_turn_and_sft_k():
    for i in range(300):
        t = 1 + i % 12
        rl = choose_turns(f"t{i}", "rl", t)
        assert len(rl) == 1 and 1 <= rl[0] <= t
        assert len(choose_turns(f"t{i}", "sft", t, sft_turns=3)) == min(3, t)
        assert choose_turns(f"t{i}", "sft", t, sft_turns="all") == list(range(1, t + 1))
    assert choose_turns("t", "cpt", 9) == []


def test_sft_template_choice_is_uniform_over_v2_to_v11():
    variants = [f"v{i}" for i in range(2, 12)]
    n = 10000
    counts = Counter(choose_template(f"traj-{i}", "sft", variants) for i in range(n))
    assert set(counts) == set(variants)
    expected = n / len(variants)
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 27.9  # 9 degrees of freedom, p = 0.001
    assert choose_template("x", "rl", ["v0"]) == "v0"


@given(st.text(min_size=1, max_size=40), st.sampled_from(POOLS), st.integers(0, 50))
def test_sample_ids_are_stable_and_distinct(traj_id, pool, turn):
    a = sample_id(traj_id, pool, turn, "v1")
    assert a == sample_id(traj_id, pool, turn, "v1")
    assert a != sample_id(traj_id, pool, turn + 1, "v1")
