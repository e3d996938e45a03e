"""The WMAT block-writing stage (model-in-the-loop): world-model blocks for sampled steps.

Opt-in: add ``"wmat_blocks"`` to ``llm.stages`` (with ``llm.endpoint`` and ``llm.model``). Runs
without it are unchanged.

For every trajectory of ``llm.wmat_pools``, ``llm.wmat_steps`` steps are chosen by stable hash
(seed ``llm.seed``), and a block is asked for each (`stages.wmat.block_messages`). An answer is
kept when it is a well-formed block with a parseable q and no spoilers against the future turns;
otherwise it is re-asked ``llm.wmat_reasks`` times, told why, and then the step gets no block.
Answers are cached in the run output by the machinery, so a resumed or repeated run sends nothing
already answered. Rows (``llm/wmat_blocks/part-<task>.parquet``): traj_id, step, status (``kept``
| ``rejected``), reason (``malformed`` | ``no_confidence`` | ``spoiler`` | ``request_failed`` | ``request_refused``),
detail, block, confidence (q in [0, 1]), keywords, attempts. The blocks change nothing the
world-model pools see; `pipeline.wmat_pools` turns them into the two WMAT pools.
"""


from __future__ import annotations

from typing import Any

import pyarrow as pa

from schemas.trajectory import Trajectory
from stages.llm.stage import Applied, Request, StageContext, unanswered_reason
from stages.pools import pool_of
from stages.wmat import REASK_NOTE, block_messages, choose_steps, validate_block

STAGE_NAME = "wmat_blocks"

SCHEMA = pa.schema([
    ("traj_id", pa.string()),
    ("step", pa.int32()),
    ("status", pa.string()),
    ("reason", pa.string()),
    ("detail", pa.string()),
    ("block", pa.string()),
    ("confidence", pa.float32()),
    ("keywords", pa.list_(pa.string())),
    ("attempts", pa.int32()),
])


class WmatBlockStage:
    name = STAGE_NAME
    schema = SCHEMA
    uses_judge = False  # blocks are checked by rules (format, spoilers), not by a judge

    def wants(self, traj: Trajectory, ctx: StageContext) -> bool:
        pools = ctx.cfg["pools"]
        return bool(traj.turns) and pool_of(traj.split_key, pools["ratios"], pools["seed"]) in set(ctx.llm["wmat_pools"])

    def steps(self, traj: Trajectory, ctx: StageContext) -> list[int]:
        return choose_steps(traj.traj_id, len(traj.turns), int(ctx.llm["wmat_steps"]), ctx.llm["seed"])

    def _request(self, traj: Trajectory, t: int, ctx: StageContext, attempt: int, reason: str = "",
                 detail: str = "") -> Request:
        note = REASK_NOTE[reason].format(detail=detail) if attempt and reason in REASK_NOTE else ""
        return Request(block_messages(traj, t, int(ctx.llm["wmat_obs_chars"]), note),
                       salt="" if attempt == 0 else f"wmat-reask-{attempt}-{reason}", params=ctx.gen_params())

    def dry_requests(self, traj: Trajectory, ctx: StageContext):
        steps = self.steps(traj, ctx)
        return [self._request(traj, t, ctx, 0) for t in steps], (len(steps), len(steps) * (1 + int(ctx.llm["wmat_reasks"])))

    def process(self, trajs: list[Trajectory], ctx: StageContext) -> list[dict[str, Any]]:
        ngram = int(ctx.llm["wmat_spoiler_ngram"])
        pending = [(traj, t) for traj in trajs for t in self.steps(traj, ctx)]
        ctx.stats.add("trajectories", len(trajs))
        ctx.stats.add("steps", len(pending))
        last: dict[tuple[str, int], tuple[str, str]] = {}
        rows: dict[tuple[str, int], dict[str, Any]] = {}
        for attempt in range(int(ctx.llm["wmat_reasks"]) + 1):
            if not pending:
                break
            answers = ctx.send([self._request(traj, t, ctx, attempt, *last.get((traj.traj_id, t), ("", "")))
                                for traj, t in pending])
            retry = []
            for (traj, t), answer in zip(pending, answers):
                key = (traj.traj_id, t)
                if not answer.ok:
                    check, reason, detail, text = None, unanswered_reason(answer), answer.error, ""
                else:
                    check, reason, detail, text = validate_block(answer.text, traj, t, ngram)
                if check is not None:
                    out = check.output
                    rows[key] = {"traj_id": traj.traj_id, "step": t, "status": "kept", "reason": "", "detail": "",
                                 "block": ctx.redacted(text),
                                 "confidence": out.confidence,
                                 "keywords": [ctx.redacted(k, count=False) for k in out.keywords],
                                 "attempts": attempt + 1}
                    continue
                ctx.stats.add(f"rejected_answers.{reason}")
                last[key] = (reason, detail)
                rows[key] = {"traj_id": traj.traj_id, "step": t, "status": "rejected", "reason": reason,
                             "detail": detail, "block": None, "confidence": None, "keywords": [],
                             "attempts": attempt + 1}
                if answer.ok:  # a request without an answer was retried by the client, or is refused for good
                    retry.append((traj, t))
            pending = retry
        out_rows = [rows[(traj.traj_id, t)] for traj in trajs for t in self.steps(traj, ctx)]
        for row in out_rows:
            ctx.stats.add(row["status"])
            if row["status"] == "rejected":
                ctx.stats.add(f"dropped.{row['reason']}")
        return out_rows

    def apply(self, traj: Trajectory, rows: list[dict[str, Any]], ctx: StageContext) -> Applied:
        # blocks feed the WMAT pools only: the world-model pools and every later stage's prompt are unchanged, so a
        # trajectory whose blocks got no answer holds no later stage back (`Applied.unanswered`)
        return Applied()


STAGE = WmatBlockStage()
