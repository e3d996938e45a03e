"""Stages after the trajectories layer: samples per pool and the shard writer."""

from __future__ import annotations

from typing import Any


def run(cfg: dict[str, Any], fs, root: str, executor, ingest_results, manifest, stage_runs, echo) -> None:
    """Placeholder until the sample and shard stages land: the run ends at the trajectories layer."""
    return None
