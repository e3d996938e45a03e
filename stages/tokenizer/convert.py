"""Convert a rank vocabulary (tiktoken style) into a Hugging Face ``tokenizers.Tokenizer``.

The result encodes exactly like tiktoken on the same ranks:

- pre-tokenization: the vocabulary's regex as an isolating ``Split``, then ``ByteLevel`` (no
  prefix space, no second regex), with the vocabulary's Unicode normalization before it;
- merges: for every token, every split into two vocabulary tokens, ordered by the merged
  token's rank. Replaying strict BPE on each token to find "the" merge that makes it fails for
  some Qwen tokens (multi-character CJK words that BPE never reaches from their bytes); the
  all-splits list reproduces tiktoken's rule (merge the adjacent pair whose concatenation has the
  lowest rank) instead;
- ``ignore_merges``: a pre-token that is itself in the vocabulary becomes that one token, as
  tiktoken does before running BPE;
- special tokens are added tokens with their own ids, matched before normalization.

Conversion takes seconds for a 250k vocabulary, so the tokenizer.json is cached on disk under
``$XDG_CACHE_HOME/lwmkit/tokenizers`` (``~/.cache/...``), keyed by the vocabulary hash and the
converter version, and written atomically (temporary file, then rename).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tokenizers

from schemas.errors import Notice
from stages.tokenizer.cache import cache_root, write_atomically
from stages.tokenizer.vocab import RankVocabulary, first_line

# Bump when the produced tokenizer.json changes, so stale cache entries are not reused.
CONVERTER_VERSION = 1


def byte_level_alphabet() -> dict[int, str]:
    """The byte → printable character table of byte-level BPE (the GPT-2 convention that
    ``tokenizers``' ByteLevel uses): printable Latin-1 bytes stand for themselves, the others are
    shifted, in byte order, to code points from 256 upwards."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    table: dict[int, str] = {}
    shifted = 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + shifted)
            shifted += 1
    return table


def byte_level_text(token: bytes, table: Mapping[int, str]) -> str:
    """The byte-level string of `token`; `table` is `byte_level_alphabet()` (latin-1 decoding maps
    byte b to code point b, so one `str.translate` does the whole token)."""
    return token.decode("latin-1").translate(table)


def derive_merges(ranks: Mapping[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Every split of every token into two vocabulary tokens, ordered by the merged token's rank
    (splits of one token by the length of their left part)."""
    merges: list[tuple[bytes, bytes]] = []
    for token, _rank in sorted(ranks.items(), key=lambda item: item[1]):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((left, right))
    return merges


def tokenizer_document(vocab: RankVocabulary) -> dict[str, Any]:
    """The tokenizer.json document (a dict) for `vocab`."""
    table = byte_level_alphabet()
    model_vocab = {byte_level_text(token, table): rank for token, rank in vocab.ranks.items()}
    merges = [
        [byte_level_text(left, table), byte_level_text(right, table)] for left, right in derive_merges(vocab.ranks)
    ]
    added_tokens = [
        {
            "id": token_id,
            "content": text,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for text, token_id in sorted(vocab.special_tokens.items(), key=lambda item: item[1])
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": {"type": vocab.normalization} if vocab.normalization else None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": vocab.pattern}, "behavior": "Isolated", "invert": False},
                byte_level,
            ],
        },
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": model_vocab,
            "merges": merges,
        },
    }


def cached_tokenizer_path(vocab: RankVocabulary, cache_dir: Path | None = None) -> Path:
    """Where the converted tokenizer.json of `vocab` is (or will be) cached."""
    directory = (cache_dir or cache_root()) / "tokenizers"
    return directory / f"{vocab.name}-{vocab.vocab_hash}-c{CONVERTER_VERSION}.tokenizer.json"


def convert_rank_vocabulary(vocab: RankVocabulary, cache_dir: Path | None = None) -> tokenizers.Tokenizer:
    """A `tokenizers.Tokenizer` equivalent to tiktoken on `vocab`, from the disk cache when present.

    A cache entry that does not load is rebuilt; a cache directory that cannot be written only
    costs the conversion next time (with a warning).
    """
    path = cached_tokenizer_path(vocab, cache_dir)
    if path.is_file():
        try:
            return tokenizers.Tokenizer.from_file(str(path))
        except Exception as err:  # the Rust side raises plain Exception; the entry is rebuilt below
            warnings.warn(f"rebuilding unreadable tokenizer cache {path}: {first_line(err)}", Notice, stacklevel=2)
    text = json.dumps(tokenizer_document(vocab), ensure_ascii=False)
    try:
        write_atomically(path, text)
    except OSError as err:
        warnings.warn(f"cannot cache converted tokenizer at {path}: {err}", Notice, stacklevel=2)
    return tokenizers.Tokenizer.from_str(text)
