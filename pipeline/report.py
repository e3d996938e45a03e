"""What a run prints at its end: counts, the category histogram, and where the outputs are."""

from __future__ import annotations

from typing import Any

import click


def print_run_summary(manifest: dict[str, Any], out: str) -> None:
    counts = manifest.get("counts", {})
    records = counts.get("records", {})
    trajs = counts.get("trajectories", {})
    click.echo(
        f"{int(records.get('read', 0))} records read, {int(records.get('quarantined', 0))} quarantined, "
        f"{int(trajs.get('kept', 0))} trajectories kept",
        err=True,
    )
    filtered = counts.get("filtered", {})
    if filtered:
        parts = ", ".join(f"{k} {int(v)}" for k, v in sorted(filtered.items()))
        click.echo(f"filtered: {parts}", err=True)
    if manifest.get("histogram"):
        from pipeline.hist import render_table

        click.echo(render_table(manifest["histogram"]["total"]))
    click.echo(f"outputs: {out}", err=True)
