"""The mask category histogram of a run from the sample stage's ``hist.*`` counters.

One record per (domain, pool, template, category) with turns, tokens and weighted tokens; the
manifest keeps it and ``lwm hist`` prints it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def histogram_from_stats(stats) -> dict[str, Any]:
    """Records (domain, pool, template, category, turns, tokens, weighted) from sample-stage counters."""
    cells: dict[tuple[str, ...], dict[str, float]] = defaultdict(lambda: {"turns": 0, "tokens": 0, "weighted": 0.0})
    for key, value in stats.to_dict().items():
        if not key.startswith("hist."):
            continue
        _, domain, pool, template, category, field = key.split(".")
        cells[(domain, pool, template, category)][field] += value
    records = [
        {"domain": d, "pool": p, "template": t, "category": c, "turns": int(v["turns"]), "tokens": int(v["tokens"]),
         "weighted": round(float(v["weighted"]), 4)}
        for (d, p, t, c), v in sorted(cells.items())
    ]
    return {"records": records}
