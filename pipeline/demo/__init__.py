"""The bundled demo corpus: seeded, simulated sandbox logs for each of the seven domains.

``make data DOMAIN=…`` runs on it when no input is given, so a fresh clone works offline.
`generate` returns trajectory dicts in the lwm-jsonl layout (`Trajectory.to_dict()`);
`write_demo` writes them to ``<out_dir>/<domain>.jsonl``. Both are pure functions of
(domain, seed, n): the same arguments give the same bytes. Each domain lives in its own module
and is imported only when asked for (``os`` is `pipeline.demo.desktop`; ``android`` writes its
own native logs when ``native=True``; for the other domains lwm-jsonl is the native format).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from pipeline.demo.common import write_jsonl_atomic
from schemas.errors import ConfigError
from schemas.trajectory import DOMAINS

DEFAULT_N = 240
# Domains whose demo has a native log format of its own (android: uiautomator XML); for the others it is lwm-jsonl.
NATIVE_DOMAINS = ("android",)

# domain → (module, generator function); android is handled by its own writer.
_GENERATORS = {
    "mcp": ("pipeline.demo.mcp", "generate_mcp"),
    "search": ("pipeline.demo.search", "generate_search"),
    "terminal": ("pipeline.demo.terminal", "generate_terminal"),
    "swe": ("pipeline.demo.swe", "generate_swe"),
    "web": ("pipeline.demo.web", "generate_web"),
    "os": ("pipeline.demo.desktop", "generate_desktop"),
}


def _checked(domain: str, seed: int, n: int | None) -> int:
    if domain not in DOMAINS:
        raise ConfigError(f"unknown demo domain {domain!r}: choose one of {', '.join(DOMAINS)}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"demo seed must be an integer, got {seed!r}")
    if n is None:
        return DEFAULT_N
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"demo size n must be a positive integer, got {n!r}")
    return n


def generate(domain: str, seed: int = 0, n: int | None = None) -> list[dict[str, Any]]:
    """`n` (default 240) demo trajectories of `domain` as lwm-jsonl dicts; raises `ConfigError`."""
    n = _checked(domain, seed, n)
    if domain == "android":
        from pipeline.demo.android import generate_android

        return generate_android(seed, n)
    module, function = _GENERATORS[domain]
    return getattr(importlib.import_module(module), function)(seed, n)


def write_demo(domain: str, out_dir: str, seed: int = 0, n: int | None = None, native: bool = False) -> list[str]:
    """Write the demo corpus of `domain` under `out_dir`; return the paths written.

    The file is ``<out_dir>/<domain>.jsonl``: one trajectory per line, UTF-8, sorted keys,
    written to a temporary name and renamed. ``native=True`` asks for the sandbox's own log
    format, which is lwm-jsonl itself for every domain except android.
    """
    n = _checked(domain, seed, n)
    if domain in NATIVE_DOMAINS:
        from pipeline.demo.android import write_android_demo

        return write_android_demo(out_dir, seed, n, native)
    path = os.path.join(out_dir, f"{domain}.jsonl")
    write_jsonl_atomic(path, generate(domain, seed, n))
    return [path]


__all__ = ["DEFAULT_N", "NATIVE_DOMAINS", "generate", "write_demo"]
