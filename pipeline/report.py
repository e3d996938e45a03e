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
        from masking import load_table
        from pipeline.hist import aggregate, render_table

        table = load_table(manifest["config"]["masking"]["table"])
        keep = {c.name: c.keep for c in table.categories}
        groups = aggregate(manifest["histogram"]["records"], ("pool",), keep)
        for name, rows in groups.items():
            click.echo(render_table(rows, f"pool {name}"))
        samples = manifest["counts"].get("samples", {})
        click.echo(", ".join(f"{p}: {int(samples.get(p, 0))} samples" for p in ("cpt", "sft", "rl", "eval")), err=True)
    for name, stage in (manifest.get("llm") or {}).get("stages", {}).items():
        u, c = stage["usage"], stage["counts"]
        dropped = ", ".join(f"{k} {int(v)}" for k, v in sorted((c.get("dropped") or {}).items()))
        click.echo(f"llm {name}: {u['requests']} requests, {u['cache_hits']} cached, {u['failures']} failed, "
                   f"{u['prompt_tokens'] + u['completion_tokens']:,} tokens"
                   + (f"; kept {int(c['kept'])}" if "kept" in c else "") + (f"; dropped: {dropped}" if dropped else ""),
                   err=True)
    wmat = manifest.get("wmat")
    if wmat:
        pools = wmat["pools"]
        click.echo("wmat: " + ", ".join(f"{p}: {int(pools[p]['samples'])} samples" for p in sorted(pools))
                   + f" (under {out.rstrip('/')}/wmat/)", err=True)
    click.echo(f"outputs: {out}", err=True)
