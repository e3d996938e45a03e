"""What several commands share: the ``--json`` flag, reading a JSONL input file line by line, and telling ``lwm``
that a command finished cleanly."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import click

from schemas.errors import ConfigError

json_option = click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")

_finished_cleanly = False  # set by `done_cleanly`


def done_cleanly() -> None:
    """Tell ``lwm`` (`pipeline.cli.entry`) that the command has finished and left nothing to the interpreter's
    shutdown: every file it wrote is closed, its worker processes and any Ray instance it started are stopped,
    and what it prints is printed."""
    global _finished_cleanly
    _finished_cleanly = True


def finished_cleanly() -> bool:
    """Whether the command called `done_cleanly`."""
    return _finished_cleanly


def jsonl_values(path: str, what: str = "JSON") -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line of the JSONL file `path` (local path or fsspec
    URL), a UTF-8 byte order mark skipped; a line that is not UTF-8, or does not parse (nested deeper or with an
    integer of more digits than Python reads included), is a `ConfigError` naming the file and line,
    ``not <what>``."""
    import fsspec

    # surrogateescape: a byte that is not UTF-8 becomes a lone surrogate, so the line that holds it can be named
    with fsspec.open(path, "r", encoding="utf-8-sig", errors="surrogateescape") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as exc:
                byte = ord(line[exc.start]) - 0xDC00
                raise ConfigError(f"{path}:{lineno}: not UTF-8 (byte 0x{byte:02x} at character {exc.start + 1})") from None
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{lineno}: not {what} ({exc.msg})") from None
            except RecursionError:
                raise ConfigError(f"{path}:{lineno}: not {what} (nested too deeply)") from None
            except ValueError:  # the only other one json raises: an integer beyond `sys.get_int_max_str_digits`
                raise ConfigError(f"{path}:{lineno}: not {what} (an integer of more than "
                                  f"{sys.get_int_max_str_digits()} digits)") from None
            yield lineno, value
