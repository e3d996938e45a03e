"""What several commands share: the ``--json`` flag and reading a JSONL input file line by line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import click

from schemas.errors import ConfigError

json_option = click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")


def jsonl_values(path: str, what: str = "JSON") -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line of the JSONL file `path` (local path or fsspec
    URL); a line that does not parse is a `ConfigError` naming the file and line, ``not <what>``."""
    import fsspec

    with fsspec.open(path, "r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{lineno}: not {what} ({exc.msg})") from None
            yield lineno, value
