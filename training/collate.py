"""Turning samples into micro-batches: padding, or packing several samples into one fixed-length row.

Label alignment (the one place it is decided): position ``i`` of a sample predicts token ``i+1``,
so ``labels[i] = input_ids[i+1]`` and ``label_weights[i] = loss_weight[i+1]`` — the weight of a
token applies to predicting that token from everything before it. The last position of each
sample predicts nothing (weight 0), so the first token of a sample is never a target: its weight
is ignored (the pipeline gives it 0 anyway, it is a chat-format token). Because the targets are
built per sample before padding or packing, a packed row never asks sample B's first token to be
predicted from sample A.

Every micro-batch carries ``document_ids`` (which sample a token belongs to, -1 for padding) and
``position_ids`` restarting at 0 for each sample; `block_causal_mask` turns the former into the
block-diagonal causal mask, so packed samples never attend to each other.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

PAD_ID = 0


@dataclass(frozen=True)
class MicroBatch:
    """Model inputs and shifted targets of one micro-batch, plus the positions of its samples."""

    input_ids: torch.Tensor  # [B, L] int64
    position_ids: torch.Tensor  # [B, L] int64, restarting per sample
    document_ids: torch.Tensor  # [B, L] int64, sample number within the row, -1 for padding
    labels: torch.Tensor  # [B, L] int64, labels[i] = input_ids[i+1] of the same sample
    label_weights: torch.Tensor  # [B, L] float32, loss_weight[i+1]; 0 where nothing is predicted
    positions: list[Any] = field(default_factory=list)
    pieces: list[Any] = field(default_factory=list)  # (number, count) of a windowed sample's piece, else None
    long_counts: list[Any] = field(default_factory=list)  # what a long-sample policy did, per sample (or None)
    # per sample, the positions of the samples the policy read just before it and gave nothing to train on
    skipped: list[Any] = field(default_factory=list)
    num_tokens: int = 0  # real (non-padding) tokens
    truncated: int = 0  # samples cut to the micro-batch length

    def to(self, device: torch.device | str) -> MicroBatch:
        """The same batch with its tensors on `device`."""
        return replace(
            self,
            input_ids=self.input_ids.to(device),
            position_ids=self.position_ids.to(device),
            document_ids=self.document_ids.to(device),
            labels=self.labels.to(device),
            label_weights=self.label_weights.to(device),
        )


def shifted_targets(
    input_ids: torch.Tensor, loss_weight: torch.Tensor, pad_id: int = PAD_ID
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(labels, label_weights)`` of one sample: its ids and weights moved one place to the left."""
    labels = torch.full_like(input_ids, pad_id)
    weights = torch.zeros(input_ids.shape, dtype=torch.float32)
    labels[:-1] = input_ids[1:]
    weights[:-1] = loss_weight[1:].to(torch.float32)
    return labels, weights


def block_causal_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """``[B, 1, L, L]`` bool, True where query ``i`` may attend to key ``j``: same sample and ``j <= i``.

    Padding tokens (-1) attend to earlier padding, so no query row is fully masked (which would
    give NaN in softmax attention); real tokens never see them.
    """
    length = document_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=document_ids.device).tril()
    same = document_ids[:, :, None] == document_ids[:, None, :]
    return (same & causal)[:, None, :, :]


def _truncate(sample: dict[str, Any], max_tokens: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
    ids, weights = sample["input_ids"], sample["loss_weight"]
    cut = len(ids) > max_tokens
    return ids[:max_tokens], weights[:max_tokens], cut


def pad_samples(samples: Sequence[dict[str, Any]], max_tokens: int | None = None, pad_id: int = PAD_ID) -> MicroBatch:
    """One row per sample, right-padded to the longest (each cut to `max_tokens` when given)."""
    pieces = [_truncate(s, max_tokens or len(s["input_ids"])) for s in samples]
    length = max(len(ids) for ids, _, _ in pieces)
    rows = len(pieces)
    input_ids = torch.full((rows, length), pad_id, dtype=torch.int64)
    labels = torch.full((rows, length), pad_id, dtype=torch.int64)
    label_weights = torch.zeros((rows, length), dtype=torch.float32)
    position_ids = torch.zeros((rows, length), dtype=torch.int64)
    document_ids = torch.full((rows, length), -1, dtype=torch.int64)
    for row, (ids, weights, _) in enumerate(pieces):
        n = len(ids)
        input_ids[row, :n] = ids
        labels[row, :n], label_weights[row, :n] = shifted_targets(ids, weights, pad_id)
        position_ids[row, :n] = torch.arange(n)
        document_ids[row, :n] = 0
    return MicroBatch(
        input_ids,
        position_ids,
        document_ids,
        labels,
        label_weights,
        positions=[s.get("position") for s in samples],
        pieces=[s.get("piece") for s in samples],
        long_counts=[s.get("long_counts") for s in samples],
        skipped=[s.get("skipped_positions") for s in samples],
        num_tokens=sum(len(ids) for ids, _, _ in pieces),
        truncated=sum(cut for _, _, cut in pieces),
    )


def pack_samples(samples: Sequence[dict[str, Any]], length: int, pad_id: int = PAD_ID) -> MicroBatch:
    """All samples back to back in one row of exactly `length` tokens (cut to fit, padded at the end)."""
    input_ids = torch.full((1, length), pad_id, dtype=torch.int64)
    labels = torch.full((1, length), pad_id, dtype=torch.int64)
    label_weights = torch.zeros((1, length), dtype=torch.float32)
    position_ids = torch.zeros((1, length), dtype=torch.int64)
    document_ids = torch.full((1, length), -1, dtype=torch.int64)
    offset, truncated = 0, 0
    for number, sample in enumerate(samples):
        ids, weights, cut = _truncate(sample, length - offset)
        n = len(ids)
        truncated += cut
        end = offset + n
        input_ids[0, offset:end] = ids
        labels[0, offset:end], label_weights[0, offset:end] = shifted_targets(ids, weights, pad_id)
        position_ids[0, offset:end] = torch.arange(n)
        document_ids[0, offset:end] = number
        offset = end
    return MicroBatch(
        input_ids,
        position_ids,
        document_ids,
        labels,
        label_weights,
        positions=[s.get("position") for s in samples],
        pieces=[s.get("piece") for s in samples],
        long_counts=[s.get("long_counts") for s in samples],
        skipped=[s.get("skipped_positions") for s in samples],
        num_tokens=offset,
        truncated=truncated,
    )


def micro_batches(samples: Iterator[dict[str, Any]], micro_batch_tokens: int, pack: bool) -> Iterator[MicroBatch]:
    """Greedy micro-batches of at most `micro_batch_tokens` tokens, in stream order.

    Packed: samples fill one row of exactly that length. Padded: as many samples as keep
    ``rows × longest ≤ micro_batch_tokens``. A sample longer than the budget is cut to it and
    goes alone. A sample that does not fit waits for the next micro-batch, so the batch that is
    returned holds only samples the caller has fully used once it moves on.
    """
    if micro_batch_tokens < 2:
        raise ValueError("micro_batch_tokens must be at least 2")
    current: list[dict[str, Any]] = []
    used, longest = 0, 0
    for sample in samples:
        n = min(len(sample["input_ids"]), micro_batch_tokens)
        fits = used + n <= micro_batch_tokens if pack else (len(current) + 1) * max(longest, n) <= micro_batch_tokens
        if current and not fits:
            yield _collate(current, micro_batch_tokens, pack)
            current, used, longest = [], 0, 0
        current.append(sample)
        used, longest = used + n, max(longest, n)
    if current:
        yield _collate(current, micro_batch_tokens, pack)


def _collate(samples: list[dict[str, Any]], micro_batch_tokens: int, pack: bool) -> MicroBatch:
    return pack_samples(samples, micro_batch_tokens) if pack else pad_samples(samples, micro_batch_tokens)
