"""Segment-wise tokenization with per-character-span weights projected onto tokens (SPEC §7–8).

Text is tokenized in *pieces* whose junctions are pre-token boundaries, so the concatenated ids
equal the ids of the whole text; weights attach to character spans and each token takes the
weight of the span holding its last byte. Two facts make reuse exact for byte-level BPE with a
GPT-4/Qwen-style pre-tokenizer (letters, digits, punctuation runs, whitespace runs):

- a special token is always a boundary (ChatML messages are tokenized independently; only the
  renderer places special tokens, by id, and every text is encoded as ordinary text);
- a text ending in a letter or digit can be followed by anything: the pre-token before the
  junction ends there. Otherwise only the trailing run of non-alphanumeric characters can merge
  with what follows, so ``tokens(A + B) = tokens(A)[:n] + tokens(A[s:] + B)`` where ``s`` starts
  that run and ``n`` tokens cover ``A[:s]`` (`extend`). That is what lets a turn's observation be
  tokenized once and reused in every sample that contains it.

Tokenizers whose pre-tokenizer is not of that family fall back to tokenizing whole messages.
`check_segmentwise` compares against whole-text tokenization; the sample stage runs it on the
first sample of each task and the tests run it everywhere.
"""

from __future__ import annotations

import itertools
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar

import numpy as np
import regex

from schemas.errors import ConfigError
from stages.memo import TextMemo
from stages.tokenizer.engines import tokenizer_file_problem

_PARAGRAPH_START = re.compile(r"(?<=\n\n)(?=\S)")
_ALNUM_START = regex.compile(r"[\p{L}\p{M}\p{N}]")
# Searched from the end of the text backwards, so finding the last letter/mark/digit costs the
# length of the trailing run, not of the whole text (observations run to many kilobytes).
_LAST_ALNUM = regex.compile(r"[\p{L}\p{M}\p{N}]", flags=regex.REVERSE)
_SHORT_CHARS = 48
_SHORT_ENTRIES = 4096
_TEXT_ENTRIES = 64
_KEPT_BUDGET = 32 << 20
_KEPT_LONGEST = 1 << 16
_ARRAY_BYTES = 112  # what an empty numpy array object costs
R = TypeVar("R")
_KNOWN_PATTERN_MARKERS = (r"\p{L}", r"\p{N}", r"\s+(?!\S)")


@dataclass
class TokenCounter:
    """Characters and calls passed to the tokenizer (a deterministic measure of tokenization work)."""

    chars: int = 0
    calls: int = 0


@dataclass
class SegmentTokenizer:
    """Wraps a `stages.tokenizer` tokenizer with byte lengths, reuse rules and a work counter."""

    tok: object
    lengths: np.ndarray
    splice_ok: bool
    normalization: str | None
    counter: TokenCounter = field(default_factory=TokenCounter)
    # Short junction strings ("```\n\n", "}\n</predicted_observation>") recur in every sample;
    # their ids are remembered so all-turn expansion does not pay a tokenizer call per sample.
    _short: dict[str, list[int]] = field(default_factory=dict)
    # Whole texts that recur across trajectories (a domain's system prompt with its tool list);
    # the most recent few are remembered by `encode_recurring`.
    _texts: dict[str, list[int]] = field(default_factory=dict)
    # Ids of texts encoded ahead on another thread (`stages.tokenizer.ahead`), taken instead of a tokenizer call.
    given: dict[str, np.ndarray] = field(default_factory=dict)

    def norm(self, text: str) -> str:
        return unicodedata.normalize(self.normalization, text) if self.normalization else text

    def __post_init__(self) -> None:
        # Longer texts that recur (a repeated command, an unchanged screen, the same error) are tokenized once
        # per task while they are kept, as read-only int32 arrays: a kept text costs its characters and its
        # array's bytes.
        # The memo's function holds the tokenizer and counter, not `self`: a reference cycle would keep a
        # finished task's memo alive until the next full garbage collection.
        self._kept = TextMemo(_tokenize_counted(self.tok.encode_array, self.counter, self.given), _KEPT_BUDGET,
                              _KEPT_LONGEST, cost=lambda ids: ids.nbytes + _ARRAY_BYTES)
        # Short texts are asked for as lists: an array per call would cost more than the few ids it holds.
        self._tokenize_short = _tokenize_counted(self.tok.encode, self.counter, {})

    def kept_texts(self) -> dict[str, np.ndarray]:
        """The texts the memo holds now (read-only: for `stages.tokenizer.ahead`, which skips them)."""
        return self._kept.known

    def encode(self, text: str) -> list[int]:
        if len(text) > _SHORT_CHARS:
            return self._kept(text).tolist()
        if text in self._short:
            return list(self._short[text])
        ids = self._tokenize_short(text)
        if len(self._short) < _SHORT_ENTRIES:
            self._short[text] = list(ids)
        return ids

    def encode_array(self, text: str) -> np.ndarray:
        """`encode` as a read-only int32 array, for the long texts that go straight into a sample's arrays (an
        observation): no Python int per token on the way. The array may be the memo's own: never write to it."""
        if len(text) > _SHORT_CHARS:
            return self._kept(text)
        return _frozen(np.array(self.encode(text), dtype=np.int32))

    def encode_recurring(self, text: str) -> list[int]:
        """`encode` for a text likely seen before in this process, whole or in paragraphs (same ids, remembered
        by value): a system prompt, whose template paragraphs recur around the trajectory's own fields."""
        ids = self._texts.get(text)
        if ids is None:
            ids = self.encode_paragraphs(text)
            if len(self._texts) >= _TEXT_ENTRIES:
                del self._texts[next(iter(self._texts))]
            self._texts[text] = ids
        return list(ids)

    def encode_paragraphs(self, text: str) -> list[int]:
        """`encode` one paragraph at a time, so paragraphs that recur in other texts are tokenized once while
        the memo keeps them. A paragraph here runs up to and including a blank line (``"\n\n"``) that the next
        character, not whitespace, follows: then the junction rule (`can_prepend`) holds and the ids are the
        whole text's; where it does not (a mark after the break, a tokenizer outside the family), the text is
        tokenized whole."""
        pieces = _PARAGRAPH_START.split(text)
        if len(pieces) == 1 or not all(self.can_prepend(a, b) for a, b in itertools.pairwise(pieces)):
            return self.encode(text)
        ids: list[int] = []
        for piece in pieces:
            ids += self.encode(piece)
        return ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        self.counter.chars += sum(len(t) for t in texts)
        self.counter.calls += 1
        return self.tok.encode_batch(texts)

    def byte_len(self, ids: list[int]) -> int:
        return int(self.lengths[ids].sum()) if ids else 0

    def extend(self, ids_a: list[int] | np.ndarray, text_a: str, text_b: str) -> list[int] | np.ndarray:
        """Ids of ``text_a + text_b`` given the ids of `text_a`, re-tokenizing only the junction; a list, or a
        read-only int32 array where `ids_a` is an array (`encode_array`)."""
        if isinstance(ids_a, np.ndarray):
            return self._extend(ids_a, text_a, text_b, self.encode_array, _concat_arrays)
        return self._extend(ids_a, text_a, text_b, self.encode, _concat_lists)

    def _extend(self, ids_a, text_a: str, text_b: str, encode, concat):
        if not text_b:
            return concat(ids_a, [])
        if not text_a:
            return encode(text_b)
        if not self.splice_ok or _unassigned(text_b[0]):
            return encode(text_a + text_b)
        s = _trailing_run_start(text_a)
        if _unassigned(text_a[max(0, s - 1):]):  # the junction's characters, as far back as the last letter
            return encode(text_a + text_b)
        if _ends_alnum(text_a) and not _ALNUM_START.match(text_b):
            return concat(ids_a, self.encode(text_b))
        if s == 0 or s == len(text_a):
            return encode(text_a + text_b)
        # The tokens covering the trailing run, counted from the end (the run is short, the text
        # need not be): a token boundary must fall exactly where the run starts.
        run_bytes = len(text_a[s:].encode("utf-8"))
        lengths = self.lengths
        n, covered = len(ids_a), 0
        while n > 0 and covered < run_bytes:
            n -= 1
            covered += int(lengths[ids_a[n]])
        if n == 0 or covered != run_bytes:
            return encode(text_a + text_b)
        return concat(ids_a[:n], self.encode(text_a[s:] + text_b))

    def can_prepend(self, text_a: str, text_b: str) -> bool:
        """Whether ``tokens(A + B) == tokens(A) + tokens(B)`` is guaranteed by the junction rule."""
        if not text_a or not text_b:
            return True
        if not self.splice_ok or _starts_with_mark(text_b) or _unassigned(text_a[-1] + text_b[0]):
            return False
        if _ends_alnum(text_a):
            return not _ALNUM_START.match(text_b)
        # After a run that ends in a newline, a following char that is not whitespace/newline
        # starts a new pre-token (punctuation runs absorb only trailing newlines).
        return text_a.endswith("\n") and not text_b[0].isspace()


def _tokenize_counted(encode: Callable[[str], R], counter: TokenCounter, given: dict[str, R]) -> Callable[[str], R]:
    """A tokenizer call (`encode` or `encode_array`), counted; ids offered in `given` are taken (once) instead."""

    def tokenize(text: str) -> R:
        counter.chars += len(text)
        counter.calls += 1
        ids = given.pop(text, None) if given else None
        return encode(text) if ids is None else ids

    return tokenize


def _frozen(ids: np.ndarray) -> np.ndarray:
    ids.flags.writeable = False
    return ids


def _concat_lists(a, b: list[int]) -> list[int]:
    return list(a) + b


def _concat_arrays(a: np.ndarray, b: list[int]) -> np.ndarray:
    if not b:
        return a
    return _frozen(np.concatenate([a, np.array(b, dtype=np.int32)]))


def _ends_alnum(text: str) -> bool:
    """Whether the last character of `text` is a letter, mark or digit."""
    return bool(text) and _ALNUM_START.match(text, len(text) - 1) is not None


def _trailing_run_start(text: str) -> int:
    """Where the trailing run of characters that are not letters, marks or digits starts."""
    last = _LAST_ALNUM.search(text)
    return last.end() if last else 0


def _unassigned(text: str) -> bool:
    """Whether `text` holds a character unassigned in this Python's Unicode tables. The junction rule asks whether a
    character is a letter, mark or digit, and the answer for such a character depends on the Unicode version of
    whoever asks (`regex`, the tokenizer's own pre-tokenizer, `unicodedata` may each know another one): a junction
    next to one is tokenized whole."""
    return not text.isascii() and any(unicodedata.category(c) == "Cn" for c in text)


def _starts_with_mark(text: str) -> bool:
    return bool(text) and unicodedata.category(text[0]).startswith("M")


def _length_table(tokens: dict, specials: dict[str, int]) -> np.ndarray:
    """Byte length by id: ``len`` of each token of `tokens` (token → id), the UTF-8 length of each special
    token's text; built with numpy, not a Python loop over the vocabulary."""
    count = len(tokens)
    ids = np.fromiter(tokens.values(), dtype=np.int64, count=count)
    lengths = np.zeros(max(int(ids.max()), max(specials.values(), default=0)) + 1, dtype=np.int64)
    lengths[ids] = np.fromiter(map(len, tokens), dtype=np.int64, count=count)
    for text, idx in specials.items():
        lengths[idx] = len(text.encode("utf-8"))
    return lengths


@lru_cache(maxsize=8)
def _lengths_for(key: str, tok) -> tuple[np.ndarray, bool, str | None]:
    engine = getattr(tok, "engine", "")
    if engine == "tiktoken":
        vocab = tok.vocab
        lengths = _length_table(vocab.ranks, vocab.special_tokens)
        splice = all(m in vocab.pattern for m in _KNOWN_PATTERN_MARKERS)
        return lengths, splice, vocab.normalization
    backend = tok._backend
    doc = tok.document
    problem = tokenizer_file_problem(doc, chatml=False)  # the run's checks saw the file first (`pipeline.preflight`)
    if problem:
        raise ConfigError(f"tokenizer {tok.name}: {problem}")
    vocab = backend.get_vocab(with_added_tokens=False)
    added = {t.content: i for i, t in backend.get_added_tokens_decoder().items()}
    lengths = _length_table(vocab, added)  # a byte-level vocabulary spells each byte as one character
    pattern = json.dumps(doc.get("pre_tokenizer"))
    splice = all(m.replace("\\", "\\\\") in pattern for m in _KNOWN_PATTERN_MARKERS)
    normalizer = json.dumps(doc.get("normalizer"))
    norm = "NFC" if "NFC" in normalizer else None
    return lengths, splice, norm


def segment_tokenizer(tok) -> SegmentTokenizer:
    """A `SegmentTokenizer` over a loaded tokenizer (byte-length tables cached per process)."""
    # Loaded tokenizers are one object per spec and process (`load_tokenizer`), so name and engine
    # identify the tables; the vocabulary hash would cost a canonical re-serialization per process.
    key = json.dumps([tok.name, getattr(tok, "engine", "")])
    lengths, splice, norm = _lengths_for(key, tok)
    return SegmentTokenizer(tok, lengths, splice, norm)


def project_weights(
    seg: SegmentTokenizer, spans: list[tuple[str, float]], return_index: bool = False
) -> tuple[list[int], list]:
    """Tokenize the concatenated spans at once; each token takes the weight of its last byte's span.

    With `return_index`, the second list holds each token's span index instead of its weight.
    """
    text = "".join(t for t, _ in spans)
    ids = seg.encode(text)
    ends = np.cumsum(seg.lengths[ids]) if ids else np.zeros(0, dtype=np.int64)
    bounds = np.cumsum([len(t.encode("utf-8")) for t, _ in spans])
    idx = np.minimum(np.searchsorted(bounds, ends - 1, side="right"), len(spans) - 1)
    if return_index:
        return ids, idx.tolist()
    return ids, np.array([w for _, w in spans], dtype=np.float64)[idx].tolist()


def encode_rendered(tok, parts: list[tuple[str, bool]]) -> list[int]:
    """Ids of a rendered sample given as ``(text, is_special)`` parts: each special part becomes its
    special id, each run of ordinary parts is encoded whole as text."""
    ids: list[int] = []
    run: list[str] = []
    for text, special in parts:
        if not special:
            run.append(text)
            continue
        if run:
            ids += tok.encode("".join(run))
            run = []
        ids.append(tok.token_id(text))
    if run:
        ids += tok.encode("".join(run))
    return ids


def check_segmentwise(seg: SegmentTokenizer, ids: list[int], parts: list[tuple[str, bool]]) -> None:
    """Raise if segment-wise ids differ from tokenizing the whole rendered sample (`encode_rendered`)."""
    whole = encode_rendered(seg.tok, parts)
    if whole != list(ids):
        first = next((i for i, (a, b) in enumerate(zip(whole, ids)) if a != b), min(len(whole), len(ids)))
        raise AssertionError(
            f"segment-wise tokenization differs from whole-text tokenization at token {first} "
            f"({len(ids)} vs {len(whole)} tokens)"
        )
