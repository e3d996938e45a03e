"""Model-in-the-loop stages: what every stage that asks a model shares.

A model-in-the-loop stage runs between the trajectories layer and the samples, one task per
trajectories part, on the run's executor (Ray or in-process), and resumes by task markers like
every other stage. What this module adds to that:

- **content-keyed cache in the run output**: every answer is stored under
  ``<out>/_llm/cache/`` (any fsspec URL, so S3 too) before it is used, keyed by the request
  body (model, messages, parameters) and a salt — not by the endpoint or the API key, so the same
  model served elsewhere reuses the answers. A killed run re-sends nothing already answered, and
  since every later step is a function of the cached answers, the shards come out byte-identical.
  A request the server refuses for good (`stages.llm.client.refuses_the_request`) is recorded too, for
  that endpoint only; other failures are asked again by the next run;
- **budget**: ``llm.max_requests`` / ``llm.max_tokens`` (0 = no limit) bound what one invocation
  sends, over every worker (a shared ledger: a Ray actor on Ray, a counter in-process), the token
  budget with requests in flight too (each holds the most it may cost until its usage comes). When it
  is spent the run stops with `BudgetExhausted`; what was answered stays cached, so the next run
  continues where this one stopped (the ledger and its progress line: `pipeline.llm_budget`);
- **progress**: a line per stage every few seconds with requests sent, cache hits, requests/s,
  tokens and failures;
- **dry run**: ``llm.dry_run`` (``--llm-dry-run``) prints the first rendered requests of each
  stage and the projected number of calls, sends nothing, and stops the run (`LLMDryRun`);
- **accounting**: each task's marker keeps its usage (requests, cache hits, retries, failures per
  reason and the refusals among them, tokens); the manifest's ``llm`` section sums them per stage with
  the model name.

A stage is an object (`stages.llm.stage.LLMStage`: ``name``, ``schema``, ``wants``, ``process``,
``dry_requests``, ``apply``) registered under a name (`register_stage`); stages run in the order of
``llm.stages``, each over the trajectories with the earlier stages applied (`Augment`), and the
samples stage applies them all.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Sequence
from typing import Any

from pipeline.config import output_config
from pipeline.dedup_stage import removed_ids
from pipeline.engine import RunContext, Stage, run_tasks, spec_hash
from pipeline.leftovers import remove_stale_task_outputs
from pipeline.llm_budget import ENDPOINT_FAILURES_IN_A_ROW, LedgerOwner, Ticker, ledger_for
from pipeline.llm_clients import cache_root, make_client
from pipeline.llm_config import (  # noqa: F401  (re-exported: the stage API lives here for callers)
    LLM_DEFAULTS,
    LLM_EXECUTION_KEYS,
    get_stage,
    llm_enabled,
    output_llm_config,
    register_stage,
    resolve_llm,
)
from pipeline.occurrences import Occurrences, run_offsets
from pipeline.outputs import AtomicParquetWriter, out_fs
from pipeline.process_executor import in_this_process
from schemas.errors import ConfigError
from schemas.stats import merge_all
from stages.llm.answer_cache import REFUSED
from stages.llm.stage import (
    EARLIER_STAGE_UNANSWERED,
    Applied,
    BudgetExhausted,
    EndpointFailed,
    StageContext,
    UnsentClient,
)
from stages.sample_rows import key_parts, sample_key
from stages.templates import templates_digest


class LLMDryRun(Exception):  # the run stops after printing its plan; not an error
    """Raised after a dry run printed its plan; `report` holds it per stage."""

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__("llm dry run: nothing was sent")
        self.report = report


def read_kept(fs, root: str, task_id: str, drop: set[str], dups: dict[str, int] | None = None):
    """``(key, trajectory)`` for each trajectory of one part that the dedup stage kept (`drop`: removed keys;
    `dups`: the part's `pipeline.occurrences.duplicate_offsets`); the model and WMAT stages read parts so."""
    import pyarrow.parquet as pq

    from schemas.trajectory import Trajectory

    path = f"{root}/trajectories/part-{task_id}.parquet"
    pf = pq.ParquetFile(fs.open(path, "rb"))
    keys = Occurrences(dups)
    for batch in pf.iter_batches(batch_size=64):
        for d in batch.to_pylist():
            if (key := keys.key(d["traj_id"])) not in drop:
                yield key, Trajectory.from_dict(d)


def stage_output(root: str, stage: str, task_id: str) -> str:
    return f"{root}/llm/{stage}/part-{task_id}.parquet"


def output_schema(stage):
    """A stage's rows as written: its own columns and ``occurrence``, which of the run's trajectories carrying
    the row's ``traj_id`` it belongs to (1 unless several do: `pipeline.occurrences`; null for a row naming no
    trajectory of its batch)."""
    import pyarrow as pa

    if "occurrence" in stage.schema.names:
        raise ConfigError(f"llm stage {stage.name}: its schema has a column 'occurrence', which lwm adds to every "
                          "stage's rows (which trajectory of those sharing a traj_id a row belongs to); rename it")
    return stage.schema.append(pa.field("occurrence", pa.int32()))


def unique_id_batches(kept: Sequence[tuple[str, Any]], size: int) -> list[list[tuple[str, Any]]]:
    """`kept` ``(key, trajectory)`` pairs in batches of at most `size`, no two in one batch sharing a
    ``traj_id``: a stage names its rows (and its answers within a batch) by the trajectory's id."""
    batches: list[list[tuple[str, Any]]] = []
    ids: set[str] = set()
    for key, traj in kept:
        if not batches or len(batches[-1]) >= size or traj.traj_id in ids:
            batches.append([])
            ids = set()
        batches[-1].append((key, traj))
        ids.add(traj.traj_id)
    return batches


class Augment:
    """The outputs of the model-in-the-loop stages for one trajectories part, applied in stage order; each
    stage's rows are grouped by the key of the trajectory they belong to (`stages.sample_rows.sample_key`)."""

    def __init__(self, cfg: dict[str, Any], fs, root: str, task_id: str, stages: Sequence[str]) -> None:
        import pyarrow.parquet as pq

        self.cfg = cfg
        self.ctx = StageContext(cfg)
        self.stages = []
        for name in stages:
            stage = get_stage(name)
            path = stage_output(root, stage.name, task_id)
            rows: dict[str, list[dict[str, Any]]] = {}
            if fs.exists(path):
                for row in pq.read_table(fs.open(path, "rb")).to_pylist():
                    # rows written before the column existed name first occurrences
                    rows.setdefault(sample_key(row["traj_id"], row.get("occurrence") or 1), []).append(row)
            self.stages.append((stage, rows))
        self.reasoning_weight = float(cfg["llm"]["reasoning_weight"]) if cfg.get("llm") else 1.0

    def apply(self, traj, key: str | None = None) -> Applied:
        """Change `traj` (its key: `key`, default its id) as every stage says; returns the target turns to drop,
        with their reason, and the world model's reasoning for targets."""
        key = key or traj.traj_id
        applied = Applied()
        for stage, rows in self.stages:
            if key in rows:
                applied.add(stage.apply(traj, rows[key], self.ctx))
        return applied


def run_llm_task(task: dict[str, Any]) -> dict[str, Any]:
    """One stage over one trajectories part. `task`: task_id, stage, out, cfg, drop, ledger, earlier, spec_hash."""
    cfg, name = task["cfg"], task["stage"]
    fs, root = out_fs(task["out"])
    stage = get_stage(name)
    ledger = ledger_for(task["ledger"])
    llm = cfg["llm"]
    ctx = StageContext(cfg, make_client(llm, task["out"], ledger), make_client(llm, task["out"], ledger, judge=True))
    earlier = Augment(cfg, fs, root, task["task_id"], task["earlier"])
    kept, waiting = [], []  # waiting: an earlier stage got no answer for them, so their prompts would lack its output
    for key, traj in read_kept(fs, root, task["task_id"], set(task.get("drop") or ()), task.get("dups")):
        unanswered = earlier.apply(traj, key).unanswered
        if stage.wants(traj, ctx):
            (waiting if unanswered else kept).append((key, traj))
    # the waiting ones go through the stage too, with requests that are never sent: it drops what needed them
    unsent = StageContext(cfg, UnsentClient(), UnsentClient(), ctx.stats)
    rows: list[dict[str, Any]] = []
    for group, group_ctx in ((kept, ctx), (waiting, unsent)):
        for batch in unique_id_batches(group, max(1, int(llm["batch"]))):
            occurrence = {traj.traj_id: key_parts(key)[1] for key, traj in batch}
            rows.extend({**row, "occurrence": occurrence.get(row["traj_id"])}
                        for row in stage.process([traj for _, traj in batch], group_ctx))
    if waiting:
        ctx.stats.add(f"not_asked.{EARLIER_STAGE_UNANSWERED}", len(waiting))
    schema = output_schema(stage)
    with AtomicParquetWriter(fs, stage_output(root, stage.name, task["task_id"]), schema, rows_per_group=1024,
                             compression_level=3, digest=True) as w:
        import pyarrow as pa

        w.write_table(pa.Table.from_pylist(rows, schema=schema))
    usage = _merge_usage([ctx.client.usage.as_dict(), ctx.judge.usage.as_dict()])
    result = {"task_id": task["task_id"], "stage": f"llm_{stage.name}", "stats": ctx.stats.to_dict(), "usage": usage,
              "rows": len(rows), "bytes": 0, "spec_hash": task["spec_hash"],
              # what later stages and the samples depend on: these rows, which a run again may change
              "output": w.sha256()}
    # failed requests are not cached: the next run asks them again, and what was not asked for want of them. A refusal
    # is, but only for its endpoint: the task runs again too, answered from the cache with nothing sent to this
    # endpoint, so that another one is asked.
    if usage["failures"] or waiting:
        result["incomplete"] = True
    return result


def _merge_usage(usages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": 0, "attempts": 0, "retries": 0, "cache_hits": 0, "failures": 0,
                           "prompt_tokens": 0, "completion_tokens": 0, "errors": {}, "refused": {}}
    for u in usages:
        for k, v in u.items():
            if isinstance(v, dict):  # per reason: errors, refused
                for e, n in v.items():
                    out[k][e] = out[k].get(e, 0) + n
            else:
                out[k] = out.get(k, 0) + v
    out["requests"] = out["calls"] - out["cache_hits"]  # answers not found in the cache (sent, or failed)
    out["errors"], out["refused"] = dict(sorted(out["errors"].items())), dict(sorted(out["refused"].items()))
    return out


# ------------------------------------------------------------------------------------ driver


def run_llm_stages(cfg: dict[str, Any], fs, root: str, executor, ingest_results, manifest: dict[str, Any],
                   stage_runs: dict[str, Any], echo: Callable[[str], None], drop: set[str],
                   dups: dict[str, dict[str, int]] | None = None) -> dict[str, Any] | None:
    """Run every configured stage; returns what the sample tasks need (None when the stages are off). `drop`:
    the keys the dedup stage removed; `dups`: `pipeline.occurrences.duplicate_offsets` of the parts."""
    dups = dups or {}
    if not llm_enabled(cfg):
        return None

    llm = cfg["llm"]
    if llm["dry_run"]:
        raise LLMDryRun(dry_run(cfg, fs, root, ingest_results, drop, echo, dups))
    progress_mode = cfg["executor"]["progress"]
    # The tasks draw from one budget ledger: on Ray an actor, otherwise an object of this process, which forked
    # workers would each have a copy of; so they run here (they wait on the endpoint, not on a CPU).
    executor = in_this_process(executor)
    # what the prompts depend on: pools, templates, rendering, the stage settings, the model
    base = spec_hash(output_config({k: cfg[k] for k in LLM.sections if k != "llm"}), output_llm_config(llm),
                     *([t] if (t := templates_digest(cfg["templates"]["dirs"])) else []))
    section: dict[str, Any] = {"model": llm["model"], "judge_model": llm["judge_model"] or llm["model"], "stages": {}}
    prior: dict[str, str] = {r["task_id"]: r["spec_hash"] for r in ingest_results}
    done: list[str] = []
    owner = LedgerOwner(executor, llm)  # one budget for the whole invocation, every stage drawing from it
    removed = sorted(drop)
    warned_tokens = False
    try:
        for name in llm["stages"]:
            _remove_stale(fs, root, get_stage(name).name, set(prior))
            output_schema(get_stage(name))  # a schema lwm cannot add its column to is one line before any request
            tasks = [{"task_id": tid, "stage": name, "out": cfg["run"]["out"], "cfg": cfg, "drop": removed,
                      "ledger": owner.spec, "earlier": list(done), "dups": dups.get(tid, {}),
                      # a part with shared ids: its rows are told apart by occurrence, which rows written
                      # before that column existed were not (their tasks run again, answered from the cache)
                      "spec_hash": spec_hash(base, name, prior[tid], removed,
                                             *([dups[tid], "rows by occurrence"] if dups.get(tid) else []))}
                     for tid in sorted(prior)]
            stage_key = f"llm_{get_stage(name).name}"
            with Ticker(stage_key, owner.ledger, progress_mode):
                try:
                    results, stage_runs[stage_key] = run_tasks(executor, stage_key, run_llm_task, tasks, fs, root,
                                                                progress_mode)
                except Exception as exc:
                    snap = owner.ledger.snapshot()
                    if snap["endpoint_failures"] >= ENDPOINT_FAILURES_IN_A_ROW or isinstance(exc, EndpointFailed):
                        raise EndpointFailed(_endpoint_failed(llm, name, snap, cfg["run"]["out"])) from None
                    if snap["exhausted"] or isinstance(exc, BudgetExhausted):
                        raise BudgetExhausted(_budget_spent(llm, name, snap, cfg["run"]["out"])) from None
                    raise
            snap = owner.ledger.snapshot()
            if snap["endpoint_failures"] and not snap["answered"]:  # too few requests to stop on, none answered
                raise EndpointFailed(_endpoint_failed(llm, name, snap, cfg["run"]["out"]))
            if llm["max_tokens"] and snap["uncounted"] and not warned_tokens:
                warned_tokens = True
                echo(f"warning: the endpoint sent {snap['uncounted']} answer(s) without token counts (usage), so "
                     f"llm.max_tokens ({llm['max_tokens']}) cannot bound what they cost; llm.max_requests can")
            prior = {r["task_id"]: spec_hash(r["spec_hash"], r.get("output")) for r in results}
            stats = merge_all([r["stats"] for r in results])
            usage = _merge_usage([r["usage"] for r in results])
            section["stages"][get_stage(name).name] = {"usage": usage, "counts": stats.nested(),
                                                       "rows": sum(int(r["rows"]) for r in results)}
            failed = {e: n - usage["refused"].get(e, 0) for e, n in usage["errors"].items()}
            if any(failed.values()):
                echo(f"warning: llm stage {name}: {sum(failed.values())} request(s) got no answer ({_reasons(failed)}); "
                     "what needed them is dropped in this run, and the same command run again asks them again")
            if waiting := stats.nested().get("not_asked", {}).get(EARLIER_STAGE_UNANSWERED):
                echo(f"warning: llm stage {name}: {int(waiting)} trajectory(ies) not asked, as an earlier stage got no "
                     "answer for them (their prompts would lack its output); what needed them is dropped in this run, "
                     "and the same command run again asks them")
            if usage["refused"]:
                echo(f"warning: llm stage {name}: {sum(usage['refused'].values())} request(s) refused by the server "
                     f"as it will refuse them again ({_reasons(usage['refused'])}); recorded in "
                     f"{posixpath.join(cache_root(cfg['run']['out']), REFUSED)}, they are not asked again at this "
                     "endpoint (another endpoint, model or prompt is asked); what needed them is dropped")
            done.append(name)
    finally:
        owner.close()
    manifest["llm"] = section
    return {"stages": done, "specs": {tid: spec_hash(base, spec) for tid, spec in prior.items()}}


def _reasons(counts: dict[str, int]) -> str:
    """``reason count, …`` for the five commonest reasons of `counts`."""
    common = sorted(((e, n) for e, n in counts.items() if n), key=lambda en: -en[1])
    text = ", ".join(f"{e} {n}" for e, n in common[:5])
    return text + (f", and {len(common) - 5} other reason(s)" if len(common) > 5 else "")


def _budget_spent(llm: dict[str, Any], stage: str, snap: dict[str, Any], out: str) -> str:
    held = snap["refused_reservation"]
    why = (f"; {snap['not_sent']} request(s) not sent, as a request holds the most it may cost (its prompt and "
           f"max_tokens, up to {held} tokens) until its usage comes, and llm.max_tokens would not hold it"
           if held else f"; {snap['not_sent']} request(s) not sent" if snap["not_sent"] else "")
    if llm["max_tokens"] and held > llm["max_tokens"]:  # no run of this budget can send it
        why += (f"; a request of {held} tokens never fits: raise llm.max_tokens, or lower llm.max_completion_tokens "
                "or llm.judge_max_tokens")
    return (f"llm budget spent in stage {stage} after {snap['requests']} requests and "
            f"{snap['prompt_tokens'] + snap['completion_tokens']} tokens in this run (llm.max_requests "
            f"{llm['max_requests'] or 'unlimited'}, llm.max_tokens {llm['max_tokens'] or 'unlimited'}){why}; "
            f"answers so far are cached in {cache_root(out)}: run again to continue")


def _endpoint_failed(llm: dict[str, Any], stage: str, snap: dict[str, Any], out: str) -> str:
    key = f"the key in ${llm['api_key_env']}" if llm["api_key_env"] else "llm.api_key_env (no key is sent)"
    return (f"llm endpoint failed in stage {stage}: {snap['endpoint_failures']} request(s) in a row refused, "
            f"{snap['answered']} answered in this run; last: {snap['endpoint_error']}; check llm.endpoint "
            f"(--llm-endpoint), llm.model (--llm-model) and {key}; answers so far are cached in {cache_root(out)}")


def _remove_stale(fs, root: str, name: str, task_ids: set[str]) -> None:
    """Outputs and markers of parts that no longer exist (another input or task layout in this folder)."""
    remove_stale_task_outputs(fs, root, task_ids, (f"llm/{name}", f"_tasks/llm_{name}"))


def dry_run(cfg: dict[str, Any], fs, root: str, ingest_results, drop: set[str], echo,
            dups: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """Print the first rendered requests of each stage and the projected number of calls; send nothing."""
    llm = cfg["llm"]
    ctx = StageContext(cfg)
    report: dict[str, Any] = {}
    for name in llm["stages"]:
        stage = get_stage(name)
        shown: list[Any] = []
        low = high = items = 0
        for r in sorted(ingest_results, key=lambda r: r["task_id"]):
            for _, traj in read_kept(fs, root, r["task_id"], drop, (dups or {}).get(r["task_id"])):
                if not stage.wants(traj, ctx):
                    continue
                requests, (lo, hi) = stage.dry_requests(traj, ctx)
                items += 1
                low, high = low + lo, high + hi
                for req in requests:
                    if len(shown) < int(llm["dry_run_show"]):
                        shown.append({"messages": list(req.messages), "salt": req.salt, "params": req.params})
        report[stage.name] = {"items": items, "calls_min": low, "calls_max": high, "first_requests": shown}
        judge = f", judge {llm['judge_model'] or llm['model']}" if getattr(stage, "uses_judge", False) else ""
        echo(f"[llm dry run] stage {stage.name}: {items} item(s), projected {low:,}–{high:,} calls "
             f"(model {llm['model']}{judge})"
             + ("; prompts shown without what earlier stages would add" if name != llm["stages"][0] else ""))
        for k, req in enumerate(shown, 1):
            echo(f"--- request {k} of stage {name} (salt {req['salt']!r}, params {json.dumps(req['params'])})")
            for m in req["messages"]:
                echo(f"[{m['role']}]\n{m['content']}")
    echo("[llm dry run] nothing was sent")
    return report


class LLMStages(Stage):
    """The configured model-in-the-loop stages, in the order of ``llm.stages``: each is one task per
    trajectories part under its own marker folder (``llm_<name>``), run with a shared budget ledger and a
    progress line, so this stage drives them itself (`run_llm_stages`) instead of planning one task list."""

    name = "llm"
    sections = ("pools", "templates", "render", "llm")  # the prompts depend on pools, templates and rendering
    run_task = staticmethod(run_llm_task)

    def run(self, ctx: RunContext) -> None:
        if not llm_enabled(ctx.cfg):  # the removed ids are read on the driver only when model stages need them
            ctx.shared["llm"] = None
            return
        ctx.shared["llm"] = run_llm_stages(ctx.cfg, ctx.fs, ctx.root, ctx.executor, ctx.results["ingest"],
                                           ctx.manifest, ctx.stage_runs, ctx.echo, removed_ids(ctx),
                                           run_offsets(ctx))


LLM = LLMStages()
