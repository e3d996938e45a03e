"""The tokenizer floor: bare tiktoken encoding of the rendered text the pipeline must tokenize at least once.

The text is the ChatML rendering of each trajectory that `lwm run` wrote (every turn once, template
v1), encoded by lwmkit's default tokenizer on the tiktoken engine (``encode_ordinary`` after the
vocabulary's normalization, so the ids are the pipeline's) one text after another in one thread:
the one-core floor an in-process run is compared with.
"""

from __future__ import annotations

import glob
import os

import pyarrow.parquet as pq

from bench.common import timed
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
    """The rendered ChatML text of each trajectory (its cpt sample, template v1)."""
    return [render_example(t, render_system(t, "v1")) for t in trajs]


def floor_seconds(texts: list[str], tok=None) -> tuple[float, int]:
    """Seconds and token count of encoding every text once, one after another (one thread)."""
    tok = tok or load_tokenizer()
    tok.encode("warm up")
    seconds, ids = timed(lambda: [tok.encode(t) for t in texts])
    return seconds, sum(len(x) for x in ids)
