"""The four statistics: hand-counted examples, the empty-set rules, and their ranges."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from masking.stats import TurnStats, stats_from_word_sets, turn_stats


def test_hand_counted_example():
    # A = {cat, notes, txt}; O = {hello, from, notes}; A∩O = {notes}; A∪O has 5 words.
    stats = turn_stats("cat notes.txt", "hello from notes")
    assert stats.ol == pytest.approx(1 / 3)
    assert stats.nov == pytest.approx(2 / 3)
    assert stats.jac == pytest.approx(1 / 5)
    assert stats.r == pytest.approx(16 / 13)
    assert stats.obs_chars == 16


def test_words_are_compared_as_lowercased_sets():
    # A = {echo, hello}; O = {hello}: repetition and case do not count.
    stats = turn_stats("echo HELLO", "hello Hello hello")
    assert (stats.ol, stats.nov, stats.jac) == (0.5, 0.0, 0.5)


def test_ratio_counts_characters_not_bytes():
    assert turn_stats("ab", "日本").r == 1.0


def test_empty_action():
    stats = turn_stats("", "hello world")
    assert stats == TurnStats(ol=0.0, nov=1.0, jac=0.0, r=11.0, obs_chars=11)


def test_empty_observation():
    stats = turn_stats("ls -la", "")
    assert stats == TurnStats(ol=0.0, nov=0.0, jac=0.0, r=0.0, obs_chars=0)


def test_both_empty():
    assert turn_stats("", "") == TurnStats(ol=0.0, nov=0.0, jac=0.0, r=0.0, obs_chars=0)


def test_punctuation_only_action_has_no_words_but_a_length():
    # "{}" has an empty word set (OL = 0) but two characters (R is the plain ratio, not len(obs)).
    stats = turn_stats("{}", "ok")
    assert stats == TurnStats(ol=0.0, nov=1.0, jac=0.0, r=1.0, obs_chars=2)


def test_punctuation_only_observation_counts_as_no_new_words():
    stats = turn_stats("ls", "[]")
    assert stats == TurnStats(ol=0.0, nov=0.0, jac=0.0, r=1.0, obs_chars=2)


def test_full_echo():
    stats = turn_stats('{"thought": "check the logs"}', '{"thought": "check the logs"}')
    assert (stats.ol, stats.nov, stats.jac, stats.r) == (1.0, 0.0, 1.0, 1.0)


def test_as_row_is_the_shard_struct():
    stats = turn_stats("cat a", "b")
    assert stats.as_row() == {"ol": stats.ol, "nov": stats.nov, "jac": stats.jac, "r": stats.r}


@given(st.text(max_size=200), st.text(max_size=200))
def test_statistics_ranges_and_identities(action, observation):
    stats = turn_stats(action, observation)
    for value in (stats.ol, stats.nov, stats.jac):
        assert 0.0 <= value <= 1.0
    assert stats.r >= 0.0
    # |A∩O|/|A∪O| can exceed neither |A∩O|/|A| nor |A∩O|/|O| = 1 - Nov.
    assert stats.jac <= stats.ol + 1e-12
    assert stats.jac <= 1.0 - stats.nov + 1e-12
    if action and observation:
        assert stats.r == len(observation) / len(action)
    assert stats.obs_chars == len(observation)


def test_stats_from_precomputed_word_sets():
    # A = {a, b}, O = {b, c, d}: common 1, union 4; lengths are given, not derived from the sets.
    stats = stats_from_word_sets(frozenset({"a", "b"}), frozenset({"b", "c", "d"}), act_chars=3, obs_chars=30)
    assert stats == TurnStats(ol=0.5, nov=2 / 3, jac=0.25, r=10.0, obs_chars=30)
