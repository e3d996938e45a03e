"""Figures 4 and 5: peak RSS for 1× and 10× input, and Ray scaling, each run in fresh subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.common import Figure, make_corpus


def _child(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "bench.child", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bench child {args[0]} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout.strip().splitlines()[-1]


def memory(work: str, trajectories: int, runs: int) -> Figure:
    """Peak RSS(10× input) / peak RSS(1× input), each a fresh local-pipeline process."""
    small = make_corpus(os.path.join(work, "mem1_in"), trajectories)
    large = make_corpus(os.path.join(work, "mem10_in"), trajectories * 10, files=10)
    ratios, kib = [], []
    for _ in range(runs):
        a = int(_child("rss", os.path.join(work, "mem1_out"), *small))
        b = int(_child("rss", os.path.join(work, "mem10_out"), *large))
        ratios.append(b / a)
        kib.append((a, b))
    detail = (f"{trajectories} vs {trajectories * 10} trajectories (10 files); peak RSS "
              f"{kib[-1][0] / 1024:.0f} MiB vs {kib[-1][1] / 1024:.0f} MiB (last run)")
    return Figure("4. peak RSS, 10× / 1× input (local)", ratios, 1.2, False, detail=detail)


def ray_scaling(work: str, trajectories: int, files: int, runs: int) -> list[Figure]:
    """2 Ray workers vs 1, and the in-process runner vs Ray on one worker (same process, alternating)."""
    inputs = make_corpus(os.path.join(work, "ray_in"), trajectories, files=files)
    one = json.loads(_child("ray", "1", str(runs), os.path.join(work, "ray_out"), *inputs))
    two = json.loads(_child("ray", "2", str(runs), os.path.join(work, "ray_out"), *inputs))
    speedup = [a / b for a, b in zip(one["ray"], two["ray"], strict=True)]
    local_vs_ray = [loc / ray for loc, ray in zip(one["local"], one["ray"], strict=True)]
    detail = f"{trajectories} trajectories in {files} files; Ray(1) {_span(one['ray'])}, Ray(2) {_span(two['ray'])}"
    return [
        Figure("5a. Ray 2 workers speed-up over 1", speedup, 1.7, True, detail=detail),
        Figure("5b. in-process runner / Ray on 1 worker (time)", local_vs_ray, 1.1, False,
               detail=f"local {_span(one['local'])}; target: within 10%"),
    ]


def _span(xs: list[float]) -> str:
    return f"{min(xs):.2f}–{max(xs):.2f} s"
