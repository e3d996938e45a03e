"""Text as Parquet can hold it."""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_surrogates(value: Any) -> Any:
    """`value` with each lone surrogate in its strings replaced by its ``\\udXXX`` escape.

    A lone surrogate (a non-UTF-8 file name, a JSON ``"\\ud800"``) cannot be encoded as UTF-8, so
    writers put its JSON escape in its place; dicts and lists are escaped item by item.
    """
    if isinstance(value, str):
        return value if value.isascii() else value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {k: escape_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_surrogates(v) for v in value]
    return value


def one_line(text: str) -> str:
    """`text` with its control characters (line breaks, terminal escapes) written as escapes, ``\\n``, ``\\x1b``:
    a file name holding a newline must not start a second line of a one-line message, nor pose as one."""
    return _CONTROL.sub(_escaped, text)


def _escaped(m: re.Match) -> str:
    return m.group().encode("unicode_escape").decode("ascii")


def on_terminal(text: str) -> str:
    """`text` for a terminal: line breaks and tabs as they are, every other control character (a terminal escape,
    a carriage return that would overwrite the line) written as its escape, ``\\x1b``, ``\\r``."""
    return _CONTROL_BUT_LINES.sub(_escaped, text)
