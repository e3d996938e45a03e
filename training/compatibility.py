"""Whether the shards fit the model, checked before the first step: its context, its embedding, its tokenizer.

- **Context.** A sample longer than the model's positions (``max_position_embeddings``, GPT-2's
  ``n_positions``) is a long sample, whatever ``--micro-batch-tokens`` allows: `sample_limit` is the
  smaller of the two, and ``--long-samples`` applies to it. (Packed rows may still be longer than
  the context: positions restart at 0 for each sample.)
- **Embedding.** The largest token id of the shards, from the Parquet statistics of ``input_ids``
  where the files have them, must have a row in the model's input embedding; where the manifest's
  tokenizer can be loaded here, its vocabulary must too.
- **Tokenizer.** Where the manifest names the shards' tokenizer and the model directory holds a
  ``tokenizer.json``, the two must encode text the same way: the same vocabulary hash, or, across
  engines (the built-in tiktoken vocabulary and a Hugging Face file), the same ids for a probe text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import fsspec

from schemas.errors import ConfigError
from training.models import TINY
from training.runs import Manifests
from training.shards import TOKEN_ID_LEAF, FooterStatistics

# Text of several kinds (prose, code, a shell line, JSON, accents, CJK, an emoji): two tokenizers that agree on
# all of it are taken for the same one.
PROBE = (
    "The quick brown fox jumps over 13 lazy dogs.\n"
    "def area(r: float) -> float:\n    return 3.14159 * r ** 2\n"
    "$ ls -la /app && grep -rn 'TODO' src/ | head -5\n"
    '{"status": "ok", "items": [1, 2.5, null, true], "path": "C:\\\\Users\\\\x"}\n'
    "Über café naïve — 東京タワー 서울 😀\t\tend"
)
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


def largest_token_id(files: list[str], statistics: FooterStatistics | None = None) -> int | None:
    """The largest id of ``input_ids`` over `files`, from the Parquet statistics; None where a row group has none.
    `statistics`: the footers' maxima, where the caller has them."""
    statistics = FooterStatistics() if statistics is None else statistics
    largest = -1
    for uri in files:
        found = statistics.column_max(uri, TOKEN_ID_LEAF)
        if found is None:
            return None
        largest = max(largest, found)
    return largest


def _shards_tokenizer(manifests: Manifests) -> tuple[dict[str, Any], str] | None:
    """The tokenizer the manifests name (`training.runs.check_same_tokenizer` made them agree) and one run root."""
    for manifest, root in manifests.values():
        tokenizer = (manifest or {}).get("tokenizer")
        if isinstance(tokenizer, dict) and tokenizer.get("vocab_hash"):
            return tokenizer, root
    return None


def _load(spec: str, engine: str | None) -> Any | None:
    """The tokenizer of `spec` where this machine can load it (the built-in vocabulary, an existing file), else None."""
    from stages.tokenizer.engines import DEFAULT_ALIASES, load_tokenizer

    if spec.strip().lower() not in DEFAULT_ALIASES and not os.path.isfile(spec):
        return None
    try:
        return load_tokenizer(spec, engine or None)
    except ConfigError:
        return None


def tiny_vocabulary(files: list[str], manifests: Manifests, statistics: FooterStatistics | None = None) -> int:
    """The embedding rows of the tiny model when ``--tiny-vocab`` is not given: the vocabulary size of the tokenizer
    the manifests name, where it loads here; else the largest token id of the shards plus one (Parquet statistics);
    else the size of the built-in vocabulary, which `lwm run` tokenizes with by default. An id past it is refused
    before the first step, or at the step that meets it, never folded into the embedding."""
    named = _shards_tokenizer(manifests)
    loaded = _load(str(named[0].get("name") or ""), named[0].get("engine")) if named else None
    if loaded is not None:
        return int(loaded.vocab_size)
    top = largest_token_id(files, statistics)
    if top is not None:
        return max(top + 1, 2)
    default = _load("default", None)
    assert default is not None  # the built-in vocabulary always loads
    return int(default.vocab_size)


def id_past_vocabulary(model: str, rows: int, top: int) -> str:
    """The one line that refuses token id `top` for a model of `rows` embedding rows."""
    if model == TINY:
        return (f"--tiny-vocab {rows}: the shards hold token id {top}, which the tiny model would have no embedding "
                f"for; give --tiny-vocab {top + 1} or more, or leave it out (the size of the shards' tokenizer)")
    return (f"--model {model}: the shards hold token id {top}, but the model's vocabulary has {rows} entries; the "
            "shards were tokenized for another model (the run's manifest.json names its tokenizer)")


def check_fits_model(model: str, rows: int | None, files: list[str], manifests: Manifests,
                     statistics: FooterStatistics | None = None) -> None:
    """Refuse, in one line, shards whose token ids the model has no embedding for, or that another tokenizer than
    the model's wrote (see the module docstring; the tiny model has no tokenizer of its own: only the ids matter,
    bounded by the shards' tokenizer where the files hold no statistics of them).
    `rows`: the model's embedding rows (None: not known); `statistics`: the footers' maxima, where the caller has
    them."""
    if rows is None:
        return
    top = largest_token_id(files, statistics)
    if top is not None and top >= rows:
        raise ConfigError(id_past_vocabulary(model, rows, top))
    named = _shards_tokenizer(manifests)
    if named is None or (model == TINY and top is not None):  # the tiny model needs rows for the ids it meets only
        return
    tokenizer, root = named
    description = f"{tokenizer.get('name') or tokenizer.get('engine')} (vocabulary {str(tokenizer['vocab_hash'])[:12]})"
    shards_tokenizer = _load(str(tokenizer.get("name") or ""), tokenizer.get("engine"))
    if model == TINY:  # no statistics of the ids (`lwm run` writes none for list columns): the tokenizer bounds them
        if shards_tokenizer is not None and shards_tokenizer.vocab_size > rows:
            raise ConfigError(
                f"--tiny-vocab {rows}: the shards of {root} were tokenized with {description}, whose ids go up to "
                f"{shards_tokenizer.vocab_size - 1}; give --tiny-vocab {shards_tokenizer.vocab_size} or more, or leave "
                "it out (the size of that tokenizer)"
            )
        return
    if shards_tokenizer is not None and shards_tokenizer.vocab_size > rows:
        raise ConfigError(
            f"--model {model}: the shards of {root} were tokenized with {description}, whose ids go up to "
            f"{shards_tokenizer.vocab_size - 1}, but the model's vocabulary has {rows} entries; train a model of that "
            "tokenizer, or rebuild the shards with the model's (lwm run --tokenizer)"
        )
    model_file = os.path.join(model, "tokenizer.json")
    if not (fsspec.core.url_to_fs(model)[0].isfile(model_file)):
        return
    model_tokenizer = _load(model_file, "tokenizers")
    if model_tokenizer is None or model_tokenizer.vocab_hash == tokenizer["vocab_hash"]:
        return
    if shards_tokenizer is None:
        if tokenizer.get("engine") != "tokenizers":
            return  # another engine's hash, and no tokenizer here to encode with: nothing to compare
        same = False
    else:
        same = shards_tokenizer.encode(PROBE) == model_tokenizer.encode(PROBE)
    if not same:
        raise ConfigError(
            f"--model {model}: its tokenizer.json encodes text differently from {description}, which tokenized the "
            f"shards of {root}; train a model of that tokenizer, or rebuild the shards with the model's "
            "(lwm run --tokenizer)"
        )
