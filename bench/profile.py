"""A cProfile summary of one local pipeline run, written into RESULTS.md when a target is missed."""

from __future__ import annotations

import cProfile
import io
import pstats

from bench.common import pipeline_config, quiet
from pipeline.run import run_pipeline


def profile_pipeline(inputs: list[str], out: str, top: int = 12) -> str:
    """The `top` functions by own time of one in-process pipeline run."""
    cfg = pipeline_config(inputs, out)
    prof = cProfile.Profile()
    prof.runcall(run_pipeline, cfg, echo=quiet)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("tottime").print_stats(top)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
    return "\n".join(lines[start:])
