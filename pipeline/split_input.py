"""The ``scan`` task: the first pass over the byte ranges of large inputs (`stages.ingest.ranges`).

One task per range counts its newlines, its decompressed length and its sha256 in one read, so the
ingest tasks can give every line its true number (``line N``) whatever the range layout.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import zstandard

from pipeline.object_stores import store_refused
from stages.ingest.frames import inflate, raw_chunks
from stages.ingest.ranges import IngestWork, content_stamp
from stages.ingest.reading import filesystem, is_local
from stages.uri_credentials import recorded_uri


def scan_tasks(plan: list[IngestWork], out: str, stamps: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One scan task per byte range of the plan (the first pass that counts newlines). `stamps`: each file's
    `content_stamp` by uri, filled here and kept by the caller (the ingest tasks stamp their files with it)."""
    tasks = []
    stamps = {} if stamps is None else stamps  # a file's stamp, once for all its ranges
    for work in plan:
        if work.byte_range is None:
            continue
        r, uri = work.byte_range, work.units[0].uri
        if uri not in stamps:
            stamps[uri] = content_stamp(work.units[0])
        tasks.append({"task_id": work.task_id, "uri": uri, "start": r.start, "end": r.end,
                      "compression": r.compression, "out": out,
                      "spec": [uri, r.start, r.end, r.compression, stamps[uri]]})
    return tasks


def run_scan_task(task: dict[str, Any]) -> dict[str, Any]:
    """Count the newlines of one range; also its decompressed length, last byte and sha256 (one read)."""
    digest = hashlib.sha256()

    def hashed(chunks: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            digest.update(chunk)
            yield chunk

    newlines, length, last, error = 0, 0, b"", ""
    try:
        for chunk in inflate(hashed(raw_chunks(task["uri"], task["start"], task["end"])), task["compression"]):
            newlines += chunk.count(b"\n")
            length += len(chunk)
            last = chunk[-1:]
    except (EOFError, zstandard.ZstdError) as exc:
        error = f"{type(exc).__name__}: {exc}"  # the file is then read whole, where errors are quarantined
    except PermissionError as exc:
        if not is_local(filesystem(task["uri"])[0]):  # the store refused: one line, naming the input
            raise store_refused(task["uri"], exc) from exc
        error = f"{type(exc).__name__}: {exc}"  # read whole, it is quarantined as an unreadable file
    public_uri = recorded_uri(task["uri"])
    result = {
        "task_id": task["task_id"], "stage": "scan", "uri": public_uri, "newlines": newlines, "length": length,
        "ends_with_newline": last == b"\n", "error": error, "spec_hash": task["spec_hash"], "rows": 0,
        "bytes": task["end"] - task["start"],
        "input": {"uri": public_uri, "range": [task["start"], task["end"]], "size": task["end"] - task["start"],
                  "sha256": digest.hexdigest(), "files": 1},
    }
    return result


def input_entries(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per input (file, directory or range): ``{uri, input, format, stats}``, flattening groups."""
    out = []
    for r in results:
        for m in r.get("members") or [r]:
            out.append({"uri": m["uri"], "input": m["input"], "format": r["format"], "stats": m["stats"]})
    return out

