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
from training.loss import all_ranks_sum, local_denominator, usable_denominator


@dataclass(frozen=True)
class StepResult:
    """What one global step saw, summed over all ranks."""

    loss: float  # Σ w·ℓ / D
    tokens: int  # real input tokens
    weighted_tokens: float  # Σ w over the targets
    loss_tokens: int  # targets with w > 0
    denominator: float
    truncated: int  # samples cut to the micro-batch length
    rows: int = 0  # rows of all micro-batches
    empty_rows: int = 0  # rows without a single target of weight > 0


def model_logits(model: nn.Module, batch: MicroBatch) -> torch.Tensor:
    """Logits of a micro-batch through the common model call."""
    return model(batch.input_ids, position_ids=batch.position_ids, document_ids=batch.document_ids)


def model_loss(model: nn.Module, batch: MicroBatch, loss_chunk_tokens: int) -> torch.Tensor:
    """``Σ wᵢ·ℓᵢ`` of a micro-batch, computed inside the model's forward (chunked when `loss_chunk_tokens` > 0)."""
    return model(
        batch.input_ids,
        position_ids=batch.position_ids,
        document_ids=batch.document_ids,
        labels=batch.labels,
        label_weights=batch.label_weights,
        loss_chunk_tokens=loss_chunk_tokens,
    )


def accumulate_gradients(
    model: nn.Module,
    batches: Sequence[MicroBatch],
    loss_norm: str,
    loss_chunk_tokens: int = 0,
    autocast_dtype: torch.dtype | None = None,
) -> StepResult:
    """Run forward and backward over `batches` (already on the model's device); gradients add up in `.grad`.

    A model wrapped by FSDP averages gradients over ranks like DDP does, so it is scaled the same way.
    `autocast_dtype` runs the forward pass under autocast (bf16 on GPU without FSDP).
    """
    device = batches[0].input_ids.device
    (denominator,) = all_ranks_sum([local_denominator((b.label_weights for b in batches), loss_norm)], device)
    is_ddp = isinstance(model, DistributedDataParallel)
    averages = is_ddp or is_fsdp(model)
    world_size = torch.distributed.get_world_size() if averages else 1
    scale = world_size / usable_denominator(denominator)
    loss_sum = 0.0
    for number, batch in enumerate(batches):
        # Gradients are synchronised once, on the last micro-batch.
        sync = not averages or number == len(batches) - 1
        autocast = (
            torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype is not None else contextlib.nullcontext()
        )
        if averages and not is_ddp:
            model.set_requires_gradient_sync(sync)  # FSDP: reduce-scatter once, after the last micro-batch
        with contextlib.nullcontext() if sync or not is_ddp else model.no_sync():
            with autocast:
                batch_sum = model_loss(model, batch, loss_chunk_tokens)
            (batch_sum * scale).backward()
        loss_sum += float(batch_sum.detach())
    local = [
        loss_sum,
        float(sum(b.num_tokens for b in batches)),
        float(sum(b.label_weights.double().sum() for b in batches)),
        float(sum((b.label_weights > 0).sum() for b in batches)),
        float(sum(b.truncated for b in batches)),
        float(sum(b.label_weights.shape[0] for b in batches)),
        float(sum(int((b.label_weights.sum(dim=1) <= 0).sum()) for b in batches)),
    ]
    total_sum, tokens, weights, loss_tokens, truncated, rows, empty_rows = all_ranks_sum(local, device)
    return StepResult(
        loss=total_sum / usable_denominator(denominator),
        tokens=int(tokens),
        weighted_tokens=weights,
        loss_tokens=int(loss_tokens),
        denominator=denominator,
        truncated=int(truncated),
        rows=int(rows),
        empty_rows=int(empty_rows),
    )


def is_fsdp(model: nn.Module) -> bool:
    """Whether `model` was sharded with ``torch.distributed.fsdp.fully_shard`` (FSDP2)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch builds without distributed
        return False
    return isinstance(model, FSDPModule)
