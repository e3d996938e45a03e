"""The clients of the model-in-the-loop stages: where their requests go, with which key, and where answers are kept.

The generator and the judge each get a `stages.llm.stage.StageClient` built from the resolved ``[llm]``
section, caching in the run output (``<out>/_llm/cache/``) and drawing on the invocation's budget ledger
(`pipeline.llm_budget`). A key is read from the environment variable the section names, never from the config.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any
from urllib.parse import urlsplit

from stages.llm.stage import StageClient


def cache_root(out: str) -> str:
    return posixpath.join(out.rstrip("/"), "_llm", "cache")


def api_key_env(llm: dict[str, Any], judge: bool = False) -> str:
    """The environment variable holding the key for the generator's or the judge's requests ("" = no key). The judge
    gets the generator's key only on the generator's server (scheme, host and port), unless
    ``llm.judge_api_key_env`` names its own: a key is never sent to a server it was not given for."""
    if not judge or not llm["judge_endpoint"]:
        return llm["api_key_env"]
    if llm["judge_api_key_env"]:
        return llm["judge_api_key_env"]
    return llm["api_key_env"] if _origin(llm["judge_endpoint"]) == _origin(llm["endpoint"]) else ""


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(
        parts.scheme.lower())


def make_client(llm: dict[str, Any], out: str, ledger=None, judge: bool = False) -> StageClient:
    endpoint = (llm["judge_endpoint"] if judge else "") or llm["endpoint"]
    model = (llm["judge_model"] if judge else "") or llm["model"]
    key_env = api_key_env(llm, judge)
    return StageClient(
        endpoint, model, (os.environ.get(key_env) if key_env else None) or None,
        timeout_s=float(llm["timeout_s"]), max_retries=int(llm["max_retries"]),
        backoff_s=float(llm["backoff_s"]), max_backoff_s=float(llm["max_backoff_s"]),
        max_concurrency=int(llm["concurrency"]), cache_dir=cache_root(out), ledger=ledger,
        completion_tokens=int(llm["max_completion_tokens"]),
        # the judge grades, it does not sample; its answers are bounded like the generator's
        default_params={"temperature": 0.0, "max_tokens": int(llm["judge_max_tokens"])} if judge else None,
    )
