"""A cProfile summary of one in-process pipeline run, written into RESULTS.md when a floor target is missed."""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import shutil

from bench.cli_runs import DEDUP_OFF, SFT_ALL
from bench.common import quiet
from pipeline.config import resolve
from pipeline.run import run_pipeline


def run_config(inputs: list[str], out: str, dedup: bool = False) -> dict:
    """The resolved config of the benchmark's all-turn SFT run, in-process, into a fresh `out`."""
    if os.path.exists(out):
        shutil.rmtree(out)
    overrides = {"run": {"input": list(inputs), "out": out}, "executor": {"kind": "local", "progress": "off"},
                 "pools": {**SFT_ALL["pools"], "ratios": SFT_ALL["pools.ratios"]}}
    if not dedup:
        overrides.update(DEDUP_OFF)
    return resolve(overrides=overrides)


def profile_pipeline(cfg: dict, top: int = 15) -> str:
    """The `top` functions by own time of one in-process pipeline run of `cfg`."""
    prof = cProfile.Profile()
    prof.runcall(run_pipeline, cfg, echo=quiet)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("tottime").print_stats(top)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
    return "\n".join(lines[start:])
