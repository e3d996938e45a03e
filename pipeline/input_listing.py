"""The one listing of a run's input: what ``lwm run`` reads and what ``lwm validate`` checks are the same files.

`input_units` expands the input specs (files, folders, globs, URLs) into units and leaves out what lwm output
folders among them hold of lwm's own: the run's own output folder, and any other finished or stopped run found
in an input folder. `check_output_outside_inputs` refuses an output folder that is, or holds, an input folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any

from pipeline.object_stores import refused_request, store_refused
from schemas.errors import ConfigError
from stages.ingest.reading import InputUnit, expand_inputs, filesystem, inside, is_local
from stages.ingest.registry import claims_dir
from stages.uri_credentials import strip_uri_credentials

Echo = Callable[[str], None]

# What `lwm run` writes at the top of its output folder (README: Output layout): its folders, in which it writes
# files of these suffixes (and their ``.tmp-`` temporaries), and its own files.
OUTPUT_FOLDERS = frozenset({"raw", "trajectories", "quarantine", "shards", "wmat", "dedup", "llm", "_llm", "_tasks",
                            "_work"})
OUTPUT_SUFFIXES = (".parquet", ".json", ".arrow", ".bin")
OUTPUT_FILES = frozenset({"manifest.json", "_timings.json", "_SUCCESS", "_lock"})


def input_units(specs: list[str], fmt: str | None, out: str | None, echo: Echo,
                label: str = "run.input (--input)") -> tuple[list[InputUnit], int]:
    """The input units of `specs` as a run reads them, and how many files were left out (`fmt`: the format given, which decides the folders an adapter
    takes whole), less lwm's own files: those of the output folder `out` (None: `lwm validate`, which writes none)
    and those of other runs' output folders among the inputs, each left-out group named in one `echo` line. No
    unit at all, or an input that cannot be listed, is a `ConfigError` (naming the setting `label`)."""
    found = _expand_inputs(specs, fmt, label)
    units = _without_output(found, specs, out, echo)
    if not units:
        raise ConfigError(f"no input files found in {', '.join(specs)}")
    return units, len(found) - len(units)


def _without_output(units: list[InputUnit], specs: list[str], out: str | None, echo: Echo) -> list[InputUnit]:
    """The input units, less what lwm output folders hold of lwm's own (layers, shards, markers, manifest) where an
    input folder or glob reaches into them: this run's output folder (a rerun would otherwise read its own outputs
    as input), and the output folder of another run found among the inputs (``logs/`` holding ``logs/out-v1``:
    its trajectories and shards would come back as copies of the logs they were made from). Other files that
    happen to lie there are inputs like any, and a file named as an input is one. Local paths and object-store
    URLs alike (`check_output_outside_inputs` has refused an output folder that is an input folder or holds one)."""
    mine_root = _place(out, folder=False)[:2] if out else None
    named = {_place(spec, folder=False)[:2] for spec in specs if not any(c in spec for c in "*?[")}
    places = [_place(u.uri, folder=False)[:2] for u in units]
    others = _other_run_folders(places) - {mine_root}

    def written_by_lwm(place: tuple[str, str], root: tuple[str, str] | None) -> bool:
        if root is None:
            return False
        protocol, path = place
        if protocol != root[0] or path == root[1] or not inside(path, root[1]) or place in named:
            return False  # a file named as an input is one, wherever it lies
        parts = path[len(root[1]):].lstrip("/").split("/")
        name = parts[-1].split(".tmp-", 1)[0]
        if len(parts) == 1:
            return name in OUTPUT_FILES
        return parts[0] in OUTPUT_FOLDERS and (name.endswith(OUTPUT_SUFFIXES) or parts[0] in ("_tasks", "_work", "_llm"))

    own = [written_by_lwm(place, mine_root) for place in places]
    other = [not mine and any(written_by_lwm(place, root) for root in others) for place, mine in zip(places, own)]
    kept = [u for u, mine, theirs in zip(units, own, other) if not (mine or theirs)]
    if any(own):
        echo(f"input: left out {sum(own)} file(s) that this run's output folder {out} holds")
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


def _expand_inputs(specs: list[str], fmt: str | None, label: str) -> list[InputUnit]:
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
        # the store's word where a store refused (a local folder without permission is no store's refusal)
        if isinstance(exc, PermissionError) and not is_local(filesystem(failing)[0]) and refused_request(exc):
            raise ConfigError(f"{label}: {store_refused(failing, exc).strerror}") from None
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise ConfigError(f"{label}: cannot read {strip_uri_credentials(failing)}: {reason}") from None
