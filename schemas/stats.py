"""One counting mechanism for every stage: named counters that merge across tasks.

Stages never print; they add to a `Stats` and the executor merges the task results into the
manifest. Keys are dotted paths (``records.read``, ``quarantined.malformed_json``) so the
manifest can nest them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class Stats:
    """Counters (integers or floats) keyed by dotted names; merge by addition."""

    def __init__(self, counts: dict[str, float] | None = None) -> None:
        self.counts: Counter = Counter(counts or {})

    def add(self, key: str, n: float = 1) -> None:
        self.counts[key] += n

    def get(self, key: str) -> float:
        return self.counts.get(key, 0)

    def merge(self, other: Stats | dict[str, float]) -> Stats:
        self.counts.update(other.counts if isinstance(other, Stats) else other)
        return self

    def with_prefix(self, prefix: str) -> dict[str, float]:
        """Counters under ``prefix.`` with the prefix removed."""
        p = prefix + "."
        return {k[len(p) :]: v for k, v in sorted(self.counts.items()) if k.startswith(p)}

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in sorted(self.counts.items())}

    def nested(self) -> dict[str, Any]:
        """The counters as a nested dict (``a.b`` → ``{"a": {"b": n}}``), keys sorted."""
        out: dict[str, Any] = {}
        for key, value in sorted(self.counts.items()):
            node = out
            parts = key.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    break
            else:
                node[parts[-1]] = value
        return out


def merge_all(items: list[dict[str, float]]) -> Stats:
    total = Stats()
    for item in items:
        total.merge(item)
    return total
