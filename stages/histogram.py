"""The mask category histogram of a run from the sample stage's ``hist.*`` counters.

One record per (domain, pool, template, category) with turns, tokens and weighted tokens; the
manifest keeps it and ``lwm hist`` prints it (`aggregate` groups records, `render_table` prints a group).
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


def aggregate(records: list[dict[str, Any]], by: tuple[str, ...], keep: dict[str, float]) -> dict[str, Any]:
    """Group records by `by` (+ category) into rows with percentages within each group."""
    groups: dict[tuple[str, ...], dict[str, dict[str, float]]] = defaultdict(dict)
    for r in records:
        g = tuple(r[k] for k in by)
        cell = groups[g].setdefault(r["category"], {"turns": 0, "tokens": 0, "weighted": 0.0})
        cell["turns"] += r["turns"]
        cell["tokens"] += r["tokens"]
        cell["weighted"] += r["weighted"]
    out = {}
    for g, cats in sorted(groups.items()):
        turns = sum(c["turns"] for c in cats.values()) or 1
        tokens = sum(c["tokens"] for c in cats.values()) or 1
        rows = {}
        for cat in sorted(cats, key=lambda c: (list(keep).index(c) if c in keep else len(keep), c)):
            c = cats[cat]
            rows[cat] = {
                "turns": int(c["turns"]),
                "pct_turns": round(100 * c["turns"] / turns, 2),
                "tokens": int(c["tokens"]),
                "pct_tokens": round(100 * c["tokens"] / tokens, 2),
                "keep": keep.get(cat),
                "weighted_tokens": round(c["weighted"], 2),
            }
        out["/".join(g) if g else "total"] = rows
    return out


def render_table(rows: dict[str, dict[str, Any]], title: str = "total") -> str:
    head = f"{'category':<12} {'turns':>9} {'% turns':>8} {'tokens':>12} {'% tokens':>9} {'keep':>6} {'weighted':>12}"
    lines = [f"== {title} ==", head, "-" * len(head)]
    for cat, r in rows.items():
        keep = "" if r["keep"] is None else f"{r['keep']:.2f}"
        lines.append(
            f"{cat:<12} {r['turns']:>9,} {r['pct_turns']:>7.1f}% {r['tokens']:>12,} {r['pct_tokens']:>8.1f}% "
            f"{keep:>6} {r['weighted_tokens']:>12,.1f}"
        )
    return "\n".join(lines)
