"""A sample's pieces: the token ids and weights of its rendered messages, which the samples of a trajectory share.

`stages.samples.TrajectorySamples` builds them; the sample task writes each distinct piece of a trajectory once
(`pipeline.sample_task.lay_out`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

IDS = np.int32  # token ids as the shards store them
WEIGHTS = np.float64  # weights as Python floats; the shards round them to float32 when written


@dataclass
class Piece:
    """Token ids of one rendered message (or part), their weights, and the observation span in it.

    Both are numpy arrays (`IDS`, `WEIGHTS`) that samples share: pieces are never changed once built.
    """

    ids: np.ndarray
    weights: np.ndarray
    span: tuple[int, int] | None = None  # [start, end) of the observation (+ end-of-turn) tokens
    # A history turn's message (its user prompt or its observation). The sample task lays a trajectory's pieces
    # out once, these after the others (`pipeline.sample_task.lay_out`): a turn sample's history is then one
    # run of that layout.
    history: bool = False
    zero: bool = False  # every weight is 0 (known when built; False says nothing)


@dataclass
class SampleParts:
    """An assembled sample before it becomes a row: the pieces it joins, in order.

    The joined ids and weights (`id_array`, `weight_array`) are built only when asked for: the sample task
    writes the pieces of a trajectory once and each sample as ranges of them, and its counters need only the
    lengths and the nonzero weights (`num_tokens`, `loss_weights`, `span_weights`).
    """

    pieces: list[Piece]
    spans: list[tuple[int, int]]
    span_turns: list[int]  # the turn (1-based) of each span
    dropped_turns: int = 0
    span_pieces: list[tuple[int, int, int]] = field(default_factory=list)  # per span: its piece, start, end in it

    @cached_property
    def id_array(self) -> np.ndarray:
        return np.concatenate([p.ids for p in self.pieces]) if self.pieces else as_ids([])

    @cached_property
    def weight_array(self) -> np.ndarray:
        return np.concatenate([p.weights for p in self.pieces]) if self.pieces else zero_weights(0)

    @property
    def num_tokens(self) -> int:
        return sum(len(p.ids) for p in self.pieces)

    def loss_weights(self) -> np.ndarray:
        """``weight_array[weight_array != 0]`` (NaN counts as nonzero), without joining the pieces known to be 0
        unless `weight_array` was joined already."""
        if "weight_array" in self.__dict__:
            return self.weight_array[self.weight_array != 0]
        live = [p.weights for p in self.pieces if not p.zero]
        if not live:
            return zero_weights(0)
        weights = live[0] if len(live) == 1 else np.concatenate(live)
        return weights[weights != 0]

    def span_weights(self, k: int) -> np.ndarray:
        """The weights of span `k` (``weight_array[start:end]`` of ``spans[k]``)."""
        i, a, b = self.span_pieces[k]
        return self.pieces[i].weights[a:b]

    @property
    def ids(self) -> list[int]:
        return self.id_array.tolist()

    @property
    def weights(self) -> list[float]:
        return self.weight_array.tolist()


def as_ids(ids) -> np.ndarray:
    """Token ids as an `IDS` array (no copy of one already)."""
    if isinstance(ids, np.ndarray):
        return ids.astype(IDS, copy=False)
    return np.fromiter(ids, dtype=IDS, count=len(ids))  # faster than np.asarray for a list of ints


def zero_weights(n: int) -> np.ndarray:
    """`n` zero weights."""
    return np.zeros(n, dtype=WEIGHTS)
