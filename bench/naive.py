"""Figure 2: a straightforward baseline against lwmkit's sample builder, for cpt and sft.

The baseline renders each sample to one ChatML string, tokenizes it whole with the `tokenizers`
engine (which returns character offsets), weights the tokens whose offsets fall inside an
observation span, and writes Parquet. lwmkit builds the same samples from cached per-message ids
(`stages.sample_rows.build_rows`) and writes the rows with the shard schema.
"""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import Figure
from masking import load_table, score_turn
from pipeline.config import resolve
from schemas.shard import schema_for
from schemas.stats import Stats
from schemas.trajectory import Trajectory
from stages.pools import choose_turns
from stages.render import chatml, history_reply, target_prompt, target_reply, user_prompt
from stages.sample_rows import build_rows
from stages.templates import render_system
from stages.tokenizer import load_tokenizer
from stages.tokenizer.segments import segment_tokenizer

MODES = {"cpt": ("cpt", 1), "sft, 1 turn": ("sft", 1), "sft, all turns": ("sft", "all")}
NAIVE_SCHEMA = pa.schema([("sample_id", pa.string()), ("input_ids", pa.list_(pa.int32())),
                          ("loss_weight", pa.list_(pa.float32()))])


def naive_sample(traj: Trajectory, system: str, keeps: list[float], target: int | None) -> tuple[str, list]:
    """(text, [(char_start, char_end, weight)]) of one cpt (target None) or turn sample."""
    text, spans = chatml("system", system), []
    last = len(traj.turns) if target is None else target - 1
    for t in range(1, last + 1):
        text += chatml("user", user_prompt(traj, t))
        reply = history_reply(traj.turns[t - 1].observation)
        start = len(text) + text_offset(reply)
        text += chatml("assistant", reply)
        if target is None:
            spans.append((start, start + len(reply), keeps[t - 1]))
    if target is not None:
        turn = traj.turns[target - 1]
        text += chatml("user", target_prompt(traj, target))
        reply = target_reply(turn.observation, turn.reasoning)
        start = len(text) + text_offset(reply)
        text += chatml("assistant", reply)
        spans.append((start, start + len(reply), 1.0))
    return text, spans


def text_offset(reply: str) -> int:
    """Where the content starts inside its ChatML message."""
    return chatml("assistant", reply).index(reply)


def naive_rows(trajs: list[Trajectory], pool: str, sft_turns, backend, out_path: str) -> int:
    """Render, tokenize whole with offsets, weight by offsets, write Parquet; returns the sample count."""
    table = load_table(None)
    ids_col, w_col, sid_col = [], [], []
    for traj in trajs:
        keeps = [score_turn(t.action, t.observation, table).keep for t in traj.turns]
        system = render_system(traj, "v1")
        targets = [None] if pool == "cpt" else choose_turns(traj.traj_id, pool, len(traj.turns), sft_turns)
        for target in targets:
            text, spans = naive_sample(traj, system, keeps, target)
            enc = backend.encode(text, add_special_tokens=False)
            weights = [next((w for a, b, w in spans if a <= s < b), 0.0) for s, _ in enc.offsets]
            ids_col.append(enc.ids)
            w_col.append(weights)
            sid_col.append(f"{traj.traj_id}-{target}")
    pq.write_table(pa.table({"sample_id": sid_col, "input_ids": ids_col, "loss_weight": w_col}, schema=NAIVE_SCHEMA),
                   out_path)
    return len(ids_col)


def lwmkit_rows(trajs: list[Trajectory], pool: str, sft_turns, out_path: str) -> int:
    """The same samples through `build_rows`, written with the shard schema."""
    cfg = resolve(overrides={"pools": {"ratios": {pool: 1.0}, "sft_turns": sft_turns},
                             "templates": {"mapping": {"cpt": ["v1"], "sft": ["v1"], "rl": ["v0"], "eval": ["v0"]}}})
    seg = segment_tokenizer(load_tokenizer())
    table = load_table(None)
    stats = Stats()
    rows = [row for traj in trajs for _, row in build_rows(traj, cfg, seg, table, stats)]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema_for(pool)), out_path)
    return len(rows)


def run(trajs: list[Trajectory], work: str, runs: int) -> list[Figure]:
    """One figure per mode: seconds(naive) / seconds(lwmkit); above 1 means lwmkit is faster."""
    backend = load_tokenizer(engine="tokenizers")._backend
    os.makedirs(work, exist_ok=True)
    figures = []
    for label, (pool, k) in MODES.items():
        lwmkit_rows(trajs[:2], pool, k, os.path.join(work, "warm.parquet"))  # load templates and tables once
        naive_rows(trajs[:2], pool, k, backend, os.path.join(work, "warm.parquet"))
        ratios, counts = [], (0, 0)
        for _ in range(runs):
            start = time.perf_counter()
            n_lwm = lwmkit_rows(trajs, pool, k, os.path.join(work, "lwm.parquet"))
            lwm = time.perf_counter() - start
            start = time.perf_counter()
            n_naive = naive_rows(trajs, pool, k, backend, os.path.join(work, "naive.parquet"))
            naive = time.perf_counter() - start
            ratios.append(naive / lwm)
            counts = (n_lwm, n_naive)
        figures.append(Figure(f"2. naive / lwmkit speed, {label}", ratios, None, True,
                              detail=f"{len(trajs)} trajectories; samples lwmkit {counts[0]}, naive {counts[1]}"))
    return figures
