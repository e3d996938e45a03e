"""``--fsdp``: shard the model over the ranks with FSDP2 (``torch.distributed.fsdp.fully_shard``).

DDP keeps a whole copy of the parameters, gradients and optimizer state on every rank; FSDP2
keeps 1/N of each, gathers one decoder layer's parameters just before that layer runs and frees
them after, and reduce-scatters its gradients. Each decoder layer is its own unit, then the root
(embeddings, final norm, output head) — the loss is computed inside the root's forward, so the
head's parameters are gathered while it runs.

Precision (``--precision``): ``auto`` is bf16 compute on CUDA and float32 on CPU; the parameters
and optimizer state stay float32 either way. Under FSDP bf16 is its mixed-precision policy
(parameters gathered in bf16, gradients reduced in float32); without FSDP it is autocast.
"""

from __future__ import annotations

import torch
from torch import nn

from schemas.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16")


def compute_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The dtype of the forward pass for `precision` on `device`; None for plain float32."""
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}")
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def shard_model(model: nn.Module, dtype: torch.dtype | None, device: torch.device) -> nn.Module:
    """Apply FSDP2 in place: every decoder layer, then the root. Needs an initialised process group."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if not torch.distributed.is_initialized():
        raise ConfigError("--fsdp needs torchrun (or an initialised torch.distributed process group)")
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype is not None else None
    options = {"mesh": mesh, **({"mp_policy": policy} if policy is not None else {})}
    for layer in model.decoder_layers():
        fully_shard(layer, **options)
    fully_shard(model, **options)
    return model
