"""The bundled torch trainer and the shard dataset (import name `training`).

Importing this package does not import torch (an optional extra): the names below load their
modules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ShardDataset": "training.dataset",
    "SamplePosition": "training.dataset",
    "MicroBatch": "training.collate",
    "micro_batches": "training.collate",
    "pad_samples": "training.collate",
    "pack_samples": "training.collate",
    "block_causal_mask": "training.collate",
    "weighted_loss_sum": "training.loss",
    "accumulate_gradients": "training.step",
    "TinyConfig": "training.tiny_model",
    "TinyDecoder": "training.tiny_model",
    "TrainConfig": "training.settings",
    "train": "training.loop",
    "ShardError": "training.shards",
    "LongSamplePolicy": "training.long_samples",
    "load_hf_causal_lm": "training.models",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'training' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
