"""One run at a time per local output folder (`pipeline.run.run_lock`), including the moment a run ends: its
lock file is removed while a second run has it open, and a third run starts."""

from __future__ import annotations

import fcntl

import fsspec
import pytest

from pipeline import run as run_module
from pipeline.run import run_lock
from schemas.errors import ConfigError


def test_a_run_that_opened_the_file_its_holder_removed_locks_the_new_one(tmp_path, monkeypatch):
    fs = fsspec.filesystem("file")
    root = str(tmp_path)
    first = run_lock(fs, root, "OUT")
    first.__enter__()
    real_flock = fcntl.flock
    calls = []

    def flock_after_the_first_run_ended(fd, op):
        # the second run opened `_lock` before the first one removed it; the first one ends now
        if not calls:
            first.__exit__(None, None, None)
        calls.append(fd)
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_the_first_run_ended)
    with run_lock(fs, root, "OUT"):  # the second run
        assert len(calls) == 2  # it saw the file it locked was gone, and locked the one at the path
        monkeypatch.setattr(fcntl, "flock", real_flock)
        with pytest.raises(ConfigError, match="OUT is in use by another lwm run"), run_lock(fs, root, "OUT"):
            pass  # a third run finds the folder in use
    assert not (tmp_path / "_lock").exists()
    with run_lock(fs, root, "OUT"):  # and once it ended, the folder is free
        pass


def test_no_lock_on_object_storage():
    fs = fsspec.filesystem("memory")
    with run_lock(fs, "/out", "memory://out"), run_lock(fs, "/out", "memory://out"):
        pass
    assert not run_module.is_local(fs)
