"""Shared helpers: a figure (ratios of repeated timings against a target) and timing."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

BENCH_DOMAIN = "terminal"


@dataclass
class Figure:
    """One benchmark result: a ratio per run, the SPEC target and how to compare against it."""

    name: str
    ratios: list[float]
    target: float | None
    higher_is_better: bool
    unit: str = "×"
    detail: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # which run produced the row ("quick 2026-12-01"); for a row carried over from an earlier results file,
    # that run, and its cells (median, spread, runs, target, result, detail) as they were written there
    measured: str = ""
    carried: list[str] | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.ratios), max(self.ratios)

    @property
    def met(self) -> bool | None:
        if self.target is None or not self.ratios:
            return None
        return self.median >= self.target if self.higher_is_better else self.median <= self.target


def not_measured(name: str, target: float | None, higher_is_better: bool, why: str, unit: str = "×") -> Figure:
    """A placeholder row for a figure that could not be measured here."""
    return Figure(name, [], target, higher_is_better, unit=unit, note=f"not measured: {why}")


QUICK_SKIPPED = "not measured in quick mode"


def skipped_in_quick(name: str, target: float | None, higher_is_better: bool, unit: str = "×") -> Figure:
    """A figure only the full run measures: a quick run carries it over from the last results or says so."""
    return Figure(name, [], target, higher_is_better, unit=unit, note=QUICK_SKIPPED)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of one call and its result."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def quiet(_msg: str) -> None:
    """An echo that discards progress lines (timings should not include terminal output)."""


def span(xs: list[float], digits: int = 2, unit: str = " s") -> str:
    """``min–max`` of several timings (one value alone as itself), with `digits` decimals."""
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f}{unit}"
    return f"{min(xs):.{digits}f}–{max(xs):.{digits}f}{unit}"
