"""Figure 3: all-turn expansion against one turn sample, by trajectory length.

One turn sample of the last turn already tokenizes the whole history; the all-turn expansion
should add little beyond assembling slices of the cached message ids (SPEC §7).
"""

from __future__ import annotations

import time

from bench.common import BENCH_DOMAIN, Figure
from masking import load_table, score_turn
from pipeline.demo import generate
from schemas.trajectory import Trajectory
from stages.samples import TrajectorySamples
from stages.tokenize import segment_tokenizer
from stages.tokenizer import load_tokenizer

LIMIT = 262144


def long_trajectories(length: int, count: int) -> list[Trajectory]:
    """`count` trajectories of exactly `length` turns, built by concatenating demo turns."""
    pool = generate(BENCH_DOMAIN, seed=7, n=count * 4)
    turns = [t for d in pool for t in d["turns"]]
    out = []
    for i in range(count):
        d = dict(pool[i])
        d["turns"] = [turns[(i * length + j) % len(turns)] for j in range(length)]
        out.append(Trajectory.from_dict(d))
    return out


def _cost(trajs: list[Trajectory], all_turns: bool, seg, table) -> float:
    start = time.perf_counter()
    for traj in trajs:
        scores = [score_turn(t.action, t.observation, table) for t in traj.turns]
        ts = TrajectorySamples(traj, "You are a terminal.", scores, seg)
        n = len(traj.turns)
        for t in range(1, n + 1) if all_turns else (n,):
            ts.turn_sample(t, LIMIT)
    return time.perf_counter() - start


def run(lengths: tuple[int, ...], count: int, runs: int) -> list[Figure]:
    """One figure per trajectory length: seconds(all turns) / seconds(last turn only)."""
    seg = segment_tokenizer(load_tokenizer())
    table = load_table(None)
    figures = []
    for length in lengths:
        trajs = long_trajectories(length, count)
        _cost(trajs[:2], True, seg, table)  # warm caches of constant strings
        ratios = []
        for _ in range(runs):
            one = _cost(trajs, False, seg, table)
            every = _cost(trajs, True, seg, table)
            ratios.append(every / one)
        figures.append(Figure(f"3. all-turn / 1-turn expansion, {length} turns", ratios, 1.3, False,
                              detail=f"{count} trajectories, {length} samples each vs 1"))
    return figures
