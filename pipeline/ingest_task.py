"""The ingest task: one input unit → ``raw/``, ``trajectories/`` and ``quarantine/`` parts.

A task may also carry a group of small units or one byte range of a large file (stages/ingest/ranges.py).
Each output file is named after the task id (a hash of the unit's URI, of the group's URIs, or of
URI + range), written under a temporary name and renamed; the engine writes the task's marker
``_tasks/ingest/<id>.json`` after the task returns, so a task with a marker is finished and a re-run skips it.

Test hook, off by default: ``LWM_TEST_TASK_DELAY=<seconds>`` makes every ingest task pause that
long after opening its outputs, so tests can kill a worker or the driver in the middle of a task.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from pipeline.object_stores import store_refused
from pipeline.outputs import AtomicParquetWriter, out_fs
from schemas.layers import QUARANTINE_SCHEMA, RAW_SCHEMA
from schemas.stats import Stats
from schemas.trajectory import TRAJECTORY_SCHEMA
from stages.ingest.ranges import RangeAdapter, task_id_for
from stages.ingest.reading import InputUnit, filesystem, is_local
from stages.ingest.registry import get_adapter, resolve_opts
from stages.normalize import normalize_unit, quarantine_row, unrecognized_unit
from stages.steps import apply_steps, build_steps
from stages.uri_credentials import recorded_uri

__all__ = ["describe_input", "run_ingest_task", "task_id_for"]


def describe_input(unit: InputUnit) -> dict[str, Any]:
    """URI, size and sha256 of an input file (or of a directory's files, in name order). A file that cannot be read
    counts its listed size (`input_size`, as ``bytes.unread`` does), so that the share of bytes unread is measured
    against a total that holds them."""
    fs, path = filesystem(unit.uri)
    digest = hashlib.sha256()
    files = sorted(fs.find(path)) if unit.is_dir else [path]
    size = 0
    unreadable = 0
    for p in files:
        try:
            with fs.open(p, "rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
                    size += len(chunk)
        except OSError as exc:  # a link to nothing, no permission: quarantined as `unreadable_file` by its reader
            if isinstance(exc, PermissionError) and not is_local(fs):  # the store refused: one line, naming the input
                raise store_refused(fs.unstrip_protocol(p), exc) from exc
            if not is_local(fs):
                raise
            unreadable += 1
            size += _listed_size(fs, p)
    out = {"uri": recorded_uri(unit.uri), "size": size, "sha256": digest.hexdigest(), "files": len(files)}
    return {**out, "unreadable": unreadable} if unreadable else out


def _listed_size(fs, path: str) -> int:
    try:
        return int(fs.size(path) or 0)
    except OSError:  # a link to nothing: no size, as `input_size` says
        return 0


def _text_chars(traj) -> int:
    s = traj.system
    n = len(s.task_description) + len(s.action_space) + len(s.initial_state or "")
    n += sum(len(d.action) + len(d.observation) for d in s.demonstrations)
    return n + sum(len(t.action) + len(t.observation) + len(t.reasoning or "") for t in traj.turns)


def _ingest_unit(unit: InputUnit, task: dict[str, Any], stats: Stats, writers, transforms) -> None:
    q_writer, r_writer, t_writer = writers
    fmt = task["format"]
    if not fmt:
        err = unrecognized_unit(unit, stats)
        if err is not None:
            q_writer.write_row(quarantine_row(err, unit.uri, "", stage="read"))
        return
    adapter = get_adapter(fmt)
    opts = resolve_opts(adapter, task["opts"])
    if task.get("range"):
        adapter = RangeAdapter(adapter, task["range"])
    for item in normalize_unit(unit, adapter, opts, stats):
        if item.raw is not None:
            r_writer.write_row({"uri": recorded_uri(item.raw.uri), "locator": item.raw.locator, "format": fmt, "payload": item.raw.payload})
        if item.quarantine is not None:
            q_writer.write_row(item.quarantine)
        for traj in item.trajectories:
            kept = apply_steps(traj, transforms, stats)
            if kept is not None:
                kept.source.uri = recorded_uri(kept.source.uri)
                stats.add("trajectories.kept")
                stats.add("turns.kept", len(kept.turns))
                stats.add(f"domains.{kept.domain}")
                stats.add("chars.kept", _text_chars(kept))
                t_writer.write_row(kept.to_dict())


def _pause_for_tests() -> None:
    delay = os.environ.get("LWM_TEST_TASK_DELAY")
    if delay:
        time.sleep(float(delay))


def run_ingest_task(task: dict[str, Any]) -> dict[str, Any]:
    """Ingest one unit, a group (`members`) or a byte range (`range`) of one file.

    `task`: task_id, uri, is_dir, format, opts, out, cfg, spec_hash; optional members, range.
    """
    fs, root = out_fs(task["out"])
    tid = task["task_id"]
    units = [InputUnit(m["uri"], m["is_dir"]) for m in task.get("members") or [task]]
    stats = Stats()
    writers = (
        AtomicParquetWriter(fs, f"{root}/quarantine/part-{tid}.parquet", QUARANTINE_SCHEMA),
        AtomicParquetWriter(fs, f"{root}/raw/part-{tid}.parquet", RAW_SCHEMA),
        AtomicParquetWriter(fs, f"{root}/trajectories/part-{tid}.parquet", TRAJECTORY_SCHEMA, rows_per_group=256),
    )
    members = []
    transforms = build_steps(task["cfg"])  # once per task: a group's members share the steps and their memos
    try:
        _pause_for_tests()
        for unit in units:
            unit_stats = Stats()
            _ingest_unit(unit, task, unit_stats, writers, transforms)
            stats.merge(unit_stats)
            members.append({"uri": recorded_uri(unit.uri), "stats": unit_stats.to_dict()})
        for w in writers:
            w.close()
    except BaseException:
        for w in writers:
            w.abort()
        raise
    if len(units) > 1:
        for unit, member in zip(units, members):
            member["input"] = describe_input(unit)
    # a range is described by its own bytes, hashed by the scan pass
    described = task["range"]["input"] if task.get("range") else members[0].get("input") or describe_input(units[0])
    result = {
        "task_id": tid,
        "stage": "ingest",
        "uri": recorded_uri(units[0].uri),
        "format": task["format"],
        "input": described,
        "stats": stats.to_dict(),
        "rows": int(stats.get("records.read")),
        "bytes": sum(m["input"]["size"] for m in members) if len(units) > 1 else described["size"],
        "spec_hash": task["spec_hash"],
        "outputs": _written(fs, root, tid),
    }
    if len(units) > 1:
        result["members"] = members
    return result


def _written(fs, root: str, tid: str) -> dict[str, int]:
    """The layer parts this task wrote, with their sizes (`pipeline.engine.outputs_intact` checks them)."""
    out = {}
    for layer in ("raw", "trajectories", "quarantine"):
        rel = f"{layer}/part-{tid}.parquet"
        try:
            out[rel] = int(fs.size(f"{root}/{rel}"))
        except FileNotFoundError:  # a layer this task had nothing for
            continue
    return out
