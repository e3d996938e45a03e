"""The naive way, as a script: read the JSONL, render every prefix, tokenize it whole, write Parquet.

It renders each sample to one ChatML string, tokenizes it whole with the `tokenizers` engine (which
returns character offsets), weights the tokens whose offsets fall inside an observation span, and
writes one Parquet file. It does not filter, redact, deduplicate or shard: strictly less than
``lwm run``, which builds the same samples from cached per-message token ids.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from masking import load_table, score_turn
from schemas.trajectory import Trajectory
from stages.pools import choose_turns
from stages.render import chatml, history_reply, target_prompt, target_reply, user_prompt
from stages.templates import render_system
from stages.tokenizer import load_tokenizer

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


def offset_weights(starts: np.ndarray, spans: list[tuple[int, int, float]]) -> np.ndarray:
    """The weight of each token by where it starts: inside an observation span its weight, else 0."""
    if not spans:
        return np.zeros(len(starts), dtype=np.float32)
    bounds = np.array([(a, b) for a, b, _ in spans], dtype=np.int64).reshape(-1, 2)
    weights = np.array([w for _, _, w in spans] + [0.0], dtype=np.float32)
    span = np.searchsorted(bounds[:, 0], starts, side="right") - 1  # the last span starting at or before
    inside = (span >= 0) & (starts < bounds[span, 1])
    return weights[np.where(inside, span, -1)]


def naive_rows(trajs: list[Trajectory], pool: str, sft_turns, backend, out_path: str, batch: int = 1000) -> int:
    """Render, tokenize whole with offsets, weight by offsets, write Parquet; returns the sample count.

    Rows are written `batch` at a time (one row group each), so memory does not grow with the input.
    """
    table = load_table(None)
    ids_col, w_col, sid_col, count = [], [], [], 0
    with pq.ParquetWriter(out_path, NAIVE_SCHEMA) as writer:
        for traj in trajs:
            keeps = [score_turn(t.action, t.observation, table).keep for t in traj.turns]
            system = render_system(traj, "v1")
            targets = [None] if pool == "cpt" else choose_turns(traj.traj_id, pool, len(traj.turns), sft_turns)
            for target in targets:
                text, spans = naive_sample(traj, system, keeps, target)
                enc = backend.encode(text, add_special_tokens=False)
                starts = np.array(enc.offsets, dtype=np.int64).reshape(-1, 2)[:, 0]
                ids_col.append(enc.ids)
                w_col.append(offset_weights(starts, spans))
                sid_col.append(f"{traj.traj_id}-{target}")
                if len(ids_col) == batch:
                    count += _write(writer, sid_col, ids_col, w_col)
        count += _write(writer, sid_col, ids_col, w_col)
    return count


def _write(writer: pq.ParquetWriter, sid_col: list, ids_col: list, w_col: list) -> int:
    """Writes the collected rows as one row group and empties the lists; returns how many there were."""
    n = len(ids_col)
    if n:
        writer.write_table(pa.table({"sample_id": sid_col, "input_ids": ids_col, "loss_weight": w_col},
                                    schema=NAIVE_SCHEMA))
    sid_col.clear(), ids_col.clear(), w_col.clear()
    return n


def read_jsonl(paths: list[str]) -> list[Trajectory]:
    """Every trajectory of the given JSONL files of native trajectories."""
    trajs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            trajs.extend(Trajectory.from_dict(json.loads(line)) for line in f if line.strip())
    return trajs


def main(argv: list[str]) -> None:
    """``python -m bench.naive OUT.parquet INPUT.jsonl...``: all-turn SFT samples of every trajectory.

    Prints the number of samples written. The tokenizer is the same vocabulary as lwmkit's default,
    on the `tokenizers` engine (which gives character offsets).
    """
    out, inputs = argv[0], argv[1:]
    backend = load_tokenizer(engine="tokenizers")._backend
    print(naive_rows(read_jsonl(inputs), "sft", "all", backend, out))


if __name__ == "__main__":
    main(sys.argv[1:])
