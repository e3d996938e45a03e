"""``lwm hist``: the mask category histogram of a run, from its shards or its manifest.

Counted per observation that a sample trains on: every observation of a cpt sample, the target
observation of an sft or eval sample, the reference turn of an rl sample (tokens 0: rl stores no
weights). Columns: turns, % turns, tokens, % tokens, keep, weighted tokens.
"""

from __future__ import annotations

import json
import posixpath
from collections import defaultdict
from typing import Any

import click
import numpy as np

from pipeline.cli.run_files import finished_manifest
from pipeline.errors import handle_errors
from schemas.errors import ConfigError
from stages.histogram import aggregate, render_table
from stages.ingest.reading import is_local

KEYS = ("domain", "pool", "template", "category")


def histogram_from_shards(root: str) -> dict[str, Any]:
    """The same records computed from the shard files themselves."""
    import polars as pl

    from pipeline.outputs import out_fs

    fs, base = out_fs(root)
    files = sorted(p for p in fs.find(posixpath.join(base, "shards")) if p.endswith(".parquet"))
    cells: dict[tuple[str, ...], dict[str, float]] = defaultdict(lambda: {"turns": 0, "tokens": 0, "weighted": 0.0})
    for path in files:
        with fs.open(path, "rb") as f:
            df = pl.read_parquet(f)
        has_weights = "loss_weight" in df.columns
        cols = ["domain", "pool", "template", "turn_category"] + (["turn_spans", "loss_weight"] if has_weights else [])
        for row in df.select(cols).iter_rows(named=True):
            cats = row["turn_category"]
            if not has_weights:
                cell = cells[(row["domain"], row["pool"], row["template"], cats[0])]
                cell["turns"] += 1
                continue
            cum = np.concatenate([[0.0], np.cumsum(np.asarray(row["loss_weight"], dtype=np.float64))])
            idx = range(len(cats)) if row["pool"] == "cpt" else [len(cats) - 1]
            for k in idx:
                span = row["turn_spans"][k]
                cell = cells[(row["domain"], row["pool"], row["template"], cats[k])]
                cell["turns"] += 1
                cell["tokens"] += span["end"] - span["start"]
                cell["weighted"] += cum[span["end"]] - cum[span["start"]]
    records = [
        {"domain": d, "pool": p, "template": t, "category": c, "turns": int(v["turns"]), "tokens": int(v["tokens"]),
         "weighted": round(float(v["weighted"]), 4)}
        for (d, p, t, c), v in sorted(cells.items())
    ]
    return {"records": records}


def load_histogram(run_dir: str, source: str = "auto") -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Histogram records and keep ratios of a run: from its shards (local) or its manifest."""
    from masking import load_table

    fs, _, manifest = finished_manifest(run_dir)  # one line where it is not (the same as show, export and reward)
    table = load_table(manifest["config"]["masking"]["table"])
    keep = {c.name: c.keep for c in table.categories}
    remote = not is_local(fs)
    if source == "manifest" or (source == "auto" and remote):
        return manifest["histogram"]["records"], keep
    return histogram_from_shards(run_dir)["records"], keep


def removed_line(run_dir: str) -> str:
    """``removed before sampling: N exact_duplicate, …`` from the manifest's dedup counts ('' without them)."""
    from pipeline.outputs import out_fs, read_json

    fs, base = out_fs(run_dir)
    counts = read_json(fs, posixpath.join(base, "manifest.json")).get("counts", {}).get("dedup") or {}
    reasons = (("exact_removed", "exact_duplicate"), ("near_removed", "near_duplicate"),
               ("decontaminated_near", "decontaminated_near"), ("decontaminated_ngram", "decontaminated_ngram"))
    if not any(k in counts for k, _ in reasons):
        return ""
    return "removed before sampling (dedup/removed.parquet): " + ", ".join(
        f"{int(counts.get(k, 0))} {name}" for k, name in reasons)


@click.command("hist")
@click.argument("run_dir")
@click.option("--by", default="", help="Break down by keys: domain, pool, template (comma-separated).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--png", type=click.Path(), help="Write a bar chart and an OL-vs-Nov scatter as PNG to this path (no extension, or .png).")
@click.option("--source", type=click.Choice(["auto", "shards", "manifest"]), default="auto", show_default=True)
@handle_errors
def hist_cmd(run_dir: str, by: str, as_json: bool, png: str | None, source: str) -> None:
    """Mask category histogram of a run (shards, or the manifest when the shards are remote)."""
    keys = tuple(k.strip() for k in by.split(",") if k.strip())
    if png:
        from pipeline.hist_plot import check_png_path

        check_png_path(png)
    bad = [k for k in keys if k not in KEYS[:3]]
    if bad:
        raise ConfigError(f"--by: unknown key {bad[0]!r}; use domain, pool, template")
    records, keep = load_histogram(run_dir, source)
    result = {"by": list(keys), "groups": aggregate(records, keys, keep)}
    result["totals"] = {
        "turns": sum(r["turns"] for r in records),
        "tokens": sum(r["tokens"] for r in records),
        "weighted_tokens": round(sum(r["weighted"] for r in records), 2),
    }
    if png:
        from pipeline.hist_plot import write_png

        write_png(run_dir, records, keep, png)
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
        return
    if not records:
        click.echo(f"{run_dir}: no samples in the shards, so no turns to count (the run summary says where they "
                   "went)", err=True)
    for name, rows in result["groups"].items():
        click.echo(render_table(rows, name))
        click.echo("")
    if any(r.get("pool") == "rl" for r in records):  # its turns are counted, but a prompt holds no observation
        click.echo("rl samples are prompts: their target turns are counted, but the reference observation is no "
                   "token of the sample, so it adds 0 tokens and 0 weighted", err=True)
    removed = removed_line(run_dir)
    if removed:
        click.echo(removed, err=True)
    if png:
        click.echo(f"wrote {png}", err=True)

