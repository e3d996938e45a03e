"""Shared helpers: repeated timing, spread of a series, generated corpora and pipeline configs."""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.config import resolve
from pipeline.demo import write_demo

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


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of one call and its result."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def make_corpus(dir_path: str, trajectories: int, files: int = 1, seed: int = 0) -> list[str]:
    """`files` demo files of `trajectories // files` terminal trajectories each, under `dir_path`."""
    if os.path.exists(dir_path):
        shutil.rmtree(dir_path)
    paths = []
    per_file = max(1, trajectories // files)
    for i in range(files):
        sub = os.path.join(dir_path, f"f{i:03d}")
        written = write_demo(BENCH_DOMAIN, sub, seed=seed + i, n=per_file)
        paths.extend(written)
    return paths


def corpus_bytes(paths: list[str]) -> int:
    return sum(os.path.getsize(p) for p in paths)


def pipeline_config(inputs: list[str], out: str, executor: str = "local", num_cpus: int = 0,
                    pools: dict[str, Any] | None = None, one_task_per_file: bool = False) -> dict[str, Any]:
    """A resolved run config over the bench corpus (fresh output directory)."""
    if os.path.exists(out):
        shutil.rmtree(out)
    overrides: dict[str, Any] = {
        "run": {"input": list(inputs), "out": out, "domain": BENCH_DOMAIN},
        "executor": {"kind": executor, "num_cpus": num_cpus, "progress": "off"},
    }
    if pools:
        overrides["pools"] = pools
    if one_task_per_file:  # small bench files would otherwise be grouped into one ingest task
        overrides["ingest"] = {"group_files": 1}
    return resolve(overrides=overrides)


def quiet(_msg: str) -> None:
    """An echo that discards progress lines (timings should not include terminal output)."""
