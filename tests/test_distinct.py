"""Distinct integers by sorting: the same arrays as `np.unique`, whatever the values and their repeats."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from stages.distinct import distinct, distinct_first

# Few distinct values (many repeats, as pair codes have) and values spread over the whole range (as hashes).
_ARRAYS = st.one_of(
    hnp.arrays(np.int64, st.integers(0, 300), elements=st.integers(-3, 3)),
    hnp.arrays(np.int64, st.integers(0, 300)),
    hnp.arrays(np.uint64, st.integers(0, 300)),
    hnp.arrays(np.int32, st.integers(0, 300), elements=st.integers(0, 40)),
)


@settings(max_examples=300, deadline=None)
@given(_ARRAYS)
def test_distinct_is_numpys_unique(values):
    got, want = distinct(values), np.unique(values)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)


@settings(max_examples=300, deadline=None)
@given(_ARRAYS)
def test_distinct_first_gives_numpys_first_occurrences(values):
    got, at = distinct_first(values)
    want, want_at = np.unique(values, return_index=True)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)
    assert np.array_equal(at, want_at)


def test_the_first_occurrence_is_found_among_many_equal_values():
    # an unstable sort puts equal values in any order; the least position of each run is the first
    values = np.array([5, 1, 5, 5, 1, 9, 5, 1] * 500, dtype=np.int64)
    got, at = distinct_first(values)
    assert got.tolist() == [1, 5, 9]
    assert at.tolist() == [1, 0, 5]


def test_the_input_is_left_as_it_was():
    values = np.array([3, 1, 2, 1], dtype=np.int64)
    distinct(values)
    distinct_first(values)
    assert values.tolist() == [3, 1, 2, 1]
