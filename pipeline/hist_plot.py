"""``lwm hist --png``: tokens per category (bars) and OL vs Nov per turn (scatter, rule lines drawn)."""

from __future__ import annotations

import posixpath
from typing import Any

from schemas.errors import ConfigError

MAX_POINTS = 20000


def check_png_path(path: str) -> None:
    """Refuse, before any shard is read, a `--png` name whose extension says another format: the chart is a PNG,
    written to exactly the path given (with no extension, or ``.png``)."""
    extension = posixpath.splitext(path)[1]
    if extension and extension.lower() != ".png":
        raise ConfigError(f"--png {path}: the chart is written as PNG; give a name ending in .png (or none)")


def _turn_points(run_dir: str) -> list[tuple[float, float, str]]:
    import pyarrow.parquet as pq

    from pipeline.outputs import out_fs

    fs, base = out_fs(run_dir)
    points: list[tuple[float, float, str]] = []
    for path in sorted(p for p in fs.find(posixpath.join(base, "shards")) if p.endswith(".parquet")):
        table = pq.read_table(fs.open(path, "rb"), columns=["pool", "turn_category", "turn_stats"])
        for pool, cats, stats in zip(*(table.column(c).to_pylist() for c in ("pool", "turn_category", "turn_stats"))):
            idx = range(len(cats)) if pool == "cpt" else [len(cats) - 1]
            points.extend((stats[k]["ol"], stats[k]["nov"], cats[k]) for k in idx)
            if len(points) >= MAX_POINTS:
                return points[:MAX_POINTS]
    return points


def write_png(run_dir: str, records: list[dict[str, Any]], keep: dict[str, float], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--png needs matplotlib: pip install 'lwmkit[viz]'") from None
    cats = list(keep)
    tokens = {c: 0 for c in cats}
    weighted = {c: 0.0 for c in cats}
    for r in records:
        tokens[r["category"]] = tokens.get(r["category"], 0) + r["tokens"]
        weighted[r["category"]] = weighted.get(r["category"], 0.0) + r["weighted"]
    colors = {c: plt.cm.tab10(i % 10) for i, c in enumerate(tokens)}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    names = list(tokens)
    ax1.bar(names, [tokens[c] for c in names], color=[colors[c] for c in names], alpha=0.45, label="tokens")
    ax1.bar(names, [weighted[c] for c in names], color=[colors[c] for c in names], label="weighted tokens")
    ax1.set_title("Observation tokens per category")
    ax1.set_ylabel("tokens")
    ax1.tick_params(axis="x", rotation=30)
    ax1.legend()
    points = _turn_points(run_dir)
    for c in names:
        xs = [p[0] for p in points if p[2] == c]
        ys = [p[1] for p in points if p[2] == c]
        if xs:
            ax2.scatter(xs, ys, s=6, alpha=0.5, color=colors[c], label=c)
    for x in (0.5, 0.7):
        ax2.axvline(x, color="gray", lw=0.8, ls="--")
    for y in (0.3, 0.5, 0.6):
        ax2.axhline(y, color="gray", lw=0.8, ls="--")
    ax2.set_xlim(-0.02, 1.02)
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_xlabel("OL (action words echoed)")
    ax2.set_ylabel("Nov (new observation words)")
    ax2.set_title("Turns by OL and Nov (default rule boundaries dashed)")
    ax2.legend(markerscale=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")  # the format named: a name without extension is written as it is
    plt.close(fig)
