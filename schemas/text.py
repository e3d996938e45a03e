"""Text as Parquet can hold it."""

from __future__ import annotations

from typing import Any


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
