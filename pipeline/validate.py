"""``lwm validate``: normalize inputs without writing, and count what would be kept or quarantined.

A readable record without any (action, observation) pair is reported as filtered
(``filtered: {"no_turns": n}``), as ``lwm run`` counts it, never as quarantined; a damaged member
of a larger record (an unreadable event file of a recorded run) as ``skipped``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.input_listing import input_units
from pipeline.quarantine_bound import bound_exceeded
from schemas.stats import Stats
from schemas.text import one_line
from stages.ingest.ranges import input_size
from stages.ingest.registry import get_adapter, resolve_opts, sniff, sniffed_opts, with_run_settings
from stages.normalize import FILTERED_NO_TURNS, UNREAD_BYTES, UNREAD_FILES, normalize_unit, unrecognized_unit


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
    opts = with_run_settings(opts, domain=domain)  # one domain: `-d` and `--opt domain=` must agree
    # the listing `lwm run` reads, which leaves out the files of lwm output folders among the inputs (and says so)
    units, left_out = input_units(paths, fmt, None, echo or (lambda line: None), label="input")
    names = [fmt or sniff(unit)[0] for unit in units]
    # sniffed formats: each unit's adapter takes the options it has, as under `lwm run`
    per_format = None if fmt else sniffed_opts(names, opts)
    stats = Stats()
    formats: set[str] = set()
    for unit, name in zip(units, names):
        if not name:
            err = unrecognized_unit(unit, stats)  # as `lwm run` counts it
            if err is not None and echo:
                echo(one_line(f"{unit.uri}: {err.locator}: {err.reason}: {err.detail}"))
            continue
        formats.add(name)
        adapter = get_adapter(name)
        given = per_format(name) if per_format is not None else opts
        unit_opts = resolve_opts(adapter, given)
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
        # files of which nothing was read (each one quarantined record) and their bytes, of all the input's bytes:
        # the bound holds for both shares (`pipeline.quarantine_bound`)
        "unread": {"files": int(stats.get(UNREAD_FILES)), "bytes": int(stats.get(UNREAD_BYTES))},
        "input_bytes": sum(input_size(unit) for unit in units),
    }
    if echo:
        echo(
            f"format {report['format'] or '(none)'}: {report['records']} records, {report['trajectories']} trajectories, "
            f"{report['turns']} turns, {sum(report['filtered'].values())} filtered without turns, "
            f"{report['quarantined']} quarantined"
            + (f", {sum(report['skipped'].values())} damaged member files skipped" if report["skipped"] else "")
            + (f"; nothing was read from {report['unread']['files']} file(s) ({report['unread']['bytes']:,} of "
               f"{report['input_bytes']:,} bytes)" if report["unread"]["files"] else "")
        )
    return report


def run_would_fail(report: dict[str, Any], bound: float) -> str | None:
    """Why `lwm run` would fail on the input `report` describes (`validate_inputs`), with the bound `bound`: the start
    of the line it would print; None when it would not."""
    counts = {"records": {"read": report["records"], "quarantined": report["quarantined"]},
              "files": {"unread": report["unread"]["files"]}, "bytes": {"unread": report["unread"]["bytes"]}}
    over = bound_exceeded(counts, report["input_bytes"], bound)
    return over[0] if over else None
