"""The models `lwm train` can train: ``tiny`` (built in) or a Hugging Face causal-LM directory.

Every model is called the same way, ``model(input_ids, position_ids, document_ids) -> logits``,
and ``model(..., labels=, label_weights=, loss_chunk_tokens=)`` returns the weighted loss sum
instead, computed inside the forward pass (so DDP and FSDP hooks cover it) from the final hidden
states in chunks (`training.loss.weighted_loss_sum_from_hidden`), never as ``[tokens, vocab]``
logits.

Hugging Face models use their own attention implementation with the per-sample position ids.
Padded rows get the usual 2D padding mask. Packed rows get the block-diagonal causal mask: as a
4D additive mask (0 where attention is allowed, the dtype's minimum elsewhere) for ``sdpa`` and
``eager``, which transformers passes through unchanged; a ``flash_attention_*`` model gets no mask
and finds the sample boundaries in the position ids (varlen attention). The 4D mask costs L²
entries per row, so on CPU keep packed rows moderate. transformers is imported only when such a
model is asked for (the ``train`` extra installs it).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from schemas.errors import ConfigError
from training.collate import block_causal_mask
from training.loss import model_loss_sum, weighted_loss_sum
from training.tiny_model import TinyConfig, TinyDecoder

TINY = "tiny"
ATTENTION = ("auto", "sdpa", "eager", "flash_attention_2", "flash_attention_3")


class HFCausalLM(nn.Module):
    """A Hugging Face causal LM behind the ``(input_ids, position_ids, document_ids)`` call."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        # Whether the logits are the output embedding applied to the final hidden states, which the chunked loss
        # computes itself; models that scale or cap them after it (Granite's `logits_scaling`, Cohere's
        # `logit_scale`, Falcon-H1's `lm_head_multiplier`, Gemma 2's soft-capping) get their own logits instead.
        self.logits_are_projection = _logits_are_projection(model)

    @property
    def uses_flash_attention(self) -> bool:
        config = getattr(self.model, "config", None)
        return str(getattr(config, "_attn_implementation", "")).startswith("flash")

    def _mask(self, input_ids: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor | None:
        if not bool((document_ids > 0).any()):
            # one sample per row (padding): the model's own causal mask plus a padding mask suffices
            return (document_ids >= 0).long()
        if self.uses_flash_attention:
            return None  # varlen attention over the sample boundaries the position ids show
        dtype = next(self.model.parameters()).dtype
        allowed = block_causal_mask(document_ids)
        additive = torch.zeros(allowed.shape, dtype=dtype, device=input_ids.device)
        return additive.masked_fill_(~allowed, torch.finfo(dtype).min)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        document_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        label_weights: torch.Tensor | None = None,
        loss_chunk_tokens: int = 0,
    ) -> torch.Tensor:
        mask = self._mask(input_ids, document_ids)
        if labels is None:
            return self.model(
                input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=False
            ).logits
        if not self.logits_are_projection:
            loss_chunk_tokens = 0  # logits are not a plain projection of the hidden states: use the model's own
        if label_weights is None:
            raise ValueError("label_weights must be given with labels")
        if loss_chunk_tokens <= 0:
            logits = self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=False)
            return weighted_loss_sum(logits.logits, labels, label_weights)
        hidden = self.model.base_model(
            input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=False
        ).last_hidden_state
        head = self.model.get_output_embeddings()
        return model_loss_sum(hidden, head.weight, head.bias, labels, label_weights, loss_chunk_tokens)

    def enable_activation_checkpointing(self) -> None:
        """Recompute each decoder layer in the backward pass (transformers' gradient checkpointing)."""
        self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def decoder_layers(self) -> list[nn.Module]:
        """The repeated decoder blocks (the units FSDP shards one by one)."""
        layers = getattr(self.model.base_model, "layers", None)
        if layers is None:
            raise ConfigError(f"{type(self.model).__name__}: no decoder layer list found to shard with --fsdp")
        return list(layers)


def _logits_are_projection(model: Any) -> bool:
    """Whether `model`'s logits equal its output embedding applied to its final hidden states, measured on a few
    tokens (in eval mode: dropout would make two passes differ). Not assumed from the architecture: any step
    after the projection (scaling, soft-capping, a bias added elsewhere) shows as a difference."""
    if not all(hasattr(model, name) for name in ("get_output_embeddings", "get_input_embeddings", "base_model")):
        return False  # not a transformers model: its own logits are all there is
    head = model.get_output_embeddings()
    if getattr(getattr(model, "config", None), "final_logit_softcapping", None) or head is None:
        return False
    rows = model.get_input_embeddings().num_embeddings
    ids = torch.arange(min(8, rows), dtype=torch.long).unsqueeze(0)
    positions = torch.arange(ids.shape[1], dtype=torch.long).unsqueeze(0)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits
            hidden = model.base_model(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state
            projected = torch.nn.functional.linear(hidden, head.weight, head.bias)
    finally:
        model.train(training)
    return logits.shape == projected.shape and bool(torch.allclose(logits.float(), projected.float(), rtol=1e-4, atol=1e-4))


def pick_attention(choice: str, device: torch.device) -> str:
    """The attention implementation for ``--attention auto``: flash-attention varlen on CUDA when installed, else sdpa."""
    if choice != "auto":
        return choice
    if device.type == "cuda":
        import importlib.util

        if importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2"
    return "sdpa"


def load_hf_causal_lm(path: str, attention: str = "sdpa") -> HFCausalLM:
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
    # float32 master weights whatever the checkpoint's dtype; bf16 compute comes from autocast or FSDP
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attention)
    except (OSError, ValueError, KeyError, TypeError) as err:  # no weights, an unknown model_type, a broken config
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise ConfigError(f"--model {path}: transformers cannot load it: {first}") from err
    except ImportError as err:  # an attention implementation whose package is not installed (flash_attn)
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise ConfigError(f"--attention {attention}: {first}") from err
    return HFCausalLM(model)


def vocabulary_rows(model: nn.Module) -> int | None:
    """Rows of the model's input embedding (the largest token id it takes, plus one); None for an unknown model."""
    if isinstance(model, TinyDecoder):
        return int(model.embed.num_embeddings)
    if not isinstance(model, HFCausalLM):
        return None
    return int(model.model.get_input_embeddings().num_embeddings)


def build_model(name: str, tiny: TinyConfig, attention: str = "sdpa") -> nn.Module:
    """``tiny`` → `TinyDecoder(tiny)`; anything else is a Hugging Face model directory."""
    return TinyDecoder(tiny) if name == TINY else load_hf_causal_lm(name, attention)
