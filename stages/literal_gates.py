"""Regex alternations with a literal gate: search only the alternatives whose literal is in the text.

A case-insensitive alternation of a dozen phrases, tried at every position of a tool output of tens of
kilobytes, costs far more than asking whether each phrase's literal occurs in the lowercased text.
`Alternation.found` answers exactly what ``pattern.search`` answers, only cheaper.
"""

from __future__ import annotations

import re

# Characters other than A-Z that a case-insensitive `re` pattern matches to an ASCII letter (its simple
# lowercase or `re`'s case equivalences): İ and dotless ı (i), long s ſ (s), the Kelvin sign (k).
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def fold_text(text: str) -> str:
    """`text` lowercased so that whatever a ``(?i)`` ASCII literal matches in it reads as that literal."""
    # `in` answers at once for a text stored with narrower characters (ASCII, Latin-1); translate is slow
    if "\u0130" in text or "\u0131" in text or "\u017f" in text:
        return text.translate(_FOLD).lower()
    return text.lower()  # the Kelvin sign lowercases to k by itself


class Alternation:
    """A regex written as alternatives, each with a lowercase literal that every match of it contains.

    `pattern` is the one regex; `found` answers ``bool(pattern.search(text))`` by searching only the
    alternatives whose literal occurs in `fold_text(text)`, instead of trying every alternative at
    every position of a long text (a tool output of tens of kilobytes).
    """

    def __init__(self, flags: str, alternatives: tuple[tuple[str, str], ...]) -> None:
        self.alternatives = alternatives
        self.pattern = re.compile(flags + "|".join(alt for alt, _ in alternatives))
        self._parts = tuple((re.compile(flags + alt), literal) for alt, literal in alternatives)

    def found(self, text: str, folded: str | None = None) -> bool:
        folded = fold_text(text) if folded is None else folded
        return any(literal in folded and part.search(text) for part, literal in self._parts)
