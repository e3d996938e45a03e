"""Which n-gram keys an evaluation record holds, as a bitmap: what lets the dedup map leave out the n-gram rows
no decontamination check can read.

An n-gram group (the rows of one n-gram key in the reduce) counts for decontamination only through its
evaluation members: a record's total counts its own specific n-grams, and a (training, evaluation) pair shares
a group only when the group has an evaluation member. A group of training members only is sorted, sized and
dropped. So a training trajectory's n-gram row is needed exactly when some evaluation record (the run's eval
pool, or a reference) holds the same key; every row of such a key is kept, so the groups that count, and
their sizes (what decides whether an n-gram is specific), are the same as without the filter.

The bitmap is indexed by the top bits of the key's first 64-bit half (the bucket of a row is that half modulo
the bucket count, its low bits). It answers "maybe" for every key put in and for a small share of the others
(about one in 32 with `BITS_PER_KEY`); a "maybe" only keeps a row that the reduce drops, so the filter never
changes a verdict, only how many rows reach the reduce.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

BITS_PER_KEY = 32  # a false "maybe" for about 1 - exp(-1/32) ≈ 3% of the keys not put in
MIN_BITS, MAX_BITS = 16, 29  # 8 KiB … 64 MiB of bitmap
_BITS_SET = np.array([bin(b).count("1") for b in range(256)], dtype=np.uint8)  # per byte value (NumPy 1 has no bitwise_count)


def filter_bits(keys: int) -> int:
    """log2 of the bitmap size for about `keys` distinct keys (bounded by `MIN_BITS` and `MAX_BITS`)."""
    want = max(1, keys) * BITS_PER_KEY
    return int(min(MAX_BITS, max(MIN_BITS, (want - 1).bit_length())))


class GramFilter:
    """A bitmap of 2**bits bits over the top bits of 64-bit keys: no false "no", a few false "maybe"."""

    def __init__(self, bits: int, keys: Iterable[np.ndarray] = ()) -> None:
        if not MIN_BITS <= bits <= MAX_BITS:
            raise ValueError(f"bits must be within [{MIN_BITS}, {MAX_BITS}], not {bits}")
        self.bits = bits
        self._shift = np.uint64(64 - bits)
        self.bitmap = np.zeros(1 << (bits - 3), dtype=np.uint8)
        for part in keys:
            self.add(part)

    @classmethod
    def of_bitmap(cls, bits: int, bitmap: bytes) -> GramFilter:
        """The filter whose bitmap (``bitmap.tobytes()`` of a filter of `bits`) is `bitmap`."""
        grams = cls(bits)
        if len(bitmap) != len(grams.bitmap):
            raise ValueError(f"a bitmap of {bits} bits has {len(grams.bitmap)} bytes, not {len(bitmap)}")
        grams.bitmap = np.frombuffer(bitmap, dtype=np.uint8)
        return grams

    def _positions(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = np.asarray(keys, dtype=np.uint64) >> self._shift
        return (at >> np.uint64(3)).astype(np.intp), np.left_shift(np.uint8(1), (at & np.uint64(7)).astype(np.uint8))

    def add(self, keys: np.ndarray) -> None:
        byte, bit = self._positions(keys)
        np.bitwise_or.at(self.bitmap, byte, bit)

    def fill(self) -> float:
        """The share of bits set: about the share of keys never added that `holds` answers "maybe" for."""
        return int(_BITS_SET[self.bitmap].sum(dtype=np.int64)) / (8 * len(self.bitmap))

    def holds(self, keys: np.ndarray) -> np.ndarray:
        """Per key, whether it may have been added (True for every key that was)."""
        byte, bit = self._positions(keys)
        return (self.bitmap[byte] & bit) != 0
