"""Whether an object store answers at all, asked before a command lists, reads or writes there: a frozen endpoint
(a hung store or proxy) is one line within ``LWM_STORE_WAIT_S`` seconds, not botocore's and s3fs's retries of
60-second waits that hold a command for many minutes with nothing printed. Used by ``lwm run`` (inputs, output),
the commands that read a finished run, and ``lwm train`` (its shards)."""

from __future__ import annotations

import math
import os

import fsspec

from schemas.errors import ConfigError
from stages.ingest.reading import filesystem, protocols
from stages.uri_credentials import strip_uri_credentials

WAIT_ENV = "LWM_STORE_WAIT_S"
DEFAULT_WAIT_S = 20.0


def store_wait() -> float:
    """Seconds lwm waits for an object store's first answer before a command (``LWM_STORE_WAIT_S``; 0: no bound)."""
    raw = os.environ.get(WAIT_ENV, "").strip()
    try:
        wait = float(raw) if raw else DEFAULT_WAIT_S
    except ValueError:
        wait = -1.0
    if not math.isfinite(wait) or wait < 0:
        raise ConfigError(f"{WAIT_ENV}={raw!r}: give seconds (0: no bound on the wait for an object store's answer)")
    return wait


def s3_bucket(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The bucket `path` names where `fs` is S3 (s3fs); "" elsewhere."""
    if not ({"s3", "s3a"} & protocols(fs) and hasattr(fs, "call_s3")):
        return ""
    return path.strip("/").split("/", 1)[0]


def _bounded(fs: fsspec.AbstractFileSystem, wait: float):
    """The same store, user and settings as `fs`, asked at most twice with `wait` / 2 seconds to connect and to
    answer each time; botocore's own defaults (60 s each, retried by botocore and by s3fs) leave a frozen endpoint
    holding a run for many minutes with nothing printed."""
    opts = dict(fs.storage_options)
    config = {**(opts.get("config_kwargs") or {}), "connect_timeout": wait / 2, "read_timeout": wait / 2,
              "retries": {"mode": "standard", "total_max_attempts": 2}}
    probe = type(fs)(**{**opts, "config_kwargs": config, "skip_instance_cache": True})
    probe.retries = 1  # s3fs's own loop around each call: botocore's two attempts are the retry
    return probe


def _silence(exc: BaseException) -> str:
    """How `exc` says the endpoint never answered: "timeout", "unreachable" (refused, no route), or "" where it
    answered something lwm cannot use (a TLS failure, a closed connection, an error status), which the run's own
    message then says more about."""
    import botocore.exceptions as bc

    if isinstance(exc, (bc.ReadTimeoutError, bc.ConnectTimeoutError, TimeoutError)):
        return "timeout"
    return "unreachable" if isinstance(exc, (bc.EndpointConnectionError, bc.ProxyConnectionError)) else ""


def ask_bucket(fs: fsspec.AbstractFileSystem, bucket: str, shown: str) -> None:
    """``head_bucket`` within `store_wait` seconds; an endpoint that does not answer is one line (`ConfigError`)."""
    wait = store_wait()
    client = _bounded(fs, wait) if wait else fs
    try:
        client.call_s3("head_bucket", Bucket=bucket)
    except Exception as exc:
        silence = _silence(exc) if wait else ""
        if not silence:
            raise
        endpoint = strip_uri_credentials(str(getattr(client.s3.meta, "endpoint_url", "") or "the default endpoint"))
        what = (f"no answer from the object store at {endpoint} (asked twice, {wait:g} s in all)"
                if silence == "timeout" else f"the object store at {endpoint} could not be reached")
        hint = "check the endpoint (FSSPEC_S3_ENDPOINT_URL, AWS_ENDPOINT_URL, ~/.aws/config) and the network"
        raise ConfigError(f"{strip_uri_credentials(shown)}: {what} ({type(exc).__name__}); {hint}"
                          + (f", or give it longer with {WAIT_ENV}" if silence == "timeout" else "")) from None


def check_inputs_answer(inputs: list[str]) -> None:
    """Each object store the inputs name (a run's inputs, a finished run, shards to train on) answers within
    `store_wait` seconds (one question per bucket), so a frozen endpoint is one line before any work, not a
    listing that waits for minutes. What it answers (no such bucket, no right to list) is left to the command's
    own reading, which names the input."""
    asked: set[tuple[str, str]] = set()
    for spec in inputs:
        fs, path = filesystem(spec)
        bucket = s3_bucket(fs, path)
        if not bucket or any(c in bucket for c in "*?["):
            continue
        key = (repr(sorted(fs.storage_options.items(), key=str)), bucket)
        if key in asked:
            continue
        asked.add(key)
        try:
            ask_bucket(fs, bucket, spec)
        except ConfigError:
            raise
        except Exception:
            continue
