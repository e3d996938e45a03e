"""A small decoder-only transformer for CPU smoke tests (``--model tiny``).

Pre-norm blocks (RMSNorm, multi-head attention with rotary positions, SiLU MLP), tied input and
output embeddings. Rotary positions are computed from ``position_ids``, so a packed row whose
positions restart per sample sees each sample exactly as it would alone; attention uses the
block-diagonal causal mask built from ``document_ids`` (or a given ``[B, 1, L, L]`` bool mask).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from training.collate import block_causal_mask
from training.loss import model_loss_sum

QWEN_VOCAB_SIZE = 151936


@dataclass(frozen=True)
class TinyConfig:
    """Sizes of the tiny decoder; `vocab_size` must exceed every token id fed to it."""

    vocab_size: int = QWEN_VOCAB_SIZE
    dim: int = 64
    layers: int = 2
    heads: int = 4
    mlp_ratio: int = 4
    rope_base: float = 10000.0


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)


class _Block(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.attn_norm = nn.RMSNorm(config.dim)
        self.qkv = nn.Linear(config.dim, 3 * config.dim, bias=False)
        self.out = nn.Linear(config.dim, config.dim, bias=False)
        self.mlp_norm = nn.RMSNorm(config.dim)
        self.up = nn.Linear(config.dim, config.mlp_ratio * config.dim, bias=False)
        self.down = nn.Linear(config.mlp_ratio * config.dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(batch, length, 3, self.heads, dim // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, L, head_dim]
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, dim))
        return x + self.down(F.silu(self.up(self.mlp_norm(x))))


class TinyDecoder(nn.Module):
    """``forward(input_ids, position_ids, document_ids) -> logits [B, L, vocab]``."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        if config.dim % (2 * config.heads):
            raise ValueError(f"dim {config.dim} must be a multiple of 2 × heads ({config.heads})")
        self.config = config
        self.activation_checkpointing = False  # recompute each block in the backward pass when True
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.layers))
        self.norm = nn.RMSNorm(config.dim)
        head_dim = config.dim // config.heads
        inv_freq = config.rope_base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The final normed hidden states ``[B, L, dim]``."""
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        if attention_mask is None:
            attention_mask = block_causal_mask(
                document_ids if document_ids is not None else torch.zeros_like(input_ids)
            )
        angles = position_ids[:, None, :, None].float() * self.inv_freq  # [B, 1, L, head_dim/2]
        cos, sin = angles.cos(), angles.sin()
        x = self.embed(input_ids)
        for block in self.blocks:
            if self.activation_checkpointing and torch.is_grad_enabled():
                x = checkpoint(block, x, cos, sin, attention_mask, use_reentrant=False)
            else:
                x = block(x, cos, sin, attention_mask)
        return self.norm(x)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        label_weights: torch.Tensor | None = None,
        loss_chunk_tokens: int = 0,
    ) -> torch.Tensor:
        """Logits ``[B, L, vocab]``; with `labels` and `label_weights`, the weighted loss sum instead."""
        hidden = self.hidden_states(input_ids, position_ids, document_ids, attention_mask)
        if labels is None:
            return hidden @ self.embed.weight.T
        return model_loss_sum(hidden, self.embed.weight, None, labels, label_weights, loss_chunk_tokens)

    def enable_activation_checkpointing(self) -> None:
        """Recompute each block in the backward pass instead of keeping its activations."""
        self.activation_checkpointing = True

    def decoder_layers(self) -> list[nn.Module]:
        """The repeated blocks (the units FSDP shards one by one)."""
        return list(self.blocks)
