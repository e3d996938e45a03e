"""Whether the shards fit the model, checked before the first step.

- **Context.** A sample longer than the model's positions (``max_position_embeddings``, GPT-2's
  ``n_positions``) is a long sample, whatever ``--micro-batch-tokens`` allows: `sample_limit` is the
  smaller of the two, and ``--long-samples`` applies to it. (Packed rows may still be longer than
  the context: positions restart at 0 for each sample.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_sequence_length")


@dataclass(frozen=True)
class Context:
    """The positions a model takes, and the config field that says so."""

    tokens: int
    field: str


def context_length(model: Any) -> Context | None:
    """The context of a Hugging Face model (from its config); None for the tiny model and configs that name none."""
    config = getattr(getattr(model, "model", None), "config", None)
    if config is None:
        return None
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    written = config.to_dict() if hasattr(config, "to_dict") else {}
    for name in _CONTEXT_FIELDS:
        value = written.get(name)
        if isinstance(value, int) and value > 0:
            return Context(value, name)
    value = getattr(config, "max_position_embeddings", None)
    return Context(value, "max_position_embeddings") if isinstance(value, int) and value > 0 else None


def sample_limit(row: int, context: Context | None) -> int:
    """The most tokens a sample may have: a row, and no more than the model's context."""
    return row if context is None else min(row, context.tokens)
