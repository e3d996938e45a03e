"""Training rows of one trajectory: every pool's samples rendered, tokenized, weighted and counted.

Pure functions of a trajectory and the resolved config (`build_rows`); the sample stage
(`pipeline.sample_task`) reads the trajectories and writes what these yield into shard buckets.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from masking import score_turn, word_set
from schemas.stats import Stats
from schemas.text import escape_surrogates
from schemas.trajectory import Trajectory
from stages.memo import TextMemo
from stages.pools import choose_template, choose_turns, pool_of, sample_id
from stages.render import chatml, history_reply, target_prompt, user_prompt
from stages.reward.verifiers import verifier_kind
from stages.samples import SampleParts, TrajectorySamples
from stages.templates import render_system
from stages.tokenizer.segments import check_segmentwise


def bucket_of(sid: str, buckets: int) -> int:
    return int(sid[:12], 16) % buckets


def trajectory_bucket(key: str, buckets: int) -> int:
    """The shard bucket of every weighted sample of one trajectory: a stable hash of what its sample ids hash
    (`sample_key`), so all of them, and the trajectory's pieces, go to one shard task."""
    return bucket_of(hashlib.sha256(f"{key}\x1fpieces".encode()).hexdigest(), buckets)


def stats_struct(score) -> dict[str, float]:
    s = score.stats
    return {"ol": s.ol, "nov": s.nov, "jac": s.jac, "r": s.r}


def sequential_sum(values: np.ndarray) -> float:
    """``float(sum(values))`` of Python 3.11 for float64 values: added one by one, left to right.

    ``np.sum`` adds pairwise, which can round differently; an accumulate is strictly sequential.
    Python's ``sum`` starts from the integer 0, so an all-negative-zero sum is ``0.0`` (the ``+ 0.0``).
    Zeros change no partial sum but the sign of a zero one, so the sum over only the nonzero values
    (what `build_rows` passes for a whole sample) is the same number.
    """
    if not len(values):
        return 0.0
    return float(np.add.accumulate(values)[-1]) + 0.0


def account(stats: Stats, traj: Trajectory, pool: str, template: str, parts: SampleParts, row: dict[str, Any],
            loss_weights: np.ndarray) -> None:
    """Histogram counters: the trained observations (cpt: all; turn pools: the target).

    `loss_weights`: the sample's nonzero weights in order (their sum is the sample's weighted tokens).
    """
    stats.add(f"samples.{pool}")
    stats.add(f"templates.{pool}.{template}")
    stats.add(f"tokens.{pool}.total", row["num_tokens"])
    stats.add(f"tokens.{pool}.loss", row["num_loss_tokens"])
    stats.add(f"tokens.{pool}.weighted", sequential_sum(loss_weights))
    spans = list(range(len(parts.spans))) if pool == "cpt" else [len(parts.spans) - 1]
    for k in spans:
        start, end = parts.spans[k]
        cat = row["turn_category"][k]
        base = f"hist.{traj.domain}.{pool}.{template}.{cat}"
        stats.add(f"{base}.turns")
        stats.add(f"{base}.tokens", end - start)
        stats.add(f"{base}.weighted", sequential_sum(parts.span_weights(k)))
    if parts.dropped_turns:
        stats.add("samples.history_truncated")
        stats.add("turns.dropped_for_context", parts.dropped_turns)


def sample_key(traj_id: str, occurrence: int) -> str:
    """What a sample id hashes for the n-th trajectory (1-based) of the run carrying `traj_id`.

    The first keeps the plain id, so runs without shared ids keep their sample ids; a later one
    hashes ``traj_id`` + ``\x1f#n`` (a control character no adapter writes into an id).
    """
    return traj_id if occurrence <= 1 else f"{traj_id}\x1f#{occurrence}"


def key_parts(key: str) -> tuple[str, int]:
    """The ``(traj_id, occurrence)`` a `sample_key` was made of."""
    traj_id, sep, n = key.rpartition("\x1f#")
    written = sep and n.isdigit() and n[0] != "0" and int(n) >= 2  # `sample_key` writes #2, #3, …
    return (traj_id, int(n)) if written else (key, 1)


def word_set_memo(budget: int = 16 << 20, longest: int = 1 << 16) -> TextMemo[frozenset[str]]:
    """`masking.word_set` for one task's texts, each distinct one scanned once while kept (a kept word set
    costs its text's characters and about 100 bytes per word: the string and its set slot)."""
    return TextMemo(word_set, budget, longest, cost=lambda words: 100 * len(words))


def build_rows(traj: Trajectory, cfg: dict[str, Any], seg, table, stats: Stats, verify: bool = False,
               id_key: str | None = None, aug=None, words: Callable[[str], frozenset[str]] = word_set,
               joined: bool = True):
    """Yield ``(pool, row)`` for every sample of one trajectory under the resolved config.

    `id_key` (default: the traj_id) is what the sample ids hash (`sample_key`); `aug`
    (`pipeline.llm_stage.Augment`) applies the model-in-the-loop stages' outputs first; `words`: `word_set`
    or a function equal to it (`word_set_memo`). A weighted sample's row holds its ``input_ids`` and
    ``loss_weight`` as numpy arrays; with `joined` False, where the trajectory has more than one target turn,
    instead the ``pieces`` (`stages.samples.Piece`) they join, which its samples share.
    """
    id_key = id_key or traj.traj_id
    applied = aug.apply(traj, id_key) if aug is not None else None
    dropped = applied.dropped if applied is not None else {}
    pools_cfg = cfg["pools"]
    pool = pool_of(traj.split_key, pools_cfg["ratios"], pools_cfg["seed"])
    stats.add(f"pools.{pool}.trajectories")
    template = choose_template(traj.traj_id, pool, list(cfg["templates"]["mapping"][pool]), pools_cfg["seed"])
    system_text = render_system(traj, template, tuple(cfg["templates"]["dirs"]))
    scores = [score_turn(t.action, t.observation, table, words) for t in traj.turns]
    ts = TrajectorySamples(traj, system_text, scores, seg, cfg["render"]["chat_format"],
                           cfg["masking"]["keep_mode"], cfg["masking"]["seed"],
                           reasoning_weight=aug.reasoning_weight if aug is not None and pool == "sft" else 1.0,
                           target_reasoning=applied.reasoning if applied is not None and pool == "sft" else None)
    limit = int(pools_cfg["context_limit"])
    total = len(traj.turns)
    base = {"traj_id": traj.traj_id, "domain": traj.domain, "pool": pool, "template": template, "total_turns": total}
    if pool == "rl":
        t = choose_turns(traj.traj_id, pool, total, seed=pools_cfg["seed"])[0]
        prompt = ts.rl_prompt(t)
        if len(prompt) > int(pools_cfg["rl_prompt_cap"]):
            stats.add("filtered.rl_prompt_cap")
            return
        if len(prompt) > limit:  # a prompt the model cannot read whole: rl prompts are dropped, never truncated
            stats.add("filtered.sample_over_context_limit")
            return
        score = scores[t - 1]
        messages = [{"role": "system", "content": system_text}]
        for h in range(1, t):
            messages.append({"role": "user", "content": user_prompt(traj, h)})
            messages.append({"role": "assistant", "content": history_reply(traj.turns[h - 1].observation)})
        messages.append({"role": "user", "content": target_prompt(traj, t)})
        sid = sample_id(id_key, pool, t, template)
        stats.add("samples.rl")
        stats.add(f"templates.rl.{template}")
        stats.add("tokens.rl.total", len(prompt))
        stats.add(f"hist.{traj.domain}.rl.{template}.{score.category}.turns")
        stats.add(f"hist.{traj.domain}.rl.{template}.{score.category}.tokens", 0)
        stats.add(f"hist.{traj.domain}.rl.{template}.{score.category}.weighted", 0.0)
        yield pool, {**base, "sample_id": sid, "turn_idx": t, "prompt_ids": prompt,
                     "reference": traj.turns[t - 1].observation, "messages": messages,
                     "turn_category": [score.category], "turn_keep": [score.keep],
                     "turn_stats": [stats_struct(score)], "num_tokens": len(prompt),
                     "verifier": verifier_kind(traj.domain, traj.turns[t - 1].observation)}
        return
    targets = [0] if pool == "cpt" else choose_turns(
        traj.traj_id, pool, total, pools_cfg["sft_turns"], pools_cfg["eval_subsample"], pools_cfg["seed"]
    )
    if not targets:  # an eval trajectory whose every turn `pools.eval_subsample` left out: no sample at all
        stats.add(f"pools.{pool}.unsampled")
    whole = joined or len(targets) == 1  # a sample that shares no piece with another is joined at once
    for t in targets:
        if t in dropped:
            stats.add(f"filtered.llm_{dropped[t]}")
            continue
        parts = ts.cpt(limit) if t == 0 else ts.turn_sample(t, limit)
        if parts is None:
            stats.add("filtered.sample_over_context_limit")
            continue
        if verify and cfg["render"]["chat_format"] == "chatml":
            kept = sorted(set(parts.span_turns) - ({t} if t else set()))
            check_segmentwise(seg, parts.ids, ts.rendered_parts(kept, t or None))
            verify = False
        sid = sample_id(id_key, pool, t, template)
        if whole:  # numpy arrays: `rows_table` joins them without Python loops
            tokens = {"input_ids": parts.id_array, "loss_weight": parts.weight_array}
        else:
            tokens = {"pieces": parts.pieces}
        loss_weights = parts.loss_weights()  # NaN counts as nonzero, as before
        row = {
            **base,
            "sample_id": sid,
            "turn_idx": t,
            **tokens,
            "turn_spans": [{"start": a, "end": b} for a, b in parts.spans],
            "turn_category": [scores[k - 1].category for k in parts.span_turns],
            "turn_keep": [scores[k - 1].keep for k in parts.span_turns],
            "turn_stats": [stats_struct(scores[k - 1]) for k in parts.span_turns],
            "num_tokens": parts.num_tokens,
            "num_loss_tokens": len(loss_weights),
        }
        account(stats, traj, pool, template, parts, row, loss_weights)
        yield pool, row


_FLAT_TYPES = {pa.int32(): np.int32, pa.float32(): np.float32}


def rows_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """The rows as a table of `schema`, built column by column.

    Lists of numbers (token ids, weights) go through one flat numpy buffer and its offsets instead
    of Arrow's per-value conversion of nested Python lists; the table equals
    ``pa.Table.from_pylist(rows, schema=schema)``. Values given as numpy arrays (what `build_rows`
    yields) are joined with one ``np.concatenate``; Python lists are read value by value.
    """
    columns = []
    for f in schema:
        values = [r[f.name] for r in rows]
        item = f.type.value_type if pa.types.is_list(f.type) else None
        if item in _FLAT_TYPES:
            lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
            offsets = np.zeros(len(values) + 1, dtype=np.int32)
            np.cumsum(lengths, out=offsets[1:])
            dtype = _FLAT_TYPES[item]
            with np.errstate(over="ignore"):  # a float beyond float32 becomes inf, as Arrow's own cast does
                if values and all(isinstance(v, np.ndarray) for v in values):
                    # cast while joining (as `astype` casts): no float64 copy of a column's weights before its float32 one
                    flat = np.concatenate(values, dtype=dtype, casting="unsafe")
                else:
                    flat = np.fromiter(itertools.chain.from_iterable(values), dtype=dtype, count=int(offsets[-1]))
            columns.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat), type=f.type))
            continue
        try:
            columns.append(pa.array(values, type=f.type))
        except UnicodeEncodeError:  # a lone surrogate is written as its backslash escape
            columns.append(pa.array(escape_surrogates(values), type=f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def render_example(traj: Trajectory, system_text: str) -> str:
    """The ChatML text of a whole trajectory (for docs and debugging)."""
    text = chatml("system", system_text)
    for i, _turn in enumerate(traj.turns, 1):
        text += chatml("user", user_prompt(traj, i)) + chatml("assistant", history_reply(traj.turns[i - 1].observation))
    return text
