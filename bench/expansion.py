"""SPEC §11 expansion figures: all-turn expansion against one turn sample, by trajectory length.

One turn sample of the last turn already tokenizes the whole history; the all-turn expansion
should add little tokenization beyond it (SPEC §11: "costs ≤ 1.3× the tokenization of k = 1").
Two ratios per length: the time spent inside the tokenizer (what the target is about), and the
whole wall time of building the samples, which also grows with the output itself (k samples hold
the sum of all prefixes, ~k/2 times the tokens of one) and so has no SPEC target.
"""

from __future__ import annotations

import gc
import time

from bench.common import BENCH_DOMAIN, Figure
from masking import load_table, score_turn
from pipeline.demo import generate
from schemas.trajectory import Trajectory
from stages.samples import TrajectorySamples
from stages.tokenizer import load_tokenizer
from stages.tokenizer.segments import segment_tokenizer

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


class _TimedTokenizer:
    """Forwards to a tokenizer and adds up the seconds spent in its encode calls."""

    def __init__(self, tok) -> None:
        self._tok = tok
        self.seconds = 0.0
        self.chars = 0

    def encode(self, text):
        return self._timed(self._tok.encode, text)

    def encode_array(self, text):
        return self._timed(self._tok.encode_array, text)

    def _timed(self, encode, text):
        self.chars += len(text)
        start = time.perf_counter()
        try:
            return encode(text)
        finally:
            self.seconds += time.perf_counter() - start

    def __getattr__(self, name):
        return getattr(self._tok, name)


def _cost(trajs: list[Trajectory], all_turns: bool, seg, table) -> tuple[float, float, int]:
    """(wall seconds, tokenizer seconds, characters tokenized) of building the samples.

    Each measurement gets a fresh segment tokenizer over the same timed tokenizer (as each sample task gets
    its own): its memo of recurring texts would otherwise serve one measurement from what an earlier one
    tokenized. The garbage collector is paused while building: its passes over the samples already built
    would otherwise be charged to whichever call allocates, often the tokenizer's.
    """
    seg.tok.seconds = 0.0
    seg.tok.chars = 0
    seg = segment_tokenizer(seg.tok)
    gc.collect()
    gc.disable()
    try:
        return _build(trajs, all_turns, seg, table)
    finally:
        gc.enable()


def _build(trajs: list[Trajectory], all_turns: bool, seg, table) -> tuple[float, float, int]:
    start = time.perf_counter()
    for traj in trajs:
        scores = [score_turn(t.action, t.observation, table) for t in traj.turns]
        ts = TrajectorySamples(traj, "You are a terminal.", scores, seg)
        n = len(traj.turns)
        for t in range(1, n + 1) if all_turns else (n,):
            ts.turn_sample(t, LIMIT)
    return time.perf_counter() - start, seg.tok.seconds, seg.tok.chars


def run(lengths: tuple[int, ...], count: int, runs: int) -> list[Figure]:
    """Per trajectory length: tokenizer seconds and wall seconds, all turns / last turn only."""
    seg = segment_tokenizer(_TimedTokenizer(load_tokenizer()))  # the byte-length tables: the loaded tokenizer's
    table = load_table(None)
    figures = []
    for length in lengths:
        trajs = long_trajectories(length, count)
        _cost(trajs[:2], True, seg, table)  # a first pass warms the tokenizer and the code paths
        char_ratios, tok_ratios, wall_ratios = [], [], []
        for _ in range(runs):
            one_wall, one_tok, one_chars = _cost(trajs, False, seg, table)
            all_wall, all_tok, all_chars = _cost(trajs, True, seg, table)
            char_ratios.append(all_chars / one_chars)
            tok_ratios.append(all_tok / one_tok)
            wall_ratios.append(all_wall / one_wall)
        detail = f"{count} trajectories, {length} samples each vs 1"
        figures.append(Figure(f"expansion: all-turn / 1-turn characters tokenized, {length} turns", char_ratios, 1.3,
                              False, detail=detail + "; deterministic work measure"))
        figures.append(Figure(f"expansion: all-turn / 1-turn time inside the tokenizer, {length} turns", tok_ratios, 1.3,
                              False, detail=detail + "; GC paused; includes cache effects of the larger output"))
        figures.append(Figure(f"expansion: all-turn / 1-turn total build time, {length} turns", wall_ratios, None, False,
                              detail=detail + "; output grows with the sum of prefixes, no SPEC target"))
    return figures
