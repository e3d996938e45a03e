"""Object stores: what lwm asks of an output's store before a run (that its bucket exists; that the store answers
at all: `stages.store_answer`), and how a store's refusal of a request names the location and the right it
lacked."""

from __future__ import annotations

import errno

import fsspec

from schemas.errors import ConfigError
from stages.ingest.reading import protocols
from stages.store_answer import ask_bucket, s3_bucket
from stages.uri_credentials import strip_uri_credentials


def check_bucket(fs: fsspec.AbstractFileSystem, path: str, shown: str) -> None:
    """An output on S3 whose bucket the store says does not exist is one line now, not a failed write later;
    so is a store that does not answer at all (`store_wait`). Only a definite answer counts: credentials that
    may write objects but not look at the bucket leave the writes to tell (lwm creates no bucket either way:
    `ensure_dir`)."""
    bucket = s3_bucket(fs, path)
    if not bucket:
        return
    try:
        ask_bucket(fs, bucket, shown)
    except FileNotFoundError:  # s3fs's translation of NoSuchBucket / 404
        raise ConfigError(f"{strip_uri_credentials(shown)}: the bucket {bucket} does not exist; lwm writes into a "
                          "bucket, it does not create one") from None
    except ConfigError:
        raise
    except Exception:  # no right to look, or another answer: not ours to judge here
        return


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
