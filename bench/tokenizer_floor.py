"""Figure 1: the end-to-end local pipeline against the bare tokenizer on the texts it tokenizes.

The floor is `load_tokenizer().encode_batch` (tiktoken engine) over the rendered ChatML text of
every trajectory's cpt sample, which is what the pipeline must tokenize at least once.
"""

from __future__ import annotations

import glob
import os

import pyarrow.parquet as pq

from bench.common import Figure, corpus_bytes, make_corpus, pipeline_config, quiet, timed
from pipeline.run import run_pipeline
from schemas.trajectory import Trajectory
from stages.sample_rows import render_example
from stages.templates import render_system
from stages.tokenizer import load_tokenizer


def read_trajectories(out: str) -> list[Trajectory]:
    """Every trajectory the ingest stage wrote under `out`."""
    trajs = []
    for path in sorted(glob.glob(os.path.join(out, "trajectories", "*.parquet"))):
        trajs.extend(Trajectory.from_dict(d) for d in pq.read_table(path).to_pylist())
    return trajs


def chatml_texts(trajs: list[Trajectory]) -> list[str]:
    """The rendered ChatML text of each trajectory's cpt sample (template v1)."""
    return [render_example(t, render_system(t, "v1")) for t in trajs]


def run(work: str, trajectories: int, runs: int) -> tuple[Figure, str]:
    """Pipeline seconds / tokenizer seconds per run; returns the figure and the last output dir."""
    inputs = make_corpus(os.path.join(work, "floor_in"), trajectories)
    out = os.path.join(work, "floor_out")
    tok = load_tokenizer()
    ratios, pipe_s, tok_s = [], [], []
    texts: list[str] = []
    for _ in range(runs):
        cfg = pipeline_config(inputs, out)
        seconds, _ = timed(lambda cfg=cfg: run_pipeline(cfg, echo=quiet))
        texts = texts or chatml_texts(read_trajectories(out))
        floor, _ = timed(lambda texts=texts: tok.encode_batch(texts))
        ratios.append(seconds / floor)
        pipe_s.append(seconds)
        tok_s.append(floor)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    detail = (f"{trajectories} trajectories, {corpus_bytes(inputs) / 1e6:.2f} MB input, {mb:.2f} MB ChatML text; "
              f"pipeline {min(pipe_s):.2f}–{max(pipe_s):.2f} s, tokenizer {min(tok_s) * 1000:.0f}–"
              f"{max(tok_s) * 1000:.0f} ms")
    return Figure("1. pipeline / bare tokenizer (local)", ratios, 2.0, False, detail=detail), out
