"""Shared by the adapter tests: read and normalize one input unit through one adapter."""

from __future__ import annotations

from pathlib import Path

from schemas.errors import InvalidRecord
from stages.ingest import registry
from stages.ingest.reading import InputUnit


def ingest_unit(adapter, path: Path | str, is_dir: bool = False, **opts):
    """Read and normalize one unit; return (trajectories, quarantined records)."""
    opts = registry.resolve_opts(adapter, opts)
    trajs, bad = [], []
    for record in adapter.read(InputUnit(str(path), is_dir), opts):
        if isinstance(record, InvalidRecord):
            bad.append(record)
            continue
        try:
            trajs.extend(adapter.normalize(record, opts))
        except InvalidRecord as exc:
            bad.append(exc)
    return trajs, bad
