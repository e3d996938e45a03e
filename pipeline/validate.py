"""``lwm validate``: normalize inputs without writing, and count what would be kept or quarantined."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from pipeline.stats import Stats
from stages.ingest.reading import expand_inputs
from stages.ingest.registry import claims_dir, get_adapter, resolve_opts, sniff
from stages.normalize import normalize_unit


def validate_inputs(
    paths: list[str],
    fmt: str | None,
    domain: str | None,
    opts: dict[str, Any],
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Counts for the inputs: format, records, trajectories, turns, quarantined, reasons."""
    if fmt:
        get_adapter(fmt)
    units = expand_inputs(paths, claims_dir=partial(claims_dir, fmt=fmt))
    stats = Stats()
    formats: set[str] = set()
    for unit in units:
        name = fmt or sniff(unit)[0]
        if not name:
            stats.add("records.read")
            stats.add("records.quarantined")
            stats.add("quarantined.unknown_format")
            if echo:
                echo(f"{unit.uri}: document: unknown_format: no adapter recognizes this input (give --format)")
            continue
        formats.add(name)
        adapter = get_adapter(name)
        unit_opts = resolve_opts(adapter, {**opts, **({"domain": domain} if domain else {})})
        for item in normalize_unit(unit, adapter, unit_opts, stats):
            if item.quarantine is not None and echo:
                q = item.quarantine
                echo(f"{q['uri']}: {q['locator']}: {q['reason']}: {q['detail']}")
    report = {
        "format": ",".join(sorted(formats)),
        "records": int(stats.get("records.read")),
        "trajectories": int(stats.get("trajectories.normalized")),
        "turns": int(stats.get("turns.normalized")),
        "quarantined": int(stats.get("records.quarantined")),
        "reasons": {k: int(v) for k, v in stats.with_prefix("quarantined").items()},
    }
    if echo:
        echo(
            f"format {report['format'] or '(none)'}: {report['records']} records, {report['trajectories']} trajectories, "
            f"{report['turns']} turns, {report['quarantined']} quarantined"
        )
    return report
