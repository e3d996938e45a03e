"""Word sets: the lowercased, deduplicated words of a text, the unit the masking statistics count.

A word is a run that starts with a Unicode letter, digit or underscore (``\\p{L}``, ``\\p{N}``,
``_``) and continues with more of them or with combining marks (``\\p{M}``). Marks are allowed
inside a word, never at its start, so that

- a decomposed accent stays in its word (``"cafe\\u0301"`` is one word, not ``cafe`` plus a
  stray mark), and so does the dotted ``i̇`` that ``"İ".lower()`` produces;
- scripts whose vowel signs are marks (Devanagari, Thai, Tamil, ...) are not cut into
  consonant fragments at every vowel;
- a mark with no base letter (after a space) is not a word of its own.

Texts are lowercased with ``str.lower`` and not Unicode-normalized: the statistics are computed
on the turns exactly as stored, so anyone can recompute them from the trajectories layer.
Everything else (punctuation, symbols, whitespace, JSON syntax) separates words, so
``send_email`` is one word and ``/data/a.csv`` is the three words ``data``, ``a``, ``csv``.

This runs on both texts of every turn, so it has a fast path: a lowercased ASCII text (the
common case: JSON, code, shell output) has every character outside ``[a-z0-9_]`` turned into a
space and is split on whitespace, which gives exactly the same words there (the only ASCII
letters, digits and underscore are ``[a-z0-9_]`` once lowercased) at about twice the speed of
the pattern (``str.translate`` of ASCII text and ``str.split`` are single C loops, where a
``findall`` makes a match object's worth of work per word). A text whose only non-ASCII
characters are separators (box drawing, daggers, dashes, symbols: what tool outputs hold) takes
the same path once each of them is replaced by ``?``; one that holds a non-ASCII letter, digit or
mark is scanned with the pattern, or, where such characters are few, only its pieces that hold one are:
ASCII separators and whitespace never belong to a word, so the text is cut at them first (over its UTF-8
bytes, one C loop) and the pattern runs on the non-ASCII pieces alone (in the real corpus of the benchmark,
where 0.4% of such texts' characters are non-ASCII, this halved the time of those texts; in a text of one
non-ASCII script the pieces are most of it, and the pattern over the whole text is faster).
"""

from __future__ import annotations

import re

import regex

WORD_PATTERN = r"[\p{L}\p{N}_][\p{L}\p{N}\p{M}_]*"
"""The word pattern (``regex`` syntax); documented above, applied to the lowercased text."""

_UNICODE_WORD = regex.compile(WORD_PATTERN)
# every ASCII character that is not a word character of a lowercased text → a space
_ASCII_SEPARATORS = str.maketrans({c: " " for c in map(chr, range(128)) if not re.fullmatch(r"[a-z0-9_]", c)})
# a non-ASCII character that can be part of a word (a lookbehind after a plain class scans fastest)
_NON_ASCII_WORD_CHAR = regex.compile(r"[^\x00-\x7f](?<=[\p{L}\p{N}\p{M}])")
# the same separators over UTF-8 bytes: an ASCII byte outside [a-z0-9_] → a space; bytes of non-ASCII characters
# (all 0x80 and above) stay, so the result is still valid UTF-8
_ASCII_SEPARATOR_BYTES = bytes(c if c >= 0x80 or re.fullmatch(rb"[a-z0-9_]", bytes([c])) else 0x20 for c in range(256))
# cut at the ASCII separators first while the UTF-8 bytes of non-ASCII characters are at most this share of
# the text's length (measured: pieces first is faster below about a quarter, the pattern over all above)
_PIECES_SHARE = 8


def word_set(text: str) -> frozenset[str]:
    """The set of lowercased words of `text` (see the module docstring for what a word is)."""
    lowered = text.lower()
    # str.isascii is O(1) in CPython; lowercasing first matters because a few non-ASCII
    # capitals lower to ASCII (KELVIN SIGN -> "k") and then both patterns agree.
    if not lowered.isascii():
        if _NON_ASCII_WORD_CHAR.search(lowered):
            raw = lowered.encode("utf-8", "surrogatepass")
            if (len(raw) - len(lowered)) * _PIECES_SHARE > len(lowered):
                return frozenset(_UNICODE_WORD.findall(lowered))
            return _piecewise(raw.translate(_ASCII_SEPARATOR_BYTES).decode("utf-8", "surrogatepass").split())
        lowered = lowered.encode("ascii", "replace").decode("ascii")  # each non-ASCII character → "?"
    return frozenset(lowered.translate(_ASCII_SEPARATORS).split())


def _piecewise(pieces: list[str]) -> frozenset[str]:
    """The words of a text cut at its ASCII separators and whitespace (neither is ever part of a word): an ASCII
    piece is one word as it stands, a non-ASCII piece is scanned with the pattern."""
    words = set()
    find = _UNICODE_WORD.findall
    for piece in pieces:
        if piece.isascii():
            words.add(piece)
        else:
            words.update(find(piece))
    return frozenset(words)
