"""The bitmap of evaluation n-gram keys that lets the dedup map leave out rows no decontamination check reads."""

from __future__ import annotations

import numpy as np
import pytest

from stages.gram_filter import BITS_PER_KEY, MAX_BITS, MIN_BITS, GramFilter, filter_bits


@pytest.mark.parametrize("count", [1, 1_000, 200_000])
def test_every_key_put_in_is_held_and_few_others(count):
    rng = np.random.default_rng(count)
    keys = rng.integers(0, np.iinfo(np.uint64).max, count, dtype=np.uint64, endpoint=True)
    grams = GramFilter(filter_bits(count), np.array_split(keys, 3))
    assert grams.holds(keys).all()
    others = rng.integers(0, np.iinfo(np.uint64).max, 200_000, dtype=np.uint64, endpoint=True)
    others = others[~np.isin(others, keys)]
    # one bit per key in a bitmap of at least BITS_PER_KEY bits per key: about 1/32 of the others, never 2/32
    assert grams.holds(others).mean() < 2 / BITS_PER_KEY


def test_keys_that_differ_only_in_low_bits_share_a_bit():
    """The bitmap reads the top bits: the low bits choose the bucket, so they must not choose the bit too."""
    grams = GramFilter(MIN_BITS, [np.array([0xABCD << 48], np.uint64)])
    assert grams.holds(np.array([(0xABCD << 48) | 0xFFFF, (0xABCE << 48)], np.uint64)).tolist() == [True, False]


def test_an_empty_filter_holds_nothing():
    grams = GramFilter(MIN_BITS)
    assert not grams.holds(np.array([0, 1, 2**63], np.uint64)).any()
    assert grams.holds(np.zeros(0, np.uint64)).shape == (0,)


def test_bitmap_size_follows_the_key_count_within_bounds():
    assert filter_bits(0) == filter_bits(1) == MIN_BITS
    assert filter_bits(100_000) == 22  # 3.2 million bits, the next power of two
    assert 2 ** filter_bits(100_000) >= BITS_PER_KEY * 100_000 > 2 ** (filter_bits(100_000) - 1)
    assert filter_bits(10**12) == MAX_BITS
    with pytest.raises(ValueError):
        GramFilter(MAX_BITS + 1)


def test_a_filter_written_as_bytes_reads_back_the_same():
    keys = np.random.default_rng(2).integers(0, np.iinfo(np.uint64).max, 5_000, dtype=np.uint64, endpoint=True)
    grams = GramFilter(filter_bits(len(keys)), [keys])
    again = GramFilter.of_bitmap(grams.bits, grams.bitmap.tobytes())
    probe = np.concatenate([keys, keys ^ np.uint64(1 << 63)])
    assert np.array_equal(again.holds(probe), grams.holds(probe)) and again.holds(keys).all()
    with pytest.raises(ValueError, match="bytes"):
        GramFilter.of_bitmap(grams.bits + 1, grams.bitmap.tobytes())


def test_fill_is_the_share_of_bits_set():
    grams = GramFilter(MIN_BITS)
    assert grams.fill() == 0.0
    keys = np.arange(1000, dtype=np.uint64) << np.uint64(64 - MIN_BITS)  # 1,000 distinct top bits
    grams.add(keys)
    assert grams.fill() == 1000 / 2**MIN_BITS == np.unpackbits(grams.bitmap).mean()
