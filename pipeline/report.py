"""What a run prints at its end: counts after each step, the category histogram, where the outputs are.

Every count names the step it follows, and is the number left after that step:

    ingest: 240 records read, 3 quarantined (unreadable), 1 event file skipped
    filter: 237 trajectories, 18 filtered (no_turns 18) → 219 kept; 4 turns stripped (retry_cycle 4)
    dedup: 166 removed (exact 150, near 16) → 53 trajectories
    samples: cpt 20, sft 18, rl 6, eval 9 (filtered: sample_over_context_limit 1)
    shards: 51 trajectories, 53 samples in 4 files; 2 trajectories got no sample (eval_subsample 2)

``lwm validate`` prints the first two in the same words (`ingest_line`; its filter line applies ``no_turns`` alone).
The last line is what actually reached the shards, and which trajectories left after dedup got no sample: eval
ones whose every turn ``pools.eval_subsample`` left out, and those whose every sample was filtered.
"""

from __future__ import annotations

from typing import Any

import click

from pipeline.quarantine_bound import unread_warning

POOLS = ("cpt", "sft", "rl", "eval")
# Filters that drop one sample, not a trajectory (pipeline/sample_task.py).
SAMPLE_FILTERS = ("rl_prompt_cap", "sample_over_context_limit")


def _n(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _parts(counts: dict[str, Any]) -> str:
    return ", ".join(f"{k} {_n(v)}" for k, v in sorted(counts.items()) if _n(v))


def ingest_line(counts: dict[str, Any]) -> str:
    """The ``ingest:`` line of nested ingest counts, as `lwm run` ends with it and `lwm validate` prints it."""
    records = counts.get("records", {})
    skipped = _n((counts.get("members") or {}).get("skipped"))
    line = f"ingest: {_n(records.get('read'))} records read, {_n(records.get('quarantined'))} quarantined"
    if skipped:
        line += f", {skipped} damaged member file{'s' if skipped != 1 else ''} skipped"
    empty = _n((counts.get("files") or {}).get("empty"))
    if empty:  # no record in them (0 bytes, blank lines only)
        line += f", {empty} empty file{'s' if empty != 1 else ''}"
    return line


def summary_lines(manifest: dict[str, Any]) -> list[str]:
    """The per-step count lines of a finished run (see the module docstring)."""
    counts = manifest.get("counts", {})
    trajs = counts.get("trajectories", {})
    filtered = {k: v for k, v in (counts.get("filtered") or {}).items() if isinstance(v, int | float)}
    # the model stages drop sample targets (a turn without a kept reasoning), not trajectories
    per_sample = {k for k in filtered if k in SAMPLE_FILTERS or k.startswith("llm_")}
    traj_filtered = {k: v for k, v in filtered.items() if k not in per_sample}
    sample_filtered = {k: v for k, v in filtered.items() if k in per_sample}
    kept = _n(trajs.get("kept"))
    lines = [ingest_line(counts)]
    filter_line = f"filter: {_n(trajs.get('normalized'))} trajectories, {sum(map(_n, traj_filtered.values()))} filtered"
    if _parts(traj_filtered):
        filter_line += f" ({_parts(traj_filtered)})"
    filter_line += f" → {kept} kept"
    stripped = {k: v for k, v in (counts.get("turns_stripped") or {}).items() if _n(v)}
    if stripped:  # turns a filter took out of trajectories it kept (a retry cycle's repeats)
        n = sum(map(_n, stripped.values()))
        filter_line += f"; {n} turn{'s' if n != 1 else ''} stripped ({_parts(stripped)})"
    lines.append(filter_line)

    dedup = counts.get("dedup") or {}
    removed = _n(dedup.get("removed"))
    after_dedup = kept - removed
    detail = {
        "exact": dedup.get("exact_removed"),
        "near": dedup.get("near_removed"),
        "decontaminated": _n(dedup.get("decontaminated_near")) + _n(dedup.get("decontaminated_ngram")),
    }
    lines.append(f"dedup: {removed} removed" + (f" ({_parts(detail)})" if removed else "") + f" → {after_dedup} trajectories")

    if "shards" in manifest:
        samples = counts.get("samples") or {}
        line = "samples: " + ", ".join(f"{p} {_n(samples.get(p))}" for p in POOLS)
        if _parts(sample_filtered):
            line += f" (filtered: {_parts(sample_filtered)})"
        lines.append(line)
        shards = manifest.get("shards") or []
        rows = sum(_n(s.get("rows")) for s in shards)
        shipped = _n((counts.get("pools") or {}).get("trajectories_in_shards"))
        files = sum(1 for s in shards if _n(s.get("rows")))
        empty = f" (and {len(shards) - files} empty)" if len(shards) > files else ""  # a pool that got no sample
        line = f"shards: {shipped} trajectories, {rows} samples in {files} file{'s' if files != 1 else ''}{empty}"
        lines.append(line + _without_samples(counts.get("pools") or {}))
    return lines


def _without_samples(pools: dict[str, Any]) -> str:
    """What keeps the shards' trajectory count below the one after dedup: trajectories without a sample, those of
    the eval pool whose every turn ``pools.eval_subsample`` left out, and those whose every sample a filter took."""
    without = _n(pools.get("trajectories_without_samples"))
    if not without:
        return ""
    unsampled = sum(_n((pools.get(p) or {}).get("unsampled")) for p in POOLS if isinstance(pools.get(p), dict))
    reasons = _parts({"eval_subsample": unsampled, "samples_filtered": without - unsampled})
    return f"; {without} trajector{'ies' if without != 1 else 'y'} got no sample ({reasons})"


def no_samples_warning(manifest: dict[str, Any]) -> str | None:
    """For a finished run whose shards hold no sample (a valid outcome: everything was filtered), one ``warning:``
    line naming the largest loss: a filter's count, dedup's removals, quarantined records or eval trajectories
    without a turn; None when a sample was written."""
    if "shards" not in manifest or any(_n(s.get("rows")) for s in manifest["shards"] or []):
        return None
    counts = manifest.get("counts", {})
    losses: dict[str, tuple[int, str]] = {}
    for name, n in (counts.get("filtered") or {}).items():
        losses[f"filter {name}"] = (_n(n), "samples" if name in SAMPLE_FILTERS or name.startswith("llm_")
                                    else "trajectories")
    losses["dedup"] = (_n((counts.get("dedup") or {}).get("removed")), "trajectories removed")
    losses["quarantine"] = (_n((counts.get("records") or {}).get("quarantined")), "records")
    unsampled = _n(((counts.get("pools") or {}).get("eval") or {}).get("unsampled"))
    losses["pools.eval_subsample"] = (unsampled, "eval trajectories without a turn")
    name, (n, what) = max(losses.items(), key=lambda item: item[1][0])
    if not n:
        return "warning: no samples were written; no record was read"
    return f"warning: no samples were written; the largest loss: {name} ({n} {what})"


def print_run_summary(manifest: dict[str, Any], out: str) -> None:
    lines = summary_lines(manifest)
    for line in lines[:3]:
        click.echo(line, err=True)
    if manifest.get("histogram"):
        from masking import load_table
        from stages.histogram import aggregate, render_table

        table = load_table(manifest["config"]["masking"]["table"])
        keep = {c.name: c.keep for c in table.categories}
        groups = aggregate(manifest["histogram"]["records"], ("pool",), keep)
        for name, rows in groups.items():
            click.echo(render_table(rows, f"pool {name}"))
    for name, stage in (manifest.get("llm") or {}).get("stages", {}).items():
        u, c = stage["usage"], stage["counts"]
        # per reason: what a stage dropped, and the trajectories the instructions stage let go on without one
        outcomes = "".join(f"; {label}: " + ", ".join(f"{k} {int(v)}" for k, v in sorted(c[key].items()))
                           for key, label in (("dropped", "dropped"), ("without_instruction", "without instruction"))
                           if c.get(key))
        click.echo(f"llm {name}: {u['requests']} requests, {u['cache_hits']} cached, {u['failures']} failed, "
                   f"{u['prompt_tokens'] + u['completion_tokens']:,} tokens"
                   + (f"; kept {int(c['kept'])}" if "kept" in c else "") + outcomes, err=True)
    wmat = manifest.get("wmat")
    if wmat:
        pools = wmat["pools"]
        click.echo("wmat: " + ", ".join(f"{p}: {int(pools[p]['samples'])} samples" for p in sorted(pools))
                   + f" (under {out.rstrip('/')}/wmat/)", err=True)
    for line in lines[3:]:
        click.echo(line, err=True)
    click.echo(f"outputs: {out}", err=True)
    inputs = manifest.get("inputs") or []
    for warning in (unread_warning(inputs, sum(_n(i.get("size")) for i in inputs)), no_samples_warning(manifest)):
        if warning:
            click.echo(warning, err=True)
