"""The two WMAT pools, written after the shards from the blocks of the ``wmat_blocks`` stage.

``OUT/wmat/<pool>/part-<task>.parquet`` (the shard schema, rows sorted by sample id, one file per
trajectories part): ``midtrain`` — one sample per trajectory with at least one kept block, the
whole trajectory from the agent's view with its blocks inserted; ``fesft`` — one single-turn
sample per kept block (`stages.wmat`). Weights per category (``llm.wmat_world_model_weight``,
``llm.wmat_policy_weight``, ``llm.wmat_observation_weight``; FE-SFT prompts are never trained
on), and each block, policy span and observation is its own ``turn_spans`` entry with
``turn_category`` ``world_model``, ``policy`` or ``observation``, so ``lwm train
--category-weight world_model=0.5`` re-weights one kind of span at load time; ``turn_keep`` holds
each span's weight and ``turn_stats`` zeros (the four masking statistics describe the
action/observation pairs of the world-model pools, not these spans). The manifest's
``wmat`` section counts samples and tokens per pool and lists the files with their sha256.

``OUT/wmat/rl/part-<task>.parquet`` holds the FE-SFT prompts for offline RL with the WMAT reward:
per kept block of a trajectory with a recorded outcome, the prompt ``messages`` (system and user of
the FE-SFT sample), ``future`` (the later real trajectory as text, R_ground's reference) and
``correct`` (the recorded success, I of R_calib) — the ``ground_truth`` / ``extra_info["correct"]``
of `stages.reward.wmat_frameworks.compute_score` and the ``future`` / ``correct`` columns of its
``trl_reward`` — and ``omega`` (ω of the domain).
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any

import pyarrow as pa

from pipeline.dedup_stage import removed_ids
from pipeline.digest import file_sha256
from pipeline.engine import RunContext, Stage
from pipeline.leftovers import remove_stale_task_outputs
from pipeline.llm_stage import Augment, get_stage, read_kept
from pipeline.occurrences import run_offsets
from pipeline.outputs import AtomicParquetWriter, out_fs
from schemas.shard import MESSAGE_TYPE, SHARD_SCHEMA
from schemas.stats import Stats, merge_all
from schemas.trajectory import Trajectory
from stages.llm.wmat_blocks import STAGE_NAME
from stages.reward.wmat import omega_for
from stages.wmat import (
    OBSERVATION,
    POLICY,
    WORLD_MODEL,
    agent_system,
    fesft_prompt,
    fesft_segments,
    future_text,
    midtrain_segments,
    tokenize_segments,
)

WMAT_POOLS = ("midtrain", "fesft")
TEMPLATE = "wmat"
RL_SCHEMA = pa.schema([
    ("sample_id", pa.string()),
    ("traj_id", pa.string()),
    ("domain", pa.string()),
    ("turn_idx", pa.int32()),
    ("total_turns", pa.int32()),
    ("messages", pa.list_(MESSAGE_TYPE)),
    ("future", pa.string()),
    ("correct", pa.bool_()),
    ("omega", pa.float32()),
])


def _rl_row(traj: Trajectory, key: str, t: int) -> dict[str, Any]:
    return {"sample_id": _sample_id(key, "rl", t), "traj_id": traj.traj_id, "domain": traj.domain,
            "turn_idx": t, "total_turns": len(traj.turns),
            "messages": [{"role": "system", "content": agent_system(traj, with_format=True)},
                         {"role": "user", "content": fesft_prompt(traj, t)}],
            "future": future_text(traj, t), "correct": bool(traj.outcome.success), "omega": omega_for(traj.domain)}


def _sample_id(key: str, pool: str, step: int) -> str:
    """`key`: the trajectory's occurrence key (`pipeline.occurrences`), so trajectories sharing an id get their
    own sample ids, as in the other pools."""
    return hashlib.sha256(f"{key}\x1f{pool}\x1f{step}\x1f{TEMPLATE}".encode()).hexdigest()[:24]


def _weights(llm: dict[str, Any]) -> dict[str, float]:
    return {WORLD_MODEL: float(llm["wmat_world_model_weight"]), POLICY: float(llm["wmat_policy_weight"]),
            OBSERVATION: float(llm["wmat_observation_weight"])}


def _row(traj: Trajectory, key: str, pool: str, step: int, seg, segments, weights, limit: int, stats: Stats):
    ids, loss, spans, cats = tokenize_segments(seg, segments, weights)
    if len(ids) > limit:
        stats.add(f"wmat.{pool}.over_context_limit")
        return None
    stats.add(f"wmat.{pool}.samples")
    stats.add(f"wmat.{pool}.tokens", len(ids))
    stats.add(f"wmat.{pool}.loss_tokens", sum(1 for w in loss if w > 0))
    for (a, b), c in zip(spans, cats):
        stats.add(f"wmat.{pool}.span_tokens.{c}", b - a)
    return {
        "sample_id": _sample_id(key, pool, step), "traj_id": traj.traj_id, "domain": traj.domain,
        "pool": pool, "template": TEMPLATE, "turn_idx": step, "total_turns": len(traj.turns),
        "input_ids": ids, "loss_weight": loss,
        "turn_spans": [{"start": a, "end": b} for a, b in spans], "turn_category": cats,
        "turn_keep": [weights[c] for c in cats],
        "turn_stats": [{"ol": 0.0, "nov": 0.0, "jac": 0.0, "r": 0.0} for _ in cats],
        "num_tokens": len(ids), "num_loss_tokens": sum(1 for w in loss if w > 0),
    }


def pool_path(root: str, pool: str, task_id: str) -> str:
    return f"{root}/wmat/{pool}/part-{task_id}.parquet"


def run_wmat_pool_task(task: dict[str, Any]) -> dict[str, Any]:
    """Both WMAT pools of one trajectories part. `task`: task_id, out, cfg, stages, drop, spec_hash."""
    from stages.tokenizer import load_tokenizer
    from stages.tokenizer.segments import segment_tokenizer

    cfg = task["cfg"]
    fs, root = out_fs(task["out"])
    llm, chat_format = cfg["llm"], cfg["render"]["chat_format"]
    seg = segment_tokenizer(load_tokenizer(cfg["tokenizer"]["spec"], cfg["tokenizer"]["engine"] or None))
    weights, limit = _weights(llm), int(cfg["pools"]["context_limit"])
    aug = Augment(cfg, fs, root, task["task_id"], task["stages"])
    blocks_by_key: dict[str, dict[int, str]] = {}
    for key, traj_rows in next(rows for stage, rows in aug.stages if stage.name == STAGE_NAME).items():
        for r in traj_rows:
            if r["status"] == "kept":
                blocks_by_key.setdefault(key, {})[r["step"]] = r["block"]
    stats = Stats()
    out: dict[str, list[dict[str, Any]]] = {p: [] for p in (*WMAT_POOLS, "rl")}
    for key, traj in read_kept(fs, root, task["task_id"], set(task.get("drop") or ()), task.get("dups")):
        blocks = blocks_by_key.get(key)
        if not blocks:
            continue
        aug.apply(traj, key)
        row = _row(traj, key, "midtrain", 0, seg, midtrain_segments(traj, blocks, chat_format), weights, limit, stats)
        if row:
            out["midtrain"].append(row)
        for t in sorted(blocks):
            row = _row(traj, key, "fesft", t, seg, fesft_segments(traj, t, blocks[t], chat_format), weights, limit,
                       stats)
            if row:
                out["fesft"].append(row)
            if traj.outcome is not None and traj.outcome.success is not None:
                out["rl"].append(_rl_row(traj, key, t))
                stats.add("wmat.rl.samples")
            else:
                stats.add("wmat.rl.no_outcome")
    files = []
    for pool in (*WMAT_POOLS, "rl"):
        path = pool_path(root, pool, task["task_id"])
        schema = RL_SCHEMA if pool == "rl" else SHARD_SCHEMA
        table = pa.Table.from_pylist(sorted(out[pool], key=lambda r: r["sample_id"]), schema=schema)
        with AtomicParquetWriter(fs, path, schema, rows_per_group=512,
                                 compression_level=cfg["shards"]["compression_level"], digest=True) as w:
            w.write_table(table)
        files.append({"path": posixpath.relpath(path, root), "rows": table.num_rows, "bytes": fs.size(path),
                      "sha256": w.sha256()})
    result = {"task_id": task["task_id"], "stage": "wmat_pools", "stats": stats.to_dict(), "files": files,
              "rows": sum(f["rows"] for f in files), "bytes": 0, "spec_hash": task["spec_hash"]}
    return result


def _remove_stale(fs, root: str, task_ids: set[str]) -> None:
    """Files and markers of parts an earlier run over another input or task layout left here."""
    remove_stale_task_outputs(fs, root, task_ids, ("wmat", "_tasks/wmat_pools"))


class WmatPoolsStage(Stage):
    """One task per trajectories part when the ``wmat_blocks`` stage ran; records the pools in the manifest."""

    name = "wmat_pools"
    sections = ("tokenizer", "render", "shards", "llm", "pools")  # llm: its wmat_* keys; pools: context_limit
    run_task = staticmethod(run_wmat_pool_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        llm_run = ctx.shared.get("llm")
        if not llm_run or not any(get_stage(name).name == STAGE_NAME for name in llm_run["stages"]):
            return None
        drop, dups = sorted(removed_ids(ctx)), run_offsets(ctx)
        return [{"task_id": tid, "out": ctx.cfg["run"]["out"], "cfg": ctx.cfg, "stages": list(llm_run["stages"]),
                 # `spec`: the model stages' spec of the part, which holds its shared ids already
                 "drop": drop, "dups": dups.get(tid, {}), "spec": [spec, drop]}
                for tid, spec in sorted(llm_run["specs"].items())]

    def finish(self, ctx: RunContext, results: list[dict[str, Any]]) -> None:
        if self.name not in ctx.stage_runs:  # did not run
            return
        fs, root = ctx.fs, ctx.root
        _remove_stale(fs, root, {r["task_id"] for r in results})
        stats = merge_all([r["stats"] for r in results]).nested().get("wmat", {})
        for pool in (*WMAT_POOLS, "rl"):
            stats.setdefault(pool, {}).setdefault("samples", 0)
        files = [f for r in results for f in r["files"]]
        for f in files:
            if "sha256" not in f:  # the result of a task finished by an earlier version, which hashed files here
                f["sha256"] = file_sha256(fs, posixpath.join(root, f["path"]))
        ctx.manifest["wmat"] = {"pools": stats, "shards": files}


WMAT_POOLS_STAGE = WmatPoolsStage()  # WMAT_POOLS names the pools
