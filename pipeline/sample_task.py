"""The sample task: one trajectories part → samples of every pool, hashed into shard buckets.

Together with the shard task this is the final deterministic repartition as a shuffle: each
sample task writes ``_work/samples/<pool>/b<bucket>/<task>.parquet`` (bucket = stable hash of the
sample id), and one shard task per bucket gathers, sorts and writes a shard. No step collects
samples on the driver, and the shard a sample lands in depends only on its id.
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq

from masking import load_table, score_turn
from pipeline.engine import Stage
from pipeline.outputs import AtomicParquetWriter, out_fs
from schemas.shard import schema_for
from schemas.stats import Stats
from schemas.trajectory import Trajectory
from stages.pools import choose_template, choose_turns, pool_of, sample_id
from stages.render import chatml, history_reply, target_prompt, user_prompt
from stages.reward.verifiers import verifier_kind
from stages.samples import SampleParts, TrajectorySamples
from stages.templates import render_system
from stages.tokenizer import load_tokenizer
from stages.tokenizer.segments import check_segmentwise, segment_tokenizer


def bucket_of(sid: str, buckets: int) -> int:
    return int(sid[:12], 16) % buckets


def _stats_struct(score) -> dict[str, float]:
    s = score.stats
    return {"ol": s.ol, "nov": s.nov, "jac": s.jac, "r": s.r}


class SampleWriter:
    """Lazily opened bucket files of one task."""

    def __init__(self, fs, root: str, task_id: str, buckets: dict[str, int], level: int) -> None:
        self.fs, self.root, self.task_id, self.buckets, self.level = fs, root, task_id, buckets, level
        self.writers: dict[tuple[str, int], AtomicParquetWriter] = {}

    def write(self, pool: str, row: dict[str, Any]) -> None:
        b = bucket_of(row["sample_id"], self.buckets[pool])
        key = (pool, b)
        if key not in self.writers:
            path = f"{self.root}/_work/samples/{pool}/b{b:05d}/{self.task_id}.parquet"
            self.writers[key] = AtomicParquetWriter(self.fs, path, schema_for(pool), rows_per_group=256,
                                                    compression_level=1)
        self.writers[key].write_row(row)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()


def _account(stats: Stats, traj: Trajectory, pool: str, template: str, parts: SampleParts, row: dict[str, Any]) -> None:
    """Histogram counters: the trained observations (cpt: all; turn pools: the target)."""
    stats.add(f"samples.{pool}")
    stats.add(f"templates.{pool}.{template}")
    stats.add(f"tokens.{pool}.total", len(parts.ids))
    stats.add(f"tokens.{pool}.loss", row["num_loss_tokens"])
    stats.add(f"tokens.{pool}.weighted", float(sum(parts.weights)))
    spans = list(range(len(parts.spans))) if pool == "cpt" else [len(parts.spans) - 1]
    for k in spans:
        start, end = parts.spans[k]
        cat = row["turn_category"][k]
        base = f"hist.{traj.domain}.{pool}.{template}.{cat}"
        stats.add(f"{base}.turns")
        stats.add(f"{base}.tokens", end - start)
        stats.add(f"{base}.weighted", float(sum(parts.weights[start:end])))
    if parts.dropped_turns:
        stats.add("samples.history_truncated")
        stats.add("turns.dropped_for_context", parts.dropped_turns)


def duplicate_offsets(fs, root: str, task_ids: list[str]) -> dict[str, dict[str, int]]:
    """Per trajectories part, for each ``traj_id`` that more than one trajectory of the run carries:
    how many of them come in earlier parts (parts in task-id order, rows in file order).

    Only parts holding such ids appear; a run without shared ids gets ``{}``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = {}
    for tid in sorted(task_ids):
        path = f"{root}/trajectories/part-{tid}.parquet"
        if fs.exists(path):
            columns[tid] = pq.read_table(fs.open(path, "rb"), columns=["traj_id"]).column("traj_id")
    if not columns:
        return {}
    counts = pc.value_counts(pa.chunked_array([c for col in columns.values() for c in col.chunks],
                                              type=pa.string()))
    shared = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
    if len(shared) == 0:
        return {}
    seen: dict[str, int] = {}
    out: dict[str, dict[str, int]] = {}
    for tid, col in columns.items():
        ids = pc.filter(col, pc.is_in(col, value_set=shared)).to_pylist()
        if ids:
            out[tid] = {t: seen.get(t, 0) for t in sorted(set(ids))}
            for t in ids:
                seen[t] = seen.get(t, 0) + 1
    return out


def sample_key(traj_id: str, occurrence: int) -> str:
    """What a sample id hashes for the n-th trajectory (1-based) of the run carrying `traj_id`.

    The first keeps the plain id, so runs without shared ids keep their sample ids; a later one
    hashes ``traj_id`` + ``\x1f#n`` (a control character no adapter writes into an id).
    """
    return traj_id if occurrence <= 1 else f"{traj_id}\x1f#{occurrence}"


def build_rows(traj: Trajectory, cfg: dict[str, Any], seg, table, stats: Stats, verify: bool = False,
               id_key: str | None = None, aug=None):
    """Yield ``(pool, row)`` for every sample of one trajectory under the resolved config.

    `id_key` (default: the traj_id) is what the sample ids hash (`sample_key`); `aug`
    (`pipeline.llm_stage.Augment`) applies the model-in-the-loop stages' outputs first.
    """
    id_key = id_key or traj.traj_id
    dropped = aug.apply(traj) if aug is not None else {}
    pools_cfg = cfg["pools"]
    pool = pool_of(traj.split_key, pools_cfg["ratios"], pools_cfg["seed"])
    stats.add(f"pools.{pool}.trajectories")
    template = choose_template(traj.traj_id, pool, list(cfg["templates"]["mapping"][pool]), pools_cfg["seed"])
    system_text = render_system(traj, template, tuple(cfg["templates"]["dirs"]))
    scores = [score_turn(t.action, t.observation, table) for t in traj.turns]
    ts = TrajectorySamples(traj, system_text, scores, seg, cfg["render"]["chat_format"],
                           cfg["masking"]["keep_mode"], cfg["masking"]["seed"],
                           reasoning_weight=aug.reasoning_weight if aug is not None and pool == "sft" else 1.0)
    limit = int(pools_cfg["context_limit"])
    total = len(traj.turns)
    base = {"traj_id": traj.traj_id, "domain": traj.domain, "pool": pool, "template": template, "total_turns": total}
    if pool == "rl":
        t = choose_turns(traj.traj_id, pool, total, seed=pools_cfg["seed"])[0]
        prompt = ts.rl_prompt(t)
        if len(prompt) > int(pools_cfg["rl_prompt_cap"]):
            stats.add("filtered.rl_prompt_cap")
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
                     "turn_stats": [_stats_struct(score)], "num_tokens": len(prompt),
                     "verifier": verifier_kind(traj.domain, traj.turns[t - 1].observation)}
        return
    targets = [0] if pool == "cpt" else choose_turns(
        traj.traj_id, pool, total, pools_cfg["sft_turns"], pools_cfg["eval_subsample"], pools_cfg["seed"]
    )
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
        row = {
            **base,
            "sample_id": sid,
            "turn_idx": t,
            "input_ids": parts.ids,
            "loss_weight": parts.weights,
            "turn_spans": [{"start": a, "end": b} for a, b in parts.spans],
            "turn_category": [scores[k - 1].category for k in parts.span_turns],
            "turn_keep": [scores[k - 1].keep for k in parts.span_turns],
            "turn_stats": [_stats_struct(scores[k - 1]) for k in parts.span_turns],
            "num_tokens": len(parts.ids),
            "num_loss_tokens": len(parts.weights) - parts.weights.count(0.0),
        }
        _account(stats, traj, pool, template, parts, row)
        yield pool, row


def run_sample_task(task: dict[str, Any]) -> dict[str, Any]:
    """Samples of one trajectories part. `task`: task_id, out, cfg, buckets, spec_hash, drop (ids),
    dups (`duplicate_offsets` of this part)."""
    cfg = task["cfg"]
    fs, root = out_fs(task["out"])
    tok = load_tokenizer(cfg["tokenizer"]["spec"], cfg["tokenizer"]["engine"] or None)
    seg = segment_tokenizer(tok)
    table = load_table(cfg["masking"]["table"])
    stats = Stats()
    drop = set(task.get("drop") or ())
    dups = dict(task.get("dups") or {})
    writer = SampleWriter(fs, root, task["task_id"], task["buckets"], 1)
    aug = None
    if task.get("llm"):
        from pipeline.llm_stage import Augment

        aug = Augment(cfg, fs, root, task["task_id"], task["llm"]["stages"])
    path = f"{root}/trajectories/part-{task['task_id']}.parquet"
    verify = True
    try:
        pf = pq.ParquetFile(fs.open(path, "rb"))
        for batch in pf.iter_batches(batch_size=64):
            for d in batch.to_pylist():
                traj = Trajectory.from_dict(d)
                key = traj.traj_id
                if key in dups:
                    dups[key] += 1
                    key = sample_key(key, dups[key])
                if traj.traj_id in drop:
                    continue
                shipped = False
                for pool, row in build_rows(traj, cfg, seg, table, stats, verify, key, aug):
                    writer.write(pool, row)
                    shipped = True
                if shipped:  # the trajectory reaches the shards (counted for the run summary)
                    stats.add("pools.trajectories_in_shards")
                verify = False
        writer.close()
    except BaseException:
        writer.abort()
        raise
    stats.add("tokenizer.chars", seg.counter.chars)
    result = {"task_id": task["task_id"], "stage": "samples", "stats": stats.to_dict(),
              "rows": int(sum(v for k, v in stats.to_dict().items() if k.startswith("samples.") and k.count(".") == 1)),
              "bytes": 0, "spec_hash": task["spec_hash"]}
    return result


def render_example(traj: Trajectory, system_text: str) -> str:
    """The ChatML text of a whole trajectory (for docs and debugging)."""
    text = chatml("system", system_text)
    for i, _turn in enumerate(traj.turns, 1):
        text += chatml("user", user_prompt(traj, i)) + chatml("assistant", history_reply(traj.turns[i - 1].observation))
    return text


SAMPLES = Stage("samples", ("pools", "templates", "masking", "tokenizer", "render", "shards"), run_sample_task)
