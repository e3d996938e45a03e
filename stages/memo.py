"""A bounded memo of a function of one text, for the per-text work that agent logs repeat.

Agent logs repeat whole texts: a screen that did not change, the same listing or error, the same command,
a shared system prompt. The per-text steps of a task (dedup normalization, tokenization, the masking word
sets) each cost time in proportion to a text's length, so a task keeps the results of recent texts and
does each distinct one once. The results are the function's own, so outputs do not change; only the
work does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

R = TypeVar("R")


class TextMemo(Generic[R]):
    """`fn` that keeps the results of recent texts.

    Texts of at most `longest` characters are kept, each costing its length plus `cost(result)`, until what
    is kept would pass `budget`; then all are dropped at once (repeats are mostly near each other: within a
    trajectory, or its neighbours in a part, so a recency order is not worth its upkeep). A result is
    returned as kept, shared by every caller: keep only results nobody changes (strings, frozensets, or
    copy on the way out). A result of None is never kept.
    """

    def __init__(self, fn: Callable[[str], R], budget: int, longest: int,
                 cost: Callable[[R], int] = len, many: Callable[[list[str]], list[R]] | None = None) -> None:
        self.fn, self.budget, self.longest, self.cost, self.fn_many = fn, budget, longest, cost, many
        self.known: dict[str, R] = {}
        self.held = 0  # the sum of the kept texts' lengths and their results' costs

    def __call__(self, text: str) -> R:
        out = self.known.get(text)
        if out is not None:
            return out
        out = self.fn(text)
        self._keep(text, out)
        return out

    def many(self, texts: Sequence[str]) -> list[R]:
        """``[self(t) for t in texts]``, with the texts not kept computed together by `many` (the constructor's:
        a function equal to ``lambda texts: [fn(t) for t in texts]``, for work that is cheaper in bulk)."""
        if self.fn_many is None:
            return [self(t) for t in texts]
        known = self.known
        out = [known.get(t) for t in texts]
        missing = list(dict.fromkeys(t for t, r in zip(texts, out, strict=True) if r is None))
        if missing:
            made = dict(zip(missing, self.fn_many(missing), strict=True))
            out = [made[t] if r is None else r for t, r in zip(texts, out, strict=True)]
            for text, result in made.items():
                self._keep(text, result)
        return out

    def _keep(self, text: str, out: R | None) -> None:
        if len(text) <= self.longest and out is not None:
            size = len(text) + self.cost(out)
            if self.held + size > self.budget:
                self.known.clear()
                self.held = 0
            self.known[text] = out
            self.held += size
