"""``lwm validate``: normalize inputs without writing, and count what would be kept or quarantined.

It reads the input `lwm run` would (`pipeline.input_listing`) and counts it in the run's words: ``records`` read
and ``quarantined`` as the run's ``ingest:`` line, ``trajectories`` as its ``filter:`` line (every trajectory read).
A readable record without any (action, observation) pair is reported as filtered (``filtered: {"no_turns": n}``),
as ``lwm run`` counts it, never as quarantined (``with_turns`` are the others); a damaged member of a larger record
(an unreadable event file of a recorded run) as ``skipped``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.input_listing import input_units
from pipeline.quarantine_bound import bound_exceeded, unread_warning
from pipeline.report import ingest_line
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
    """Counts for the inputs (format, records, trajectories, with_turns, turns, filtered, quarantined, reasons,
    skipped, left_out, unread, input_bytes), with `echo` the quarantine rows and `summary_lines`."""
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
    unread: list[dict[str, Any]] = []  # the files of which nothing was read, as `lwm run`'s manifest lists them
    for unit, name in zip(units, names):
        before, reasons = stats.get(UNREAD_FILES), []
        if not name:
            err = unrecognized_unit(unit, stats)  # as `lwm run` counts it
            if err is not None:
                reasons.append(err.reason)
                if echo:
                    echo(one_line(f"{unit.uri}: {err.locator}: {err.reason}: {err.detail}"))
        else:
            formats.add(name)
            adapter = get_adapter(name)
            unit_opts = resolve_opts(adapter, per_format(name) if per_format is not None else opts)
            for item in normalize_unit(unit, adapter, unit_opts, stats):
                if item.quarantine is not None:
                    q = item.quarantine
                    reasons.append(q["reason"])
                    if echo:
                        echo(one_line(f"{q['uri']}: {q['locator']}: {q['reason']}: {q['detail']}"))
        if stats.get(UNREAD_FILES) > before:
            unread.append({"uri": unit.uri, "size": input_size(unit), "unread": reasons[0]})
    input_bytes = sum(input_size(unit) for unit in units)
    report = {
        "format": ",".join(sorted(formats)),
        "records": int(stats.get("records.read")),
        # every trajectory read, as `lwm run`'s `filter: N trajectories` (and its manifest's
        # counts.trajectories.normalized) counts them; those without a turn are in `filtered` (no_turns)
        "trajectories": int(stats.get("trajectories.normalized")),
        "with_turns": int(stats.get("trajectories.normalized") - stats.get(FILTERED_NO_TURNS)),
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
        "input_bytes": input_bytes,
    }
    if echo:
        for line in summary_lines(report, stats, unread):
            echo(line)
    return report


def summary_lines(report: dict[str, Any], stats: Stats, unread: list[dict[str, Any]]) -> list[str]:
    """What validate prints after the quarantine rows: the format, then `lwm run`'s ``ingest:`` line and its
    ``filter:`` line in the same words and counts, as far as validate goes (the trajectories read and those without
    a turn; the run's other filters, dedup and pools come after), and the run's warning about unread files."""
    filtered = report["filtered"]
    parts = ", ".join(f"{k} {v}" for k, v in sorted(filtered.items()))
    lines = [f"format: {report['format'].replace(',', ', ') or 'none recognized'}",
             ingest_line(stats.nested()),
             f"filter: {report['trajectories']} trajectories, {sum(filtered.values())} filtered"
             + (f" ({parts})" if parts else "")
             + f" → {report['with_turns']} with turns, {report['turns']} turns (lwm run's other filters come after)"]
    warning = unread_warning(unread, report["input_bytes"], why="the rows above say why")
    return [*lines, warning] if warning else lines


def run_would_fail(report: dict[str, Any], bound: float) -> str | None:
    """Why `lwm run` would fail on the input `report` describes (`validate_inputs`), with the bound `bound`: the start
    of the line it would print; None when it would not."""
    counts = {"records": {"read": report["records"], "quarantined": report["quarantined"]},
              "files": {"unread": report["unread"]["files"]}, "bytes": {"unread": report["unread"]["bytes"]}}
    over = bound_exceeded(counts, report["input_bytes"], bound)
    return over[0] if over else None
