"""The weighted token loss and its denominator.

    loss = Σᵢ wᵢ · ℓᵢ / D

over every target position ``i`` of the global step (all micro-batches of the gradient
accumulation, on all ranks), where ``ℓᵢ = −log p(labels[i] | tokens ≤ i)`` and ``wᵢ`` is the
shifted weight of `training.collate` (the weight of token i+1 applies to predicting it from
position i). The denominator ``D`` is named by ``--loss-norm``:

- ``tokens`` (default): the number of targets with ``wᵢ > 0``;
- ``weights``: ``Σᵢ wᵢ``.

``D`` is counted over the whole global step *before* the first micro-step and summed across
ranks, and each micro-step back-propagates its own ``Σ wᵢ·ℓᵢ / D``; so splitting a step into
more micro-batches or more ranks leaves the value and the gradient unchanged. A step whose
targets all have weight 0 has ``D = 0``; its loss and gradient are 0 and ``D`` is taken as 1.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

LOSS_NORMS = ("tokens", "weights")


def weighted_loss_sum(logits: torch.Tensor, labels: torch.Tensor, label_weights: torch.Tensor) -> torch.Tensor:
    """``Σ wᵢ·ℓᵢ`` in float32; positions with weight 0 are left out before the softmax.

    Leaving them out (rather than multiplying by 0) means a zero-weight label cannot reach the
    loss or the gradient in any way, and saves the cross-entropy of positions that do not count.
    """
    weights = label_weights.reshape(-1)
    selected = weights > 0
    flat_logits = logits.reshape(-1, logits.shape[-1])[selected].float()
    losses = F.cross_entropy(flat_logits, labels.reshape(-1)[selected], reduction="none")
    return (losses * weights[selected]).sum()


def local_denominator(label_weights: Iterable[torch.Tensor], loss_norm: str) -> float:
    """This rank's share of ``D`` over the micro-batches of one step."""
    if loss_norm not in LOSS_NORMS:
        raise ValueError(f"loss norm {loss_norm!r} is not one of {', '.join(LOSS_NORMS)}")
    total = 0.0
    for weights in label_weights:
        total += float((weights > 0).sum()) if loss_norm == "tokens" else float(weights.double().sum())
    return total


def all_ranks_sum(values: list[float], device: torch.device | str = "cpu") -> list[float]:
    """Element-wise sum of `values` over all ranks (the values themselves without torch.distributed)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.SUM)
    return tensor.tolist()


def usable_denominator(denominator: float) -> float:
    """``D``, or 1 when the step has no weighted target (its loss sum is 0 anyway)."""
    return denominator if denominator > 0 else 1.0


def weighted_loss_sum_from_hidden(
    hidden: torch.Tensor,
    head_weight: torch.Tensor,
    head_bias: torch.Tensor | None,
    labels: torch.Tensor,
    label_weights: torch.Tensor,
    chunk_tokens: int,
) -> torch.Tensor:
    """`weighted_loss_sum` of ``logits = hidden @ head_weightᵀ (+ bias)``, never holding all the logits at once.

    Only positions with weight > 0 are projected, `chunk_tokens` of them at a time; each chunk's
    logits are recomputed in the backward pass instead of being kept, so the peak is one chunk's
    ``[chunk_tokens, vocab]`` logits rather than ``[tokens, vocab]``.
    """
    weights = label_weights.reshape(-1)
    selected = weights > 0
    states = hidden.reshape(-1, hidden.shape[-1])[selected]
    targets, kept = labels.reshape(-1)[selected], weights[selected]
    if states.shape[0] == 0:
        # zero, but every parameter stays in the graph, so DDP and FSDP see the gradients they expect
        return (hidden.sum() + head_weight.sum()).float() * 0.0
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be at least 1")
    step = chunk_tokens
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, states.shape[0], step):
        piece = slice(start, start + step)
        if torch.is_grad_enabled():
            total = total + checkpoint(
                _chunk_loss, states[piece], head_weight, head_bias, targets[piece], kept[piece], use_reentrant=False
            )
        else:
            total = total + _chunk_loss(states[piece], head_weight, head_bias, targets[piece], kept[piece])
    return total


def _chunk_loss(
    states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor, kept: torch.Tensor
) -> torch.Tensor:
    logits = F.linear(states, weight, bias).float()
    return (F.cross_entropy(logits, targets, reduction="none") * kept).sum()


def model_loss_sum(
    hidden: torch.Tensor,
    head_weight: torch.Tensor,
    head_bias: torch.Tensor | None,
    labels: torch.Tensor,
    label_weights: torch.Tensor | None,
    chunk_tokens: int,
) -> torch.Tensor:
    """``Σ wᵢ·ℓᵢ`` of a model's hidden states: chunked when `chunk_tokens` > 0, else through the full logits."""
    if label_weights is None:
        raise ValueError("label_weights must be given with labels")
    if chunk_tokens <= 0:
        return weighted_loss_sum(F.linear(hidden, head_weight, head_bias), labels, label_weights)
    return weighted_loss_sum_from_hidden(hidden, head_weight, head_bias, labels, label_weights, chunk_tokens)
