"""A resolved config as TOML that ``--config`` reads back (``lwm run --dry-run``).

The config holds tables, strings, numbers, booleans, lists and None; TOML has no None, so a key whose value is
None is left out (its default is None: reading the text back resolves to the same config). Tables become
``[section.sub]`` headers; a table inside a list (the masking table's categories) is written inline.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _string(text: str) -> str:
    """A TOML basic string. JSON's escapes are TOML's, but JSON writes a character beyond U+FFFF as two
    surrogate escapes, which TOML rejects: such characters are written as they are (the file is UTF-8), and
    DEL, a control character JSON leaves alone, is escaped as TOML requires."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007F")


def _key(key: str) -> str:
    return key if _BARE.fullmatch(key) else _string(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None) + "}"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _table(path: tuple[str, ...], table: dict[str, Any], out: list[str]) -> None:
    scalars = [(k, v) for k, v in table.items() if v is not None and not isinstance(v, dict)]
    tables = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    if path and (scalars or not tables):
        out.append(f"[{'.'.join(_key(p) for p in path)}]")
    out.extend(f"{_key(k)} = {_value(v)}" for k, v in scalars)
    if path and (scalars or not tables):
        out.append("")
    for k, v in tables:
        _table((*path, k), v, out)


def dumps(config: dict[str, Any]) -> str:
    """`config` as TOML text (tables in key order)."""
    out: list[str] = []
    _table((), config, out)
    return "\n".join(out).rstrip("\n") + "\n"
