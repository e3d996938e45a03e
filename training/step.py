"""One optimizer step's worth of forward and backward passes, with the global loss denominator.

The denominator of `training.loss` is summed over this rank's micro-batches and then over all
ranks before the first forward pass. Each micro-batch back-propagates ``Σ wᵢ·ℓᵢ / D`` (times the
world size when the model is wrapped in DistributedDataParallel, which averages gradients over
ranks), so the accumulated gradient is that of the whole global step's loss.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from training.collate import MicroBatch
from training.loss import all_ranks_sum, local_denominator, usable_denominator, weighted_loss_sum


@dataclass(frozen=True)
class StepResult:
    """What one global step saw, summed over all ranks."""

    loss: float  # Σ w·ℓ / D
    tokens: int  # real input tokens
    weighted_tokens: float  # Σ w over the targets
    loss_tokens: int  # targets with w > 0
    denominator: float
    truncated: int  # samples cut to the micro-batch length


def model_logits(model: nn.Module, batch: MicroBatch) -> torch.Tensor:
    """Logits of a micro-batch through the common model call."""
    return model(batch.input_ids, position_ids=batch.position_ids, document_ids=batch.document_ids)


def accumulate_gradients(model: nn.Module, batches: Sequence[MicroBatch], loss_norm: str) -> StepResult:
    """Run forward and backward over `batches` (already on the model's device); gradients add up in `.grad`."""
    device = batches[0].input_ids.device
    (denominator,) = all_ranks_sum([local_denominator((b.label_weights for b in batches), loss_norm)], device)
    is_ddp = isinstance(model, DistributedDataParallel)
    world_size = torch.distributed.get_world_size() if is_ddp else 1
    scale = world_size / usable_denominator(denominator)
    loss_sum = 0.0
    for number, batch in enumerate(batches):
        # Gradients are synchronised once, on the last micro-batch.
        sync = not is_ddp or number == len(batches) - 1
        with contextlib.nullcontext() if sync else model.no_sync():
            batch_sum = weighted_loss_sum(model_logits(model, batch), batch.labels, batch.label_weights)
            (batch_sum * scale).backward()
        loss_sum += float(batch_sum.detach())
    local = [
        loss_sum,
        float(sum(b.num_tokens for b in batches)),
        float(sum(b.label_weights.double().sum() for b in batches)),
        float(sum((b.label_weights > 0).sum() for b in batches)),
        float(sum(b.truncated for b in batches)),
    ]
    total_sum, tokens, weights, loss_tokens, truncated = all_ranks_sum(local, device)
    return StepResult(
        loss=total_sum / usable_denominator(denominator),
        tokens=int(tokens),
        weighted_tokens=weights,
        loss_tokens=int(loss_tokens),
        denominator=denominator,
        truncated=int(truncated),
    )
