"""Who reads which rows, in which order: the pure arithmetic behind `ShardDataset` (no I/O, no torch).

An epoch is one pass over every row of every shard file. Its order is built in three steps,
all functions of (seed, epoch) and the file listing only:

1. the row groups are permuted (or kept in file order when shuffling is off) and their rows
   concatenated into one *epoch row space* ``0 … N-1``;
2. the space is cut into ``world_size`` contiguous blocks whose sizes differ by at most one;
   rank ``r`` owns block ``r``. Every row belongs to exactly one block, so nothing is read twice
   or skipped, and a rank reads only the row groups that overlap its block;
3. inside its block a rank yields rows in a *bounded-displacement* shuffled order: row ``i``
   gets the key ``i + B·u`` with ``u`` uniform in [0, 1) and rows are sorted by key, so no row
   moves more than ``B`` (the shuffle buffer) places. A reader therefore never holds more than
   about ``2B`` decoded rows, and resuming at sample ``k`` needs only rows from ``k − B`` on.

A rank's *stream* is its block's order of epoch 0, then of epoch 1, and so on; stream position
``g = epoch · k + index`` for a block of ``k`` rows. Its dataloader workers deal the stream out
among themselves (`worker_indices`): a loader started at position ``s`` gives worker ``w`` of
``W`` the positions ``s + w, s + w + W, …``, and since the loader takes its workers in turn it
yields ``s, s + 1, s + 2, …`` — the very stream the rank yields without workers. So every row
of the block comes exactly once per epoch of the stream with any number of workers. (Workers
that each owned a block of their own would not do that: the loader takes as many samples from
each, so the rows of a smaller block would come round more often.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Mixed into every seed so the streams of the three random choices never coincide.
_GROUP_ORDER_STREAM = 0x5EED_0001
_ROW_ORDER_STREAM = 0x5EED_0002


@dataclass(frozen=True)
class Segment:
    """Rows ``[row_lo, row_hi)`` of the row group at `group` (an index into the row-group list)."""

    group: int
    row_lo: int
    row_hi: int
    first_local: int  # index of row_lo within the rank's block


def row_group_order(num_groups: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The order in which the row groups are laid out in the epoch row space."""
    if not shuffle:
        return np.arange(num_groups)
    rng = np.random.default_rng([seed, epoch, _GROUP_ORDER_STREAM])
    return rng.permutation(num_groups)


def rank_block(total_rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """The half-open range of the epoch row space owned by `rank` (sizes differ by at most one)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside 0..{world_size - 1}")
    return rank * total_rows // world_size, (rank + 1) * total_rows // world_size


def block_segments(group_sizes: Sequence[int], order: Sequence[int], start: int, stop: int) -> list[Segment]:
    """The pieces of row groups, in epoch order, that make up epoch rows ``[start, stop)``."""
    segments: list[Segment] = []
    offset = 0
    for group in order:
        size = int(group_sizes[group])
        lo, hi = max(start, offset), min(stop, offset + size)
        if lo < hi:
            segments.append(Segment(int(group), lo - offset, hi - offset, lo - start))
        offset += size
        if offset >= stop:
            break
    return segments


def local_order(num_rows: int, shuffle_buffer: int, seed: int, epoch: int, rank: int) -> np.ndarray:
    """The yield order of a rank's block: local row indices, each displaced by at most `shuffle_buffer`."""
    if shuffle_buffer <= 1 or num_rows <= 1:
        return np.arange(num_rows)
    rng = np.random.default_rng([seed, epoch, rank, _ROW_ORDER_STREAM])
    keys = np.arange(num_rows) + shuffle_buffer * rng.random(num_rows)
    return np.argsort(keys, kind="stable")


def worker_indices(block_rows: int, epoch: int, start: int, worker: int, workers: int) -> np.ndarray:
    """The indices into `epoch`'s order of a block of `block_rows` rows that dataloader worker `worker` of `workers`
    yields, for a loader started at stream position `start`: those at stream positions ``start + worker + j·workers``
    (none before `start`)."""
    first_position = epoch * block_rows
    lo = max(0, start - first_position)
    if lo >= block_rows:
        return np.arange(0)
    first = lo + (worker - (first_position + lo - start)) % workers
    return np.arange(first, block_rows, workers)
