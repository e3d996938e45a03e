"""One process at a time in a folder: an exclusive lock on a file in it, shared by `lwm run` (``OUT/_lock``) and
`lwm train` (its checkpoint folder's ``_lock``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from schemas.errors import ConfigError


@contextlib.contextmanager
def folder_lock(path: str, busy: str) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (created empty) while the block runs; released by the system
    when the process ends, however it ends. A second holder is refused at once with the one line `busy`. The
    file is removed as the block ends, so a finished folder holds only its outputs (a killed process leaves it,
    unlocked, for the next)."""
    import fcntl

    while True:
        try:
            handle = open(path, "a")  # noqa: SIM115 (held for the block's whole length)
        except IsADirectoryError:
            raise ConfigError(f"{path} is a directory; remove it or choose another --out") from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ConfigError(busy) from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        handle.close()  # the holder before removed the file meanwhile: lock the one at the path now
    with handle:
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)  # still locked: whoever opened this file meanwhile sees it gone and retries
