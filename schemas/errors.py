"""Typed errors. Bad input becomes `InvalidRecord` (quarantined); bad setup is `ConfigError` (fatal)."""

from __future__ import annotations

import errno
import os


class InvalidRecord(Exception):
    """A native record that cannot become a trajectory.

    `reason` is a short stable code used for counting (``malformed_json``,
    ``missing_field``, ``line_too_long`` ...); `detail` is the human text, kept whole up to
    `DETAIL_KEEP_CHARS` so that secrets in it are redacted before it is cut to one line
    (`DETAIL_CHARS`, where it is recorded); `locator` says where the record is (``line 12``,
    ``byte 4096``, ``member states/a.json``).
    """

    DETAIL_CHARS = 500
    DETAIL_KEEP_CHARS = 64 * 1024

    def __init__(self, reason: str, detail: str = "", locator: str = "", uri: str = "") -> None:
        self.reason = reason
        self.detail = str(detail)[: self.DETAIL_KEEP_CHARS]
        self.locator = locator
        self.uri = uri
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = ":".join(p for p in (self.uri, self.locator) if p)
        detail = " ".join(self.detail.split())[: self.DETAIL_CHARS]
        text = f"{self.reason}: {detail}" if detail else self.reason
        return f"{where}: {text}" if where else text


class ConfigError(Exception):
    """A configuration or usage error: the run stops with this one line."""


class OptionError(ConfigError):
    """A value an adapter cannot use for one of its options (``--opt KEY=VALUE``): `key` and `problem`, the rule and
    the value (``must be 'quarantine' or 'skip', not 'keep'``), so that a run can name the key as its config does."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"option {key} {problem}")


class Notice(UserWarning):
    """Something the user should know that does not stop the command (a cache that cannot be written). The
    ``lwm`` process prints it as one ``warning:`` line (`pipeline.errors.one_line_notices`)."""


# The errno an OSError without one stands for, by its type: an fsspec backend's own (s3fs raises
# ``FileNotFoundError(path)``) carries the path alone, which on its own line says nothing of what failed.
_ERRNO = {FileNotFoundError: errno.ENOENT, PermissionError: errno.EACCES, FileExistsError: errno.EEXIST,
          IsADirectoryError: errno.EISDIR, NotADirectoryError: errno.ENOTDIR}


def os_error_text(exc: OSError) -> str:
    """An operating-system error as one line: what failed and on which path (``A → B`` for a rename)."""
    what = exc.strerror or str(exc) or type(exc).__name__
    if exc.strerror is None and exc.filename is None and type(exc) in _ERRNO:
        what = os.strerror(_ERRNO[type(exc)]) + (f": {exc}" if str(exc) else "")
    paths = [str(p) for p in (exc.filename, getattr(exc, "filename2", None)) if p is not None]
    return f"{what}: {' → '.join(paths)}" if paths else what
