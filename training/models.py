"""The models `lwm train` can train: ``tiny`` (built in) or a Hugging Face causal-LM directory.

Every model is called the same way, ``model(input_ids, position_ids, document_ids) -> logits``.
Hugging Face models are wrapped: padded rows get the usual 2D padding mask; packed rows get the
block-diagonal mask as a custom 4D additive mask (0 where attention is allowed, the dtype's
minimum elsewhere), which transformers accepts for models running with the ``eager`` or ``sdpa``
attention implementation. That mask costs L² entries per row, so keep packed rows moderate.
transformers is imported only when such a model is asked for; it is not a dependency of lwmkit.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from schemas.errors import ConfigError
from training.collate import block_causal_mask
from training.tiny_model import TinyConfig, TinyDecoder

TINY = "tiny"


class HFCausalLM(nn.Module):
    """A Hugging Face causal LM behind the ``(input_ids, position_ids, document_ids)`` call."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
        if not bool((document_ids > 0).any()):
            # one sample per row (padding): the model's own causal mask plus a padding mask suffices
            mask = (document_ids >= 0).long()
            return self.model(
                input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=False
            ).logits
        dtype = next(self.model.parameters()).dtype
        allowed = block_causal_mask(document_ids)
        additive = torch.zeros(allowed.shape, dtype=dtype, device=input_ids.device)
        additive.masked_fill_(~allowed, torch.finfo(dtype).min)
        return self.model(
            input_ids=input_ids, position_ids=position_ids, attention_mask=additive, use_cache=False
        ).logits


def load_hf_causal_lm(path: str) -> HFCausalLM:
    """Load a causal LM from a local Hugging Face model directory (needs `transformers`)."""
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError(f"--model {path}: not a Hugging Face model directory (no config.json); or use --model tiny")
    try:
        import transformers
    except ImportError as missing:
        raise ConfigError(
            f"--model {path}: loading a Hugging Face model needs the transformers package "
            "(pip install transformers); --model tiny needs nothing more"
        ) from missing
    model = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype="auto", attn_implementation="sdpa")
    return HFCausalLM(model)


def build_model(name: str, tiny: TinyConfig) -> nn.Module:
    """``tiny`` → `TinyDecoder(tiny)`; anything else is a Hugging Face model directory."""
    return TinyDecoder(tiny) if name == TINY else load_hf_causal_lm(name)
