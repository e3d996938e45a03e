"""Parallel reading of large inputs: line-aligned byte ranges of big JSONL files, groups of small files.

Ingest work comes in three shapes, each one task with a deterministic id:

- one unit (a file or a session directory), id = hash of its URI (the shape of every small input);
- a **byte range** of a large JSONL file whose adapter reads one record per line: plain files are cut
  every ``ingest.split_bytes`` (64 MiB), ``.zst`` files at frame boundaries when they hold several
  independent frames (the seek table of the zstd seekable format when present, else the frame
  headers), never inside a frame; ``.gz`` and single-frame ``.zst`` files stay whole. Id = hash of
  URI + range;
- a **group** of consecutive small units of one format, closed once it holds ``ingest.group_bytes``
  (8 MiB) or ``ingest.group_files`` (64), so a folder of many tiny files is not dominated by per-task
  overhead. Id = hash of the member URIs.

A range owns the lines that *start* inside it: its reader skips the partial line it begins in and
reads past its end to finish its last line. Locators stay the true line numbers (``line N``), so
records, trajectory ids and quarantine rows are the same whether a file is split or not, at any
range size. That needs the count of newlines before each range, found by a cheap first pass (the
``scan`` stage: one task per range, counting ``b"\\n"`` in parallel, which also hashes the range for
the manifest). Byte-offset locators would have saved the pass but made ids depend on the layout.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from itertools import pairwise
from typing import Any

import zstandard

from schemas.errors import InvalidRecord
from stages.ingest.atif import is_streaming_atif
from stages.ingest.common import line_records
from stages.ingest.frames import inflate, raw_chunks, zstd_frames
from stages.ingest.reading import (
    InputUnit,
    LineSplitter,
    container_kind,
    filesystem,
    is_local,
    max_record_bytes,
    split_compression,
    stream_failure,
)
from stages.ingest.registry import RawRecord, reads_line_records

DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024
DEFAULT_GROUP_BYTES = 8 * 1024 * 1024
DEFAULT_GROUP_FILES = 64
# Whatever the configured sizes, an input is cut into about this many tasks of similar bytes (never
# smaller than `MIN_TASK_BYTES`), so a 40 MB corpus of one file gives every worker several tasks to
# balance instead of one task for the first worker; a function of the input only, never of the workers.
TARGET_TASKS = 16
MIN_TASK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class SplitSettings:
    """Sizes that shape ingest tasks (config ``ingest.split_bytes``, ``group_bytes``, ``group_files``)."""

    split_bytes: int = DEFAULT_SPLIT_BYTES
    group_bytes: int = DEFAULT_GROUP_BYTES
    group_files: int = DEFAULT_GROUP_FILES


def split_settings(cfg: dict[str, Any]) -> SplitSettings:
    """The split and grouping sizes of a resolved config (defaults where unset)."""
    ingest = cfg.get("ingest", {})
    return SplitSettings(
        int(ingest.get("split_bytes") or DEFAULT_SPLIT_BYTES),
        int(ingest.get("group_bytes") or DEFAULT_GROUP_BYTES),
        int(ingest.get("group_files") or DEFAULT_GROUP_FILES),
    )


@dataclass(frozen=True)
class ByteRange:
    """Bytes [start, end) of a file (compressed bytes for .zst, aligned to frames); after the scan,
    `length` is the decompressed size it owns, `lines_before` the newlines before it and
    `skip_partial` whether it begins inside a line that belongs to the range before."""

    start: int
    end: int
    compression: str | None = None
    length: int = -1
    lines_before: int = 0
    skip_partial: bool = False
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IngestWork:
    """One ingest task's input: one unit, a group of units (one format), or a range of one file."""

    units: tuple[InputUnit, ...]
    format: str
    byte_range: ByteRange | None = None

    @property
    def task_id(self) -> str:
        return task_id_for(self.identity)

    @property
    def identity(self) -> str:
        """What the task id and spec hash are computed from (a single unit: its URI, as always)."""
        if self.byte_range is not None:
            return f"{self.units[0].uri}#bytes={self.byte_range.start}-{self.byte_range.end}"
        return "\n".join(u.uri for u in self.units)

    def task_fields(self) -> dict[str, Any]:
        """The input part of an ingest task dict (JSON-friendly)."""
        first = self.units[0]
        out: dict[str, Any] = {"task_id": self.task_id, "uri": first.uri, "is_dir": first.is_dir, "format": self.format}
        if len(self.units) > 1:
            out["members"] = [{"uri": u.uri, "is_dir": u.is_dir} for u in self.units]
        if self.byte_range is not None:
            out["range"] = asdict(self.byte_range)
        return out


# What tells one version of a file from another without reading it: the modification time where the filesystem
# has one, an object store's ETag or version, else the creation time (the memory filesystem).
_VERSION_KEYS = ("mtime", "ETag", "VersionId", "LastModified", "last_modified", "updated", "created")


def content_stamp(unit: InputUnit) -> Any:
    """Size and version of a unit's file (of each file of a directory unit), for the spec of the tasks that read
    it: a file changed in place since the last run is read again instead of served from that run's outputs.
    None where it cannot be looked at (its task says why)."""
    fs, path = filesystem(unit.uri)
    try:
        if unit.is_dir:
            found = fs.find(path, detail=True)
            return [[posixpath.relpath(p, path), _stamp(info)] for p, info in sorted(found.items())]
        return _stamp(fs.info(path))
    except OSError:
        return None


def _stamp(info: dict[str, Any]) -> list[Any]:
    version = next((info[k] for k in _VERSION_KEYS if info.get(k) is not None), None)
    return [info.get("size"), str(version) if version is not None else None]


def task_id_for(identity: str) -> str:
    # A file name that is not UTF-8 reaches us with its bytes as lone surrogates: hash those bytes.
    return hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def input_size(unit: InputUnit) -> int:
    """Bytes of a unit; 0 for one that cannot be looked at (a link to nothing): its ingest task says why."""
    fs, path = filesystem(unit.uri)
    try:
        return int(fs.du(path)) if unit.is_dir else int(fs.size(path) or 0)
    except OSError:  # a link to a missing file or a loop of links (ELOOP), a file removed since it was listed
        if is_local(fs):
            return 0
        raise


def task_bytes(total_bytes: int, settings: SplitSettings) -> SplitSettings:
    """The settings with range and group sizes capped at ``total / TARGET_TASKS`` (≥ `MIN_TASK_BYTES`)."""
    per_task = max(MIN_TASK_BYTES, -(-total_bytes // TARGET_TASKS))
    return replace(settings, split_bytes=min(settings.split_bytes, per_task),
                   group_bytes=min(settings.group_bytes, per_task))


def plan_ingest(units: list[tuple[InputUnit, str]], settings: SplitSettings) -> list[IngestWork]:
    """Ingest work for sorted input units: big splittable files → ranges, small ones → groups, every
    task holding at most about 1/`TARGET_TASKS` of the input's bytes (see `task_bytes`)."""
    sizes = [input_size(unit) for unit, _ in units]
    settings = task_bytes(sum(sizes), settings)
    plan: list[IngestWork] = []
    group: list[InputUnit] = []
    group_fmt, group_bytes = "", 0

    def flush() -> None:
        nonlocal group, group_bytes
        if group:
            plan.append(IngestWork(tuple(group), group_fmt))
        group, group_bytes = [], 0

    for (unit, fmt), size in zip(units, sizes, strict=True):
        ranges = file_ranges(unit, fmt, size, settings.split_bytes)
        if len(ranges) > 1:
            flush()
            plan.extend(IngestWork((unit,), fmt, r) for r in ranges)
            continue
        if size >= settings.group_bytes:
            flush()
            plan.append(IngestWork((unit,), fmt))
            continue
        if group and fmt != group_fmt:
            flush()
        group_fmt = fmt
        group.append(unit)
        group_bytes += size
        if group_bytes >= settings.group_bytes or len(group) >= settings.group_files:
            flush()
    flush()
    return plan


def file_ranges(unit: InputUnit, fmt: str, size: int, split_bytes: int) -> list[ByteRange]:
    """Byte ranges of one file; a single range means the file is read whole."""
    whole = [ByteRange(0, size)]
    if unit.is_dir or not reads_line_records(fmt) or container_kind(unit.uri) != "jsonl" or size <= split_bytes:
        return whole
    if fmt == "atif" and is_streaming_atif(unit.uri):
        return whole  # streaming ATIF: the whole file is one document
    _, compression = split_compression(unit.uri)
    if compression is None:
        n = -(-size // split_bytes)  # ranges of equal size (± 1 byte), none over split_bytes
        cuts = [size * i // n for i in range(n + 1)]
        return [ByteRange(a, b) for a, b in pairwise(cuts)]
    if compression != "zstd":
        return whole
    frames = zstd_frames(unit.uri, size)
    if len(frames) < 2:
        return whole
    ranges, start, end = [], frames[0][0], frames[0][0]
    for offset, csize in frames:
        if end - start >= split_bytes:
            ranges.append(ByteRange(start, end, "zstd"))
            start = offset
        end = offset + csize
    ranges.append(ByteRange(start, end, "zstd"))
    return ranges


def apply_scans(plan: list[IngestWork], scans: list[dict[str, Any]]) -> list[IngestWork]:
    """Give each range its line offset; a file whose scan failed goes back to one whole-file task."""
    by_id = {s["task_id"]: s for s in scans}
    failed = {w.units[0].uri for w in plan if w.byte_range is not None and by_id[w.task_id]["error"]}
    out: list[IngestWork] = []
    lines_before, prev_newline, current = 0, True, None
    for work in plan:
        if work.byte_range is None:
            out.append(work)
            continue
        uri = work.units[0].uri
        if uri in failed:
            if uri != current:
                out.append(IngestWork(work.units, work.format))
            current = uri
            continue
        if uri != current:
            lines_before, prev_newline, current = 0, True, uri
        scan = by_id[work.task_id]
        r = replace(work.byte_range, length=scan["length"], lines_before=lines_before,
                    skip_partial=not prev_newline, input=scan["input"])
        out.append(replace(work, byte_range=r))
        lines_before += scan["newlines"]
        prev_newline = scan["ends_with_newline"] if scan["length"] else prev_newline
    return out


def iter_range_lines(uri: str, r: dict[str, Any], max_bytes: int) -> Iterator[tuple[int, str] | InvalidRecord]:
    """``(line_number, text)`` of the non-blank lines that start in range `r`, as `iter_lines` gives them."""
    if not r["skip_partial"] and r["length"] <= 0:
        return
    splitter = LineSplitter(uri, max_bytes, lineno=r["lines_before"], skip_partial=r["skip_partial"],
                            length=r["length"])
    seen = [0]

    def counted(chunks: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            seen[0] += len(chunk)
            yield chunk

    try:
        yield from splitter.lines(counted(inflate(raw_chunks(uri, r["start"]), r["compression"])))
        if seen[0] < r["length"]:  # the file ended inside the range the scan measured: it was cut short since
            raise EOFError(f"the range ends {r['length'] - seen[0]} bytes early: the file was cut short while the "
                           "run read it")
    except (EOFError, zstandard.ZstdError, OSError) as exc:
        yield stream_failure(exc, f"line {splitter.lineno + 1}", uri)


def range_records(uri: str, fmt: str, r: dict[str, Any], max_bytes: int) -> Iterator[RawRecord | InvalidRecord]:
    """The JSONL records of one range, exactly as `records_from_container` yields them unsplit."""
    return line_records(uri, fmt, iter_range_lines(uri, r, max_bytes))


class RangeAdapter:
    """An adapter restricted to one byte range: reads the range's lines, normalizes as the adapter does."""

    def __init__(self, adapter, byte_range: dict[str, Any]) -> None:
        self.adapter, self.byte_range = adapter, byte_range
        self.name = adapter.name

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        return range_records(unit.uri, self.name, self.byte_range, max_record_bytes(opts))

    def normalize(self, record: RawRecord, opts: dict[str, Any]):
        return self.adapter.normalize(record, opts)
