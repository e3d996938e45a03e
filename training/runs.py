"""What the runs behind a training set must agree on, read from their ``manifest.json``.

Shards hold token ids, not text: an id means a token only under the tokenizer that wrote it, so
shards of runs tokenized differently cannot be trained on together (the model would learn one
embedding for unrelated pieces of text, and nothing would say so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.errors import ConfigError

Manifests = Mapping[str, tuple[dict[str, Any] | None, str]]  # `training.long_samples.run_manifests`


def _tokenizer_of(manifest: dict[str, Any] | None) -> tuple[str, str] | None:
    """(what identifies the tokenizer, how to name it) from a run's manifest; None where it does not say."""
    tokenizer = (manifest or {}).get("tokenizer")
    if not isinstance(tokenizer, dict):
        return None
    vocab = str(tokenizer.get("vocab_hash") or "")
    if not vocab:  # a name alone cannot be compared with another run's vocabulary hash
        return None
    name = str(tokenizer.get("name") or tokenizer.get("engine") or "?")
    return vocab, f"{name} (vocabulary {vocab[:12]})"


def check_same_tokenizer(manifests: Manifests) -> None:
    """Refuse, in one line naming two runs and their tokenizers, shards of runs whose manifests name different
    tokenizers. Runs without a manifest, or whose manifest predates the field, are not compared."""
    first: tuple[str, str, str] | None = None  # identity, description, run root
    for manifest, root in manifests.values():
        found = _tokenizer_of(manifest)
        if found is None:
            continue
        if first is None:
            first = (*found, root)
        elif found[0] != first[0]:
            raise ConfigError(
                f"--shards: the run {first[2]} was tokenized with {first[1]} and the run {root} with {found[1]}; "
                "a token id means different text under each, so train on the shards of one tokenizer"
            )
