"""Turn classification: statistics → category (first matching rule of the table) → keep ratio.

`score_turn` is the whole per-turn step of SPEC §5 in one call::

    >>> score_turn('{"name": "send_email", "arguments": {"to": "ana@example.com"}}', "sent")
    TurnScore(stats=TurnStats(ol=0.0, nov=1.0, jac=0.0, r=0.06451612903225806, obs_chars=4), category='action', keep=1.0)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from masking.stats import TurnStats, turn_stats
from masking.table import CategoryTable, default_table
from masking.words import word_set
from schemas.errors import ConfigError


class TurnScore(NamedTuple):
    """What the masking step records per observation: its statistics, category and keep ratio."""

    stats: TurnStats
    category: str
    keep: float


def classify(stats: TurnStats, table: CategoryTable | None = None) -> str:
    """The name of the first category of `table` (default: SPEC §5) whose rule `stats` satisfy."""
    table = default_table() if table is None else table
    for category, matches in zip(table.categories, table.predicates):
        if matches(stats):
            return category.name
    # Unreachable for a checked table, whose last rule is 'otherwise'; kept loud on purpose.
    raise AssertionError(f"no category matched {stats!r}: the table has no catch-all")


def keep_ratio(category: str, table: CategoryTable | None = None) -> float:
    """The keep ratio of the category named `category` in `table` (default: SPEC §5)."""
    table = default_table() if table is None else table
    try:
        return table.keep_by_name[category]
    except KeyError:
        raise ConfigError(f"unknown turn category {category!r} (the table has {', '.join(table.names)})") from None


def score_turn(action: str, observation: str, table: CategoryTable | None = None,
               words: Callable[[str], frozenset[str]] = word_set) -> TurnScore:
    """Statistics, category and keep ratio of one (action, observation) turn (`words`: see `turn_stats`)."""
    table = default_table() if table is None else table
    stats = turn_stats(action, observation, words)
    category = classify(stats, table)
    return TurnScore(stats, category, table.keep_by_name[category])
