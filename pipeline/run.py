"""The plan of a run: inputs → ingest tasks → (samples → shards) → manifest → ``_SUCCESS``.

Every stage is a list of tasks with deterministic ids handed to an executor (`pipeline.engine`).
A task whose marker exists with the same spec hash is skipped, so re-running the same command
resumes. `PLAN` lists the stages in the order they run; adding a stage is one module with its
`Stage` object and one entry in that list.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import sys
from collections.abc import Callable
from typing import Any

from pipeline.arrow_env import skip_pandas_probe
from pipeline.dedup_stage import DEDUP_CLUSTERS, DEDUP_DECONTAM, DEDUP_MAP, DEDUP_REDUCE
from pipeline.engine import Executor, RunContext, Stage
from pipeline.errors import StreamWriteError, signals_held
from pipeline.executors import make_executor
from pipeline.ingest_stage import INGEST, SCAN
from pipeline.input_listing import check_output_outside_inputs
from pipeline.leftovers import remove_stale_temps
from pipeline.llm_stage import LLM
from pipeline.object_stores import check_bucket
from pipeline.outputs import ensure_dir, out_fs, write_bytes_atomic, write_json_atomic
from pipeline.preflight import preflight
from pipeline.samples_stage import SAMPLES, SHARDS
from pipeline.wmat_pools import WMAT_POOLS_STAGE
from schemas.errors import ConfigError
from schemas.locks import folder_lock
from stages.ingest.reading import is_local
from stages.store_answer import check_inputs_answer
from stages.tokenizer.engines import load_tokenizer, resolve_spec
from stages.tokenizer.vocab import DEFAULT_NAME

Echo = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_pipeline(cfg: dict[str, Any], echo: Echo = _stderr, executor: Executor | None = None,
                 checked: bool = False) -> dict[str, Any]:
    """Run the whole plan for a resolved config; returns the manifest. `checked`: the caller has already run
    `preflight` on `cfg` (``lwm run`` does, to name a config file's errors as the file's), so it is not run twice:
    it reads a custom tokenizer.json and lists the decontamination references."""
    skip_pandas_probe()
    if not cfg["run"]["out"]:
        raise ConfigError("no output given (--out DIR, or run.out in the config)")
    if not checked:
        preflight(cfg)
    if cfg["run"]["from_layer"] != "trajectories":
        check_inputs_answer(cfg["run"]["input"])
    if cfg["run"]["input"] and cfg["run"]["from_layer"] != "trajectories":
        check_output_outside_inputs(cfg)  # before the output folder is touched
    _check_tokenizer(cfg)
    fs, root = out_fs(cfg["run"]["out"])
    check_bucket(fs, root, cfg["run"]["out"])
    made = _missing_folders(fs, root)
    ensure_dir(fs, root)
    try:
        with run_lock(fs, root, cfg["run"]["out"]):
            return _locked_run(cfg, fs, root, echo, executor)
    except BaseException:
        _remove_if_empty(made)  # a run refused before it wrote anything leaves no output folder behind
        raise


def _missing_folders(fs, root: str) -> list[str]:
    """The local folder `root` and those of its parents that do not exist yet, deepest first."""
    if not is_local(fs):
        return []
    missing = []
    while not os.path.exists(root) and os.path.dirname(root) != root:
        missing.append(root)
        root = os.path.dirname(root)
    return missing


def _remove_if_empty(folders: list[str]) -> None:
    """Remove each of `folders` (deepest first) while it is empty: a folder anything was written into stays, and
    so do its parents."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            return


@contextlib.contextmanager
def run_lock(fs, root: str, out: str):
    """One run at a time in a local output folder (`schemas.locks.folder_lock` on ``OUT/_lock``): a second run
    into the folder is one line at once, instead of each removing the other's partial files. (An output folder
    on object storage has no such lock: one run per folder is then the user's to keep.)"""
    if not is_local(fs):
        yield
        return
    busy = f"{out} is in use by another lwm run; wait for it to end or choose another --out"
    with folder_lock(posixpath.join(root, "_lock"), busy):
        yield


def _locked_run(cfg: dict[str, Any], fs, root: str, echo: Echo, executor: Executor | None) -> dict[str, Any]:
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
        if exc.errno != errno.ENOSPC or isinstance(exc, StreamWriteError):
            raise
        raise ConfigError(
            f"no space left on device writing {cfg['run']['out']}; free space and run the same command again "
            "(finished tasks are kept)"
        ) from None
    finally:
        if own_executor:
            with signals_held():  # a second Ctrl-C must not leave the workers, or a local Ray, running
                executor.close()


def _check_tokenizer(cfg: dict[str, Any]) -> None:
    """A tokenizer the run cannot use fails now, not after ingest and dedup. A given file is loaded (the driver
    loads it for the manifest anyway, and forked workers then have it); the built-in one is loaded where it is
    first used, off the start's path."""
    spec, engine = resolve_spec(cfg["tokenizer"]["spec"], cfg["tokenizer"]["engine"] or None)
    if spec != DEFAULT_NAME:
        load_tokenizer(spec, engine)


# The plan of every run, top to bottom: each stage plans its tasks, the engine runs them (pipeline.engine).
PLAN: list[Stage] = [SCAN, INGEST, DEDUP_MAP, DEDUP_REDUCE, DEDUP_DECONTAM, DEDUP_CLUSTERS, LLM, SAMPLES, SHARDS, WMAT_POOLS_STAGE]


def _say_what_was_resumed(stage_runs: dict[str, Any], echo: Echo) -> None:
    """The summary counts what the outputs hold, finished tasks of earlier runs included (their model requests
    too): one line says when some or all of those figures were not made by this run."""
    total = sum(int(r.get("tasks", 0)) for r in stage_runs.values())
    earlier = sum(int(r.get("skipped", 0)) for r in stage_runs.values())
    if not earlier:
        return
    if earlier == total:
        echo(f"nothing to do: all {total} tasks were finished by an earlier run into this folder; "
             "the figures below are that run's")
    else:
        echo(f"resumed: {earlier} of {total} tasks were finished by an earlier run into this folder; "
             "the figures below count their work too")


def _run(cfg: dict[str, Any], fs, root: str, executor: Executor, echo: Echo) -> dict[str, Any]:
    ctx = RunContext(cfg, fs, root, executor, echo)
    for stage in PLAN:
        stage.run(ctx)
    _say_what_was_resumed(ctx.stage_runs, echo)
    check_shards_visible(fs, root, cfg["run"]["out"], ctx.manifest)
    write_json_atomic(fs, posixpath.join(root, "manifest.json"), ctx.manifest)
    write_json_atomic(fs, posixpath.join(root, "_timings.json"), ctx.stage_runs)
    write_bytes_atomic(fs, posixpath.join(root, "_SUCCESS"), b"")
    return ctx.manifest


def check_shards_visible(fs, root: str, out: str, manifest: dict[str, Any]) -> None:
    """Each shard file the manifest lists is in the output as this process sees it, with the bytes its task
    recorded: before ``_SUCCESS`` says the run is whole. Workers on other machines of a Ray cluster write to `out`
    as they see it; a local folder that is not shared leaves the shards on their disks, not here."""
    listed = list(manifest.get("shards") or []) + list((manifest.get("wmat") or {}).get("shards") or [])
    wrong = []
    for entry in listed:
        path = posixpath.join(root, entry["path"])
        try:
            size = fs.size(path)
        except FileNotFoundError:
            size = None
        if size != entry.get("bytes", size):
            wrong.append(entry["path"])
    if wrong:
        raise ConfigError(
            f"{len(wrong)} of the {len(listed)} shard files the workers wrote are not in {out} as this machine sees "
            f"it (e.g. {wrong[0]}): with workers on other machines, give --out on storage every node reads "
            "(s3://…, a shared mount); no _SUCCESS was written"
        )
