"""Object stores: which filesystems have buckets, what lwm asks a store before a run (that it answers, and
that an output's bucket exists), and how a store's refusal of a request names the location and the right it
lacked."""

from __future__ import annotations

import errno
import math
import os

import fsspec

from schemas.errors import ConfigError
from stages.ingest.reading import protocols
from stages.uri_credentials import strip_uri_credentials

WAIT_ENV = "LWM_STORE_WAIT_S"
DEFAULT_WAIT_S = 20.0


def store_wait() -> float:
    """Seconds lwm waits for an object store's first answer before a run (``LWM_STORE_WAIT_S``; 0: no bound)."""
    raw = os.environ.get(WAIT_ENV, "").strip()
    try:
        wait = float(raw) if raw else DEFAULT_WAIT_S
    except ValueError:
        wait = -1.0
    if not math.isfinite(wait) or wait < 0:
        raise ConfigError(f"{WAIT_ENV}={raw!r}: give seconds (0: no bound on the wait for an object store's answer)")
    return wait


def _s3_bucket(fs: fsspec.AbstractFileSystem, path: str) -> str:
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


def _ask_bucket(fs: fsspec.AbstractFileSystem, bucket: str, shown: str) -> None:
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


def check_bucket(fs: fsspec.AbstractFileSystem, path: str, shown: str) -> None:
    """An output on S3 whose bucket the store says does not exist is one line now, not a failed write later;
    so is a store that does not answer at all (`store_wait`). Only a definite answer counts: credentials that
    may write objects but not look at the bucket leave the writes to tell (lwm creates no bucket either way:
    `ensure_dir`)."""
    bucket = _s3_bucket(fs, path)
    if not bucket:
        return
    try:
        _ask_bucket(fs, bucket, shown)
    except FileNotFoundError:  # s3fs's translation of NoSuchBucket / 404
        raise ConfigError(f"{strip_uri_credentials(shown)}: the bucket {bucket} does not exist; lwm writes into a "
                          "bucket, it does not create one") from None
    except ConfigError:
        raise
    except Exception:  # no right to look, or another answer: not ours to judge here
        return


def check_inputs_answer(inputs: list[str]) -> None:
    """Each object store the inputs name answers within `store_wait` seconds (one question per bucket), so a
    frozen endpoint is one line before the run, not a listing that waits for minutes. What it answers (no such
    bucket, no right to list) is left to the scan, which names the input."""
    from stages.ingest.reading import filesystem

    asked: set[tuple[str, str]] = set()
    for spec in inputs:
        fs, path = filesystem(spec)
        bucket = _s3_bucket(fs, path)
        if not bucket or any(c in bucket for c in "*?["):
            continue
        key = (repr(sorted(fs.storage_options.items(), key=str)), bucket)
        if key in asked:
            continue
        asked.add(key)
        try:
            _ask_bucket(fs, bucket, spec)
        except ConfigError:
            raise
        except Exception:
            continue


# What each request asks of a store, by botocore's operation name (lowercase, without underscores, so that s3fs's
# method names match too): a refusal then says which right the credentials lack there.
_ACCESS = {
    **dict.fromkeys(("listobjectsv2", "listobjects", "listobjectversions", "listmultipartuploads", "listparts",
                     "headbucket", "getbucketlocation"), "list"),
    **dict.fromkeys(("getobject", "headobject", "getobjectattributes", "getobjecttagging", "getobjectacl"), "read"),
    **dict.fromkeys(("putobject", "createmultipartupload", "uploadpart", "uploadpartcopy", "completemultipartupload",
                     "abortmultipartupload", "copyobject", "deleteobject", "deleteobjects", "putobjecttagging"),
                    "write"),
}


class StoreRefused(PermissionError):
    """An object store refused lwm a request (access denied, credentials it does not accept): one line that names
    the location lwm was given (an output, an input), the right that was refused (``access``: read, write or
    list) and the store's reason. Made by `store_refused`; it pickles, so a worker's refusal reaches the
    driver whole."""

    location: str = ""
    access: str = ""


def refused_request(exc: BaseException) -> tuple[str, str] | None:
    """(operation, the store's reason) of the request an object store refused, where `exc` is that refusal or
    was raised from it (s3fs turns botocore's ``AccessDenied`` into a `PermissionError` raised from it); None for
    any other error. The operation is botocore's name (``PutObject``), "" where the store's error is not at hand."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        response = getattr(cause, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict):
            code = str(response["Error"].get("Code") or "")
            message = " ".join(str(response["Error"].get("Message") or "").split())
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if status != 403 and not isinstance(exc, PermissionError):
                return None
            return str(getattr(cause, "operation_name", "") or ""), ": ".join(p for p in (code, message) if p)
        cause = cause.__cause__ or cause.__context__
    return ("", str(exc) or "access denied") if isinstance(exc, PermissionError) else None


def store_refused(location: str, exc: BaseException, operation: str = "", target: str = "") -> StoreRefused:
    """The `StoreRefused` for `exc`, a refusal of a request on `location` (shown without credentials):
    `operation` is the request (botocore's or s3fs's name) where the caller knows it better than `exc` does,
    `target` the object or prefix it was about, relative to `location` where it lies below it."""
    asked, reason = refused_request(exc) or ("", str(exc))
    operation = operation or asked
    access = _ACCESS.get(operation.replace("_", "").lower(), "")
    if "_" in operation:  # s3fs's method name (put_object) as botocore names the operation (PutObject)
        operation = "".join(part[:1].upper() + part[1:] for part in operation.split("_"))
    shown = strip_uri_credentials(location).rstrip("/")
    what = " ".join(p for p in (operation, target) if p)
    details = f"{what}: {reason or 'access denied'}" if what else (reason or "access denied")
    line = (f"{shown}: the object store refused to let lwm {access} there ({details}); the credentials in use may "
            f"not {access} there" if access else f"{shown}: the object store refused lwm access there ({details})")
    refused = StoreRefused(errno.EACCES, line)
    refused.location, refused.access = shown, access
    return refused


def naming_refusals(fs: fsspec.AbstractFileSystem, location: str, path: str) -> None:
    """Every request of `fs` (an instance of one location's own, on S3) that the store refuses raises
    `store_refused` naming `location` (given as `path` on `fs`), the right refused and the object asked for.
    s3fs's own error says "Access Denied" alone: which location, and whether a read, write or listing, were
    left to guess. s3fs sends every request through `_call_s3` (its files through `call_s3`)."""
    if not ({"s3", "s3a"} & protocols(fs) and hasattr(fs, "_call_s3")):
        return
    from fsspec.asyn import sync_wrapper

    call = fs._call_s3
    root = path.strip("/")

    async def call_s3(method, *akwarglist, **kwargs):
        try:
            return await call(method, *akwarglist, **kwargs)
        except PermissionError as exc:
            if isinstance(exc, StoreRefused):
                raise
            asked = {k: v for d in (*akwarglist, kwargs) if isinstance(d, dict) for k, v in d.items()}
            key = "/".join(str(p) for p in (asked.get("Bucket"), asked.get("Key", asked.get("Prefix"))) if p)
            key = key.rstrip("/")
            target = key[len(root) + 1:] if key.startswith(root + "/") else ("" if key == root else key)
            raise store_refused(location, exc, str(method), target) from exc

    fs._call_s3 = call_s3
    fs.call_s3 = sync_wrapper(call_s3, obj=fs)
