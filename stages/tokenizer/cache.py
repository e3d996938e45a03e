"""The on-disk cache shared by the tokenizer code: where it lives and how an entry is written.

Entries are keyed by a digest of what they are derived from, so an entry is never stale; one that
does not read back is rebuilt, and a cache that cannot be written only costs the work next time.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/lwmkit`` (or ``~/.cache/lwmkit``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lwmkit"


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` through a temporary file in the same directory and a rename, so a
    reader never sees a partial file (concurrent writers both produce the same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if isinstance(data, str):
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(data)
        else:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
