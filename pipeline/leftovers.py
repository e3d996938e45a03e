"""What an earlier run left under an output location, found and removed before a run writes there: the
``*.tmp-*`` leftovers of a crashed or retried attempt, and the files of ingest tasks the run no longer has."""

from __future__ import annotations

import posixpath
import re

import fsspec

# The names lwm gives what it writes: a temporary (`pipeline.outputs._tmp_name`: ``<name>.tmp-<pid>-<8 hex>``),
# and a file named after an ingest task (``part-<16 hex>.parquet``, ``<16 hex>.json``, ``<16 hex>.pieces.arrow``).
# Only such names are ever removed: a file of the user's that lies in the output folder is never touched.
TEMPORARY = re.compile(r"\.tmp-\d+-[0-9a-f]{8}$")
TASK_FILE = re.compile(r"^(?:part-)?[0-9a-f]{16}(?:\.[A-Za-z0-9_]+)+$")


def remove_stale_temps(fs: fsspec.AbstractFileSystem, root: str) -> int:
    """Delete the temporaries (``*.tmp-<pid>-<hex>``) a crashed run left under `root`; returns how many."""
    if not fs.exists(root):
        return 0
    stale = [p for p in fs.find(root) if TEMPORARY.search(posixpath.basename(p))]
    for p in stale:
        fs.rm(p)
    return len(stale)


# Files named after an ingest task id (``part-<id>.parquet``, ``<id>.json``, ``<id>.parquet``), per folder.
_TASK_NAMED = ("raw", "trajectories", "quarantine", "_tasks/scan", "_tasks/ingest", "_tasks/samples", "_work/samples")


def task_id_of(path: str) -> str:
    """The task a task-named file belongs to: ``part-<id>.parquet``, ``<id>.json``, ``<id>.arrow`` (and their
    ``.tmp-`` temporaries) → ``<id>``."""
    return posixpath.basename(path).split(".", 1)[0].removeprefix("part-")


def remove_stale_task_outputs(fs: fsspec.AbstractFileSystem, root: str, task_ids: set[str],
                              folders: tuple[str, ...] = _TASK_NAMED) -> int:
    """Delete what ingest tasks outside `task_ids` wrote in `folders` (an earlier run over other inputs or with
    another split/group layout), so no layer, marker or shard bucket mixes in their rows."""
    stale = []
    for folder in folders:
        base = posixpath.join(root, folder)
        if not fs.exists(base):
            continue
        for p in fs.find(base):
            name = posixpath.basename(p)
            if ".tmp-" in name or not TASK_FILE.match(name):
                continue  # a temporary (`remove_stale_temps`), or not a name lwm writes
            if task_id_of(p) not in task_ids:
                stale.append(p)
    for p in stale:
        fs.rm(p)
    return len(stale)
