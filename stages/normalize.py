"""Ingest and normalize one input unit: native records → raw rows, trajectories, quarantine rows.

This is the one place where `InvalidRecord` becomes a quarantine row (SPEC §10): every record
read is counted, and each ends up either normalized or quarantined with its locator and reason.

Quarantine is for records that cannot be read. A record that was read but holds no (action,
observation) pair — a chat that never calls a tool, a single screen without an action log — is a
readable trajectory with zero turns: it counts as normalized and then filtered
(``filtered.no_turns``), exactly like a trajectory that falls under ``filter.min_turns``.
A broken member of a larger record (`SkippedMember`: one unreadable event file of a recorded run)
is written to quarantine/ but counted as ``members.skipped``: it costs that member, not the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from schemas.errors import InvalidRecord
from schemas.stats import Stats
from schemas.trajectory import Trajectory, validate
from stages.ingest.common import SkippedMember
from stages.ingest.ranges import input_size
from stages.ingest.reading import InputUnit, unrecognized
from stages.ingest.registry import Adapter, RawRecord
from stages.redact import redact_text
from stages.uri_credentials import recorded_uri

# Adapter reasons that mean "read fine, but no (action, observation) pair": filtered, not quarantined.
NO_TURN_REASONS = frozenset({"no_turns", "no_actions"})
FILTERED_NO_TURNS = "filtered.no_turns"
# Input units of which nothing was read (no format recognized, or a reader that could not open them) and their
# bytes: one quarantined record each, so their size is counted too, against the same bound (README: Bad input).
UNREAD_FILES = "files.unread"
UNREAD_BYTES = "bytes.unread"
# Failures of the stream itself, not of a record in it: a unit that yields one and no record was not read.
STREAM_FAILURES = frozenset({"truncated_stream", "unreadable_file"})


@dataclass
class Normalized:
    """What one native record became: its raw row, and trajectories or a quarantine row."""

    raw: RawRecord | None
    trajectories: list[Trajectory]
    quarantine: dict[str, Any] | None


def quarantine_row(err: InvalidRecord, uri: str, fmt: str, stage: str = "normalize") -> dict[str, Any]:
    # Detail and locator may quote input text (a bad field value, a member's name): they are redacted like
    # everything past raw/, and only then made one line and cut, so no part of a secret survives the cut.
    detail = " ".join(redact_text(err.detail)[0].split())[: InvalidRecord.DETAIL_CHARS]
    return {
        "uri": recorded_uri(err.uri or uri),
        "locator": redact_text(err.locator or "")[0],
        "format": fmt,
        "stage": stage,
        "reason": err.reason,
        "detail": detail,
    }


def unrecognized_unit(unit: InputUnit, stats: Stats) -> InvalidRecord | None:
    """Count a unit that no adapter recognizes, as `lwm run` and `lwm validate` both count it, and return its one
    quarantine record: a file without a record (empty, blank lines) is ``files.empty`` and None; any other is one
    quarantined record and an unread file of its size (`count_unread`)."""
    err = unrecognized(unit)
    if err is None:
        stats.add("files.empty")  # no record to read, as under --format: nothing is lost
        return None
    stats.add("records.read")
    stats.add("records.quarantined")
    stats.add(f"quarantined.{err.reason}")
    count_unread(unit, stats)
    return err


def count_unread(unit: InputUnit, stats: Stats) -> None:
    """Count `unit` as an input of which nothing was read: one file and its bytes."""
    stats.add(UNREAD_FILES)
    stats.add(UNREAD_BYTES, input_size(unit))


def normalize_unit(unit: InputUnit, adapter: Adapter, opts: dict[str, Any], stats: Stats) -> Iterator[Normalized]:
    """Read and normalize every record of `unit`; never raises on bad data. A unit whose reader refuses it whole before
    any record (its first item a failure of the ``document``: a container no reader opens, a document over the
    size bound), or whose stream broke before any record read (no permission, a ``.gz`` that is not gzip), is also
    counted as unread (`count_unread`), as it is when sniffed (`unrecognized_unit`)."""
    first, unread, any_read, stream_broke = True, False, False, False
    for item in adapter.read(unit, opts):
        failed = isinstance(item, InvalidRecord) and not isinstance(item, SkippedMember) \
            and item.reason not in NO_TURN_REASONS
        if first and failed and item.locator == "document":
            count_unread(unit, stats)
            unread = True
        first = False
        any_read = any_read or not failed
        stream_broke = stream_broke or (failed and item.reason in STREAM_FAILURES)
        if isinstance(item, SkippedMember):
            stats.add("members.skipped")
            stats.add(f"skipped.{item.reason}")
            yield Normalized(None, [], quarantine_row(item, unit.uri, adapter.name, stage="read"))
            continue
        rows = 1 if isinstance(item, InvalidRecord) else item.rows  # a bad row counts one; a group, its rows
        stats.add("records.read", rows)
        if isinstance(item, InvalidRecord) and item.reason in NO_TURN_REASONS:
            stats.add("records.normalized", rows)
            stats.add("trajectories.normalized")
            stats.add(FILTERED_NO_TURNS)
            continue
        if isinstance(item, InvalidRecord):
            stats.add("records.quarantined", rows)
            stats.add(f"quarantined.{item.reason}")
            yield Normalized(None, [], quarantine_row(item, unit.uri, adapter.name, stage="read"))
            continue
        try:
            trajs = list(adapter.normalize(item, opts))
            for traj in trajs:  # the one validation of `lwm run` and `lwm validate`, whatever the adapter
                validate(traj, item.locator)
        except InvalidRecord as err:
            if err.reason in NO_TURN_REASONS:
                stats.add("records.normalized", rows)
                stats.add("trajectories.normalized")
                stats.add(FILTERED_NO_TURNS)
                yield Normalized(item, [], None)
                continue
            err.locator = err.locator or item.locator
            stats.add("records.quarantined", rows)
            stats.add(f"quarantined.{err.reason}")
            yield Normalized(item, [], quarantine_row(err, item.uri, adapter.name))
            continue
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
            # An adapter bug on unexpected input must not stop the run: quarantine it visibly.
            err = InvalidRecord("adapter_error", f"{type(exc).__name__}: {exc}", item.locator, item.uri)
            stats.add("records.quarantined", rows)
            stats.add(f"quarantined.{err.reason}")
            yield Normalized(item, [], quarantine_row(err, item.uri, adapter.name))
            continue
        stats.add("records.normalized", rows)
        stats.add("trajectories.normalized", len(trajs))
        stats.add("turns.normalized", sum(len(t.turns) for t in trajs))
        yield Normalized(item, trajs, None)
    if stream_broke and not any_read and not unread:
        count_unread(unit, stats)
