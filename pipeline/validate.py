"""``lwm validate``: normalize inputs without writing, and count what would be kept or quarantined.

A readable record without any (action, observation) pair is reported as filtered
(``filtered: {"no_turns": n}``), as ``lwm run`` counts it, never as quarantined; a damaged member
of a larger record (an unreadable event file of a recorded run) as ``skipped``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.input_listing import input_units
from schemas.stats import Stats
from schemas.text import one_line
from stages.ingest.reading import unrecognized
from stages.ingest.registry import get_adapter, resolve_opts, sniff, sniffed_opts
from stages.normalize import FILTERED_NO_TURNS, normalize_unit


def validate_inputs(
    paths: list[str],
    fmt: str | None,
    domain: str | None,
    opts: dict[str, Any],
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Counts for the inputs: format, records, trajectories, turns, filtered, quarantined, reasons."""
    if fmt:
        get_adapter(fmt)
    # the listing `lwm run` reads, which leaves out the files of lwm output folders among the inputs (and says so)
    units, left_out = input_units(paths, fmt, None, echo or (lambda line: None), label="input")
    names = [fmt or sniff(unit)[0] for unit in units]
    # sniffed formats: each unit's adapter takes the options it has, as under `lwm run`
    per_format = None if fmt else sniffed_opts(names, opts)
    stats = Stats()
    formats: set[str] = set()
    for unit, name in zip(units, names):
        if not name:
            err = unrecognized(unit)  # as `lwm run` records it
            if err is None:
                stats.add("files.empty")
                continue
            stats.add("records.read")
            stats.add("records.quarantined")
            stats.add(f"quarantined.{err.reason}")
            if echo:
                echo(one_line(f"{unit.uri}: {err.locator}: {err.reason}: {err.detail}"))
            continue
        formats.add(name)
        adapter = get_adapter(name)
        given = per_format(name) if per_format is not None else opts
        unit_opts = resolve_opts(adapter, {**given, **({"domain": domain} if domain else {})})
        for item in normalize_unit(unit, adapter, unit_opts, stats):
            if item.quarantine is not None and echo:
                q = item.quarantine
                echo(one_line(f"{q['uri']}: {q['locator']}: {q['reason']}: {q['detail']}"))
    report = {
        "format": ",".join(sorted(formats)),
        "records": int(stats.get("records.read")),
        # trajectories with at least one turn (the zero-turn ones are in `filtered`)
        "trajectories": int(stats.get("trajectories.normalized") - stats.get(FILTERED_NO_TURNS)),
        "turns": int(stats.get("turns.normalized")),
        "filtered": {k: int(v) for k, v in stats.with_prefix("filtered").items()},
        "quarantined": int(stats.get("records.quarantined")),
        # damaged members of a larger record (one event file of a run): they cost only themselves
        "skipped": {k: int(v) for k, v in stats.with_prefix("skipped").items()},
        "left_out": left_out,  # files of lwm output folders among the inputs, not input (as `lwm run` leaves them)
        "reasons": {k: int(v) for k, v in stats.with_prefix("quarantined").items()},
    }
    if echo:
        echo(
            f"format {report['format'] or '(none)'}: {report['records']} records, {report['trajectories']} trajectories, "
            f"{report['turns']} turns, {sum(report['filtered'].values())} filtered without turns, "
            f"{report['quarantined']} quarantined"
            + (f", {sum(report['skipped'].values())} damaged member files skipped" if report["skipped"] else "")
        )
    return report
