"""Ingest and normalize one input unit: native records → raw rows, trajectories, quarantine rows.

This is the one place where `InvalidRecord` becomes a quarantine row (SPEC §10): every record
read is counted, and each ends up either normalized or quarantined with its locator and reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pipeline.stats import Stats
from schemas.errors import InvalidRecord
from schemas.trajectory import Trajectory, validate
from stages.ingest.reading import InputUnit
from stages.ingest.registry import Adapter, RawRecord
from stages.redact import redact_text


@dataclass
class Normalized:
    """What one native record became: its raw row, and trajectories or a quarantine row."""

    raw: RawRecord | None
    trajectories: list[Trajectory]
    quarantine: dict[str, Any] | None


def quarantine_row(err: InvalidRecord, uri: str, fmt: str, stage: str = "normalize") -> dict[str, Any]:
    # The detail may quote input text (a bad field value): it is redacted like everything past raw/.
    return {
        "uri": redact_text(err.uri or uri)[0],
        "locator": err.locator or "",
        "format": fmt,
        "stage": stage,
        "reason": err.reason,
        "detail": redact_text(err.detail)[0],
    }


def normalize_unit(unit: InputUnit, adapter: Adapter, opts: dict[str, Any], stats: Stats) -> Iterator[Normalized]:
    """Read and normalize every record of `unit`; never raises on bad data."""
    for item in adapter.read(unit, opts):
        stats.add("records.read")
        if isinstance(item, InvalidRecord):
            stats.add("records.quarantined")
            stats.add(f"quarantined.{item.reason}")
            yield Normalized(None, [], quarantine_row(item, unit.uri, adapter.name, stage="read"))
            continue
        try:
            trajs = list(adapter.normalize(item, opts))
            for traj in trajs:  # the one validation of `lwm run` and `lwm validate`, whatever the adapter
                validate(traj, item.locator)
        except InvalidRecord as err:
            err.locator = err.locator or item.locator
            stats.add("records.quarantined")
            stats.add(f"quarantined.{err.reason}")
            yield Normalized(item, [], quarantine_row(err, item.uri, adapter.name))
            continue
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
            # An adapter bug on unexpected input must not stop the run: quarantine it visibly.
            err = InvalidRecord("adapter_error", f"{type(exc).__name__}: {exc}", item.locator, item.uri)
            stats.add("records.quarantined")
            stats.add(f"quarantined.{err.reason}")
            yield Normalized(item, [], quarantine_row(err, item.uri, adapter.name))
            continue
        stats.add("records.normalized")
        stats.add("trajectories.normalized", len(trajs))
        stats.add("turns.normalized", sum(len(t.turns) for t in trajs))
        yield Normalized(item, trajs, None)
