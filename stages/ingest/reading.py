"""Reading inputs from anywhere fsspec reaches, streaming, with bounded memory per record.

Containers: JSONL, JSON (object or list), CSV, Parquet. Compression ``.gz`` / ``.zst`` is
detected from the name. Readers yield ``(locator, value)`` pairs or `InvalidRecord` for the
records that cannot be read; they never raise on bad data, only on unreachable files.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import posixpath
import re
import stat
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import fsspec
import msgspec
import zstandard

from schemas.errors import ConfigError, InvalidRecord

DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024
DATA_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".parquet", ".traj", ".cast", ".xml", ".yaml", ".yml", ".log")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
_CHUNK = 1 << 20
# Compressions and archives an input may come in that no reader opens
UNREAD_PACKINGS = (".bz2", ".xz", ".lzma", ".lz4", ".zip", ".tar", ".tgz", ".7z", ".rar")
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark: accepted at the start of a file and dropped
HEAD_BYTES = 65536  # what is read of a file's start to tell its format (`read_head`)


@dataclass(frozen=True)
class InputUnit:
    """One unit of input work: a file, or a directory that an adapter reads as one session."""

    uri: str
    is_dir: bool = False


def split_compression(uri: str) -> tuple[str, str | None]:
    """``("a.jsonl", "zstd")`` for ``a.jsonl.zst``; the name without its compression suffix."""
    for suffix, kind in COMPRESSIONS.items():
        if uri.endswith(suffix):
            return uri[: -len(suffix)], kind
    return uri, None


def container_of(uri: str) -> str:
    """The container kind from the name: jsonl, json, csv, parquet or the bare extension."""
    base, _ = split_compression(uri.lower())
    ext = posixpath.splitext(base)[1]
    return {".ndjson": "jsonl", ".traj": "json"}.get(ext, ext.lstrip("."))


# Kinds a file's name settles: the containers, and the suffixes one adapter reads (asciicast, XML screens, YAML task
# files). Any other name (``.log``, ``.txt``, ``.out``, none) says nothing about the content: `container_kind` looks.
NAMED_KINDS = frozenset({"jsonl", "json", "csv", "parquet", "cast", "xml", "yaml", "yml"})


def container_kind(uri: str) -> str:
    """The container kind of a file: from its name (`container_of`) where the name is one of `NAMED_KINDS`, else from
    its first 64 KiB (`read_head`, decompressed): ``jsonl`` for JSON values one per line, ``json`` for one JSON
    document; the bare extension when the content is neither (or the file cannot be read)."""
    kind = container_of(uri)
    if kind in NAMED_KINDS:
        return kind
    return json_container_by_content(read_head(uri)) or kind


def json_container_by_content(head: bytes) -> str | None:
    """``jsonl``, ``json`` or None for the first bytes of a file: its first non-blank line a whole JSON object or
    array with more lines after it is JSON Lines (so is a first line too long to end within `head`, when it opens an
    object); a file of one such line, or one whose first line opens a value it does not close (a pretty-printed
    document), is JSON — unless most of the next lines are whole objects or arrays (JSON Lines whose first line is
    damaged). Anything that does not start with ``{`` or ``[`` is neither."""
    text = head.lstrip(b" \t\r\n")
    if text[:1] not in (b"{", b"["):
        return None
    first, newline, rest = text.partition(b"\n")
    if not newline:  # one line, whole (the file ends in `head`) or cut by it
        if len(head) < HEAD_BYTES - len(BOM):  # `read_head` drops a BOM
            return "json"
        return "jsonl" if text[:1] == b"{" else "json"
    if _json_value(first):
        return "jsonl" if rest.strip() else "json"
    lines = [line for line in rest.split(b"\n")[:-1][:SNIFF_RECORDS] if line.strip()]  # whole lines only
    whole = sum(1 for line in lines if line.lstrip()[:1] in (b"{", b"[") and _json_value(line))
    return "jsonl" if lines and whole * 2 > len(lines) else "json"


def _json_value(line: bytes) -> bool:
    try:
        return isinstance(loads(line.strip()), dict | list)
    except (ValueError, RecursionError):  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        return False


def is_data_file(uri: str) -> bool:
    base, _ = split_compression(uri.lower())
    return base.endswith(DATA_SUFFIXES)


# Filesystems whose first path component is a bucket (a container): lwm writes into buckets, never creates one.
BUCKET_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for a URI and the path within it."""
    fs, path = fsspec.core.url_to_fs(uri)
    return fs, path


def _unstrip(fs: fsspec.AbstractFileSystem, path: str) -> str:
    return fs.unstrip_protocol(path) if not fs.protocol or not is_local(fs) else path


def protocols(fs: fsspec.AbstractFileSystem) -> set[str]:
    """Every name of `fs`'s protocol (fsspec gives one string or a tuple of them)."""
    return {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether `fs` is this machine's own filesystem (fsspec's ``file`` protocol, whatever other names it has)."""
    return "file" in protocols(fs)


class LinkOutsideInput(OSError):
    """A symbolic link whose target lies outside the folder it sits in (like a ``../`` path)."""


def check_link(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Raise `LinkOutsideInput` when a local `path` is a link out of its own folder.

    Links that leave the input are treated like ``../`` paths: a logged screen ``002.xml`` pointing
    at ``/home/me/.ssh/id_rsa`` must never pull that file into shards.
    """
    if not is_local(fs) or not os.path.islink(path):
        return
    if not inside(os.path.realpath(path), os.path.realpath(os.path.dirname(path) or ".")):
        raise LinkOutsideInput(f"{os.path.basename(path)} is a link out of its folder; not read")


def inside(path: str, root: str) -> bool:
    """Whether `path` is `root` or lies below it (both spelled alike: real paths, or paths of one store)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def stream_failure(exc: BaseException, locator: str, uri: str) -> InvalidRecord:
    """The record of a read that failed part way (a link out of the input, a truncated or corrupt stream)."""
    if isinstance(exc, LinkOutsideInput):
        return InvalidRecord("link_outside_input", str(exc), locator, uri)
    if isinstance(exc, OSError) and exc.errno is not None:  # the system's refusal, not a damaged stream
        return unreadable_file(exc, locator, uri)
    return InvalidRecord("truncated_stream", f"stream ends early or is corrupt ({exc})", locator, uri)


def unreadable_file(exc: OSError, locator: str, uri: str) -> InvalidRecord:
    """The record of a file the system would not open: a link to a missing file or a loop of links, no permission."""
    return InvalidRecord("unreadable_file", exc.strerror or str(exc), locator, uri)


def open_failure(uri: str) -> InvalidRecord | None:
    """Why a file cannot be read from its start: `unreadable_file` (the system refuses it) or `truncated_stream`
    (its compression is broken: a ``.zst`` that is not zstd); None when it can."""
    try:
        with open_binary(uri) as f:
            f.read(1)
    except (OSError, EOFError, zstandard.ZstdError) as exc:
        return stream_failure(exc, "document", uri)
    return None


SNIFF_RECORDS = 32  # records a file's format is sniffed from: the first that reads of these (`registry.Probe`)


def sniffed_records(uri: str) -> Iterator[tuple[str, Any] | InvalidRecord]:
    """The first `SNIFF_RECORDS` items of a JSON, JSONL, CSV or Parquet container, read as the sniffers read them
    (a record up to 16 MiB)."""
    return islice(iter_container(uri, max_bytes=16 * 1024 * 1024), SNIFF_RECORDS)


def unrecognized(unit: InputUnit) -> InvalidRecord | None:
    """Why no adapter took `unit`, as its one quarantine record: the system refuses it, its compression is broken,
    its container holds nothing readable where the sniffers looked (a ``.gz`` or a JSON document cut short: the
    reader's own record, ``truncated_stream`` or ``malformed_json``), or no format fits; None for a file without a
    record (empty, or blank lines only), as under ``--format``."""
    if not unit.is_dir:  # a folder an adapter claims is opened by that adapter, never here
        failure = open_failure(unit.uri)
        if failure is not None:
            return failure
        if not read_head(unit.uri).strip() or _holds_nothing(unit.uri):
            return None
        damage = _nothing_readable(unit.uri)
        if damage is not None:
            return damage
        packed = next((s for s in UNREAD_PACKINGS if unit.uri.lower().endswith(s)), None)
        if packed is not None:  # giving --format would not help: say what would
            return InvalidRecord("wrong_format", f"{packed} files are not read (plain, .gz or .zst): unpack it first",
                                 "document", unit.uri)
        kind = container_kind(unit.uri)
        if kind not in NAMED_KINDS:  # --format would not help either: no reader opens it
            what = f"a .{kind} file" if kind else "a file without a suffix"
            return InvalidRecord("unknown_format", f"{what} that is not JSON Lines, JSON, CSV or Parquet, by its name "
                                 "or its first bytes: no adapter reads it", "document", unit.uri)
    return InvalidRecord("unknown_format", "no adapter recognizes this input (give --format: `lwm formats` lists "
                         "them)", "document", unit.uri)


def _nothing_readable(uri: str) -> InvalidRecord | None:
    """The first damage of a JSON, JSONL, CSV or Parquet container whose first records all fail to read (a broken
    stream before any other), else None: the container reads, and it is its content no format fits."""
    if container_kind(uri) not in ("json", "jsonl", "csv", "parquet"):
        return None
    items = list(sniffed_records(uri))
    if not items or not all(isinstance(item, InvalidRecord) for item in items):
        return None
    return next((item for item in items if item.reason == "truncated_stream"), items[0])


def _holds_nothing(uri: str) -> bool:
    """A CSV with only its header, or a Parquet file without rows: an empty file, as a blank JSONL is."""
    return container_kind(uri) in ("csv", "parquet") and next(iter_container(uri), None) is None


def join_uri(base: str, *parts: str) -> str:
    """Join path parts onto a URI or local path (fsspec URLs keep their protocol)."""
    return posixpath.join(base.rstrip("/"), *parts)


def open_binary(uri: str) -> io.BufferedIOBase:
    """A decompressed binary stream of the file (gzip and zstd by suffix).

    Decompression is bounded per read (`_Decompressed`): a decompression bomb costs the caller's
    read size, not its expanded size. A stream cut inside a compressed member first gives every
    byte that can be decoded before the cut, then ends with `EOFError`.
    """
    _, compression = split_compression(uri)
    fs, path = filesystem(uri)
    check_link(fs, path)
    raw = fs.open(path, "rb")
    if compression is None:
        return raw
    decoder = _GzipMembers() if compression == "gzip" else _ZstdFrames()
    return _Decompressed(raw, decoder)


# Output of one decompression step is at most about this many bytes (plus one zstd block).
_STEP_OUTPUT = 1 << 20
# zstd's densest encoding (an RLE block: 4 bytes for up to 128 KiB) expands one input byte to at
# most 32 KiB, so feeding this much input per step bounds a step's output near _STEP_OUTPUT.
_ZSTD_STEP_INPUT = _STEP_OUTPUT >> 15
_GZIP_STEP_INPUT = 1 << 16  # zlib bounds its own output (max_length):
_GZIP_STEP_OUTPUT = 1 << 18
_RAW_READ = 1 << 18  # compressed bytes read at a time


class _GzipMembers:
    """Concatenated gzip members through zlib, with output bounded per call."""

    def __init__(self) -> None:
        self._dobj = zlib.decompressobj(wbits=31)
        self.in_member = False

    def step(self, data: bytes, limit: int) -> tuple[bytes, bytes]:
        """(output, input left over) for `data`; at most `limit` output bytes."""
        if not data:
            return b"", b""
        self.in_member = True
        try:
            out = self._dobj.decompress(data, min(limit, _GZIP_STEP_OUTPUT))
        except zlib.error as exc:
            raise OSError(f"corrupt gzip stream ({exc})") from None
        rest = self._dobj.unconsumed_tail
        if self._dobj.eof:
            tail = self._dobj.unused_data
            self._dobj = zlib.decompressobj(wbits=31)
            self.in_member = False
            rest = tail + rest if tail.strip(b"\0") else b""  # trailing zero padding is allowed
        return out, rest

    @property
    def step_input(self) -> int:
        return _GZIP_STEP_INPUT


class _ZstdFrames:
    """Concatenated zstd frames, fed in small input steps so that a step's output stays bounded."""

    def __init__(self) -> None:
        self._dctx = zstandard.ZstdDecompressor()
        self._dobj = self._dctx.decompressobj()
        self.in_frame = False

    def step(self, data: bytes, limit: int) -> tuple[bytes, bytes]:
        if not data:
            return b"", b""
        self.in_frame = True
        out = self._dobj.decompress(data)
        rest = b""
        if self._dobj.eof:
            rest = self._dobj.unused_data
            self._dobj = self._dctx.decompressobj()
            self.in_frame = False
        return out, rest

    @property
    def in_member(self) -> bool:
        return self.in_frame

    @property
    def step_input(self) -> int:
        return _ZSTD_STEP_INPUT


class _Decompressed(io.BufferedIOBase):
    """A stream of decompressed bytes: each step decompresses a bounded piece of input.

    A compressed stream that ends inside a member/frame hands out every byte decoded before the
    cut, then raises `EOFError` (on the next read when that read already has data to return).
    """

    def __init__(self, raw, decoder) -> None:
        self._raw = raw
        self._decoder = decoder
        self._input = b""
        self._input_pos = 0
        self._out = b""
        self._out_pos = 0
        self._rest = b""
        self._raw_done = False
        self._error: EOFError | None = None

    def readable(self) -> bool:
        return True

    def _next_input(self) -> bytes:
        step = self._decoder.step_input
        if self._rest:  # input the decoder handed back (zlib's unconsumed tail, a next member)
            piece, self._rest = self._rest[:step], self._rest[step:]
            return piece
        if self._input_pos >= len(self._input) and not self._raw_done:
            self._input = self._raw.read(_RAW_READ)
            self._input_pos = 0
            if not self._input:
                self._raw_done = True
        piece = self._input[self._input_pos : self._input_pos + step]
        self._input_pos += len(piece)
        return piece

    def _take(self, limit: int) -> bytes:
        """Up to `limit` decoded bytes; b"" at the end; `EOFError` at a cut."""
        while self._out_pos >= len(self._out):
            piece = self._next_input()
            if not piece:
                if self._decoder.in_member:
                    raise EOFError("compressed stream ended before the end of its last member")
                return b""
            out, rest = self._decoder.step(piece, _STEP_OUTPUT)
            self._rest = rest + self._rest
            self._out, self._out_pos = out, 0
        if self._out_pos == 0 and len(self._out) <= limit:
            data, self._out = self._out, b""
            return data
        data = self._out[self._out_pos : self._out_pos + limit]
        self._out_pos += len(data)
        return data

    def _read(self, size: int | None, once: bool) -> bytes:
        if self._error is not None:
            raise self._error
        parts: list[bytes] = []
        got = 0
        while size is None or size < 0 or got < size:
            try:
                data = self._take(_CHUNK if size is None or size < 0 else size - got)
            except EOFError as exc:
                if not parts:
                    raise
                self._error = exc  # raised by the next read, after this data is handed out
                break
            if not data:
                break
            parts.append(data)
            got += len(data)
            if once:
                break
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read(self, size: int | None = -1) -> bytes:
        return self._read(size, once=False)

    def read1(self, size: int = -1) -> bytes:
        return self._read(size, once=True)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def read_head(uri: str, size: int = HEAD_BYTES) -> bytes:
    """Up to `size` decompressed bytes from the start of the file ('' if unreadable), without a BOM."""
    try:
        with open_binary(uri) as f:
            return f.read(size).removeprefix(BOM)
    except (OSError, EOFError, zstandard.ZstdError):
        return b""


def expand_inputs(specs: list[str], claims_dir=None) -> list[InputUnit]:
    """Files, directories (walked), globs and fsspec URLs → sorted, deduplicated input units.

    `claims_dir(uri) -> bool` lets an adapter take a whole directory as one unit (a recorded
    session); other directories are walked and only files with a data suffix are kept.
    """
    units: dict[str, InputUnit] = {}
    for spec in specs:
        if not spec.strip():  # fsspec would take it for the current folder
            raise ConfigError("an input path is empty; give a file, folder, glob or URL")
        fs, path = filesystem(spec)
        path = _canonical_local(fs, path)
        if fs.isdir(path):
            _walk(fs, path, units, claims_dir, _real(fs, path))
            continue
        matches = sorted(fs.glob(path)) if any(c in path for c in "*?[") else [path]
        if not matches or not all(fs.exists(m) for m in matches):
            raise ConfigError(f"input not found: {spec}")
        for m in matches:
            if fs.isdir(m):
                _walk(fs, m, units, claims_dir, _real(fs, m))
            else:
                _check_regular(fs, m)
                uri = _unstrip(fs, m)
                units[uri] = InputUnit(uri)
    return sorted(units.values(), key=lambda u: u.uri)


def input_location(spec: str) -> str:
    """One spelling of an input location, the one a run's identity (what a rerun resumes) and its manifest record:
    a local path as `expand_inputs` names the files it finds there (absolute; ``.``, ``..``, doubled and trailing
    slashes gone; the folders above its last component resolved), so that ``in``, ``in/``, ``./in`` and
    ``/work/in`` are one input; an object store's URL without trailing slashes (``s3://b/in/`` lists what
    ``s3://b/in`` does). Any other URL (a query, a chain of filesystems, a web address) stays as given."""
    if "::" in spec:
        return spec
    protocol, _ = fsspec.core.split_protocol(spec)
    if protocol in (None, "file", "local"):
        fs, path = filesystem(spec)
        return _canonical_local(fs, path)
    if protocol in BUCKET_PROTOCOLS and not any(c in spec for c in "?#") and spec.rstrip("/") != f"{protocol}:":
        return spec.rstrip("/")
    return spec


def _canonical_local(fs, path: str) -> str:
    """A local input path with the folders above its last component resolved (``..``, links), so one file has one
    URI however the input was spelled: ``../shared/data`` from one folder, ``/work/shared/data`` or a linked
    ``/tmp/shared/data`` name the same records, and ids derived from the URI (trajectories of formats that carry
    none, split keys, pools) must not change with the spelling. The last component stays as written: a link
    there is still read, or refused, as a link. Other filesystems' paths are returned unchanged."""
    if not is_local(fs):
        return path
    head, tail = os.path.split(path.rstrip(os.sep) or os.sep)
    if tail == ".":  # the folder itself: ``in/.`` is ``in``
        return _canonical_local(fs, head)
    if tail == "..":  # the folder above, found through any link on the way (as the system finds it)
        return os.path.realpath(path)
    return os.path.join(os.path.realpath(head), tail) if head and tail else path


def _real(fs, path: str) -> str | None:
    """The real path of a local input root (None for other filesystems, which have no links)."""
    return os.path.realpath(path) if is_local(fs) else None


def _walk(fs, path: str, units: dict[str, InputUnit], claims_dir, root: str | None = None) -> None:
    uri = _unstrip(fs, path)
    if claims_dir is not None and claims_dir(uri):
        units[uri] = InputUnit(uri, is_dir=True)
        return
    for entry in sorted(fs.ls(path, detail=True), key=lambda e: e["name"]):
        name = entry["name"]
        if (root is not None and entry["type"] == "directory" and os.path.islink(name)
                and not inside(os.path.realpath(name), root)):
            continue  # a folder link out of the input root, like a ../ path: not walked
        if entry["type"] == "directory":
            _walk(fs, name, units, claims_dir, root)
        elif is_data_file(name):
            if entry["type"] != "file":  # fsspec calls a regular file (or a link to one) "file"
                _check_regular(fs, name)
            u = _unstrip(fs, name)
            units[u] = InputUnit(u)


def _check_regular(fs, path: str) -> None:
    """A local input that is a pipe, a socket or a device would block the run or never end: refused at once."""
    if not is_local(fs):
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:  # a link to nothing: its reader quarantines it as unreadable
        return
    if not stat.S_ISREG(mode):
        kind = "a named pipe" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise ConfigError(f"input {path} is {kind}; lwm reads regular files only")


def iter_lines(uri: str, max_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[tuple[int, str] | InvalidRecord]:
    """``(line_number, text)`` for each non-blank line, streaming in 1 MiB chunks.

    A line longer than `max_bytes` is skipped without being held in memory and reported as
    ``line_too_long``; a truncated or corrupt compressed stream ends with ``truncated_stream``.
    """
    splitter = LineSplitter(uri, max_bytes)
    try:
        with open_binary(uri) as f:
            yield from splitter.lines(iter(lambda: f.read(_CHUNK), b""))
    except (EOFError, zstandard.ZstdError, OSError) as exc:
        yield stream_failure(exc, f"line {splitter.lineno + 1}", uri)


class LineSplitter:
    """Cuts a stream of byte chunks into numbered lines, for `iter_lines` (a whole file) and
    `stages.ingest.ranges.iter_range_lines` (a byte range of one).

    `lines` yields ``(line_number, text)`` for each non-blank line and an `InvalidRecord` for a line over
    `max_bytes` (dropped piece by piece, never held whole) or not UTF-8; a byte order mark is dropped from
    line 1. A range starts its numbers after `lineno` lines, drops its first line when `skip_partial` (it
    began in the range before) and stops at the first line that starts at or past `length` bytes (the next
    range's). When the chunks raise, `lineno` is the number of the last line ended, for the caller's message.
    """

    def __init__(self, uri: str, max_bytes: int, lineno: int = 0, skip_partial: bool = False,
                 length: int | None = None) -> None:
        self.uri, self.max_bytes, self.lineno = uri, max_bytes, lineno
        self.skip_partial, self.length = skip_partial, length

    def lines(self, chunks: Iterable[bytes]) -> Iterator[tuple[int, str] | InvalidRecord]:
        uri, max_bytes, length = self.uri, self.max_bytes, self.length
        lineno, skipping = self.lineno, self.skip_partial
        pending: list[bytes] = []
        pending_len, oversized, offset = 0, False, 0
        try:
            for chunk in chunks:
                i = 0
                while True:
                    nl = chunk.find(b"\n", i)
                    piece = chunk[i:] if nl < 0 else chunk[i:nl]
                    if not skipping and not oversized:
                        pending_len += len(piece)
                        if pending_len > max_bytes:
                            oversized, pending = True, []
                        else:
                            pending.append(piece)
                    if nl < 0:
                        break
                    lineno += 1
                    if skipping:
                        skipping = False
                    else:
                        if lineno == 1 and pending and not oversized:
                            pending[0] = pending[0].removeprefix(BOM)
                        out = _finish_line(uri, lineno, pending, oversized, max_bytes)
                        if out is not None:
                            yield out
                    pending, pending_len, oversized = [], 0, False
                    i = nl + 1
                    if length is not None and offset + i >= length:
                        return  # the next line starts in the next range
                offset += len(chunk)
        finally:
            self.lineno = lineno
        if not skipping and (pending or oversized):  # the last line, without a newline
            if lineno == 0 and pending and not oversized:
                pending[0] = pending[0].removeprefix(BOM)
            out = _finish_line(uri, lineno + 1, pending, oversized, max_bytes)
            if out is not None:
                yield out


def _finish_line(uri: str, lineno: int, pending: list[bytes], oversized: bool, max_bytes: int):
    """One line from its byte pieces: the text, None when blank, or why it is rejected."""
    if oversized:
        return InvalidRecord("line_too_long", f"line exceeds {max_bytes} bytes", f"line {lineno}", uri)
    data = b"".join(pending)
    if not data.strip():
        return None
    try:
        return lineno, data.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as exc:
        return InvalidRecord("bad_encoding", f"not UTF-8 ({exc.reason})", f"line {lineno}", uri)


_DECODER = msgspec.json.Decoder()


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``: the same value or the same exception, through msgspec where it can tell.

    msgspec decodes the common case 2-3x faster and agrees with json on what it accepts (integers of any
    size, duplicate keys: the last wins); it refuses NaN/Infinity, numbers beyond the float range, lone
    surrogates (escaped or raw) and non-UTF-8 bytes, which json then reads (or rejects with its own message) as before.
    One difference from ``json.loads``: ``NaN``, ``Infinity`` and numbers beyond the float range (which Python's
    own JSON writer emits, and JSON has no value for) are read as ``null``, as JavaScript's ``JSON.stringify``
    writes them: what the adapters write back (actions, ``meta``) is then valid JSON.
    """
    try:
        return _DECODER.decode(text)
    except (msgspec.MsgspecError, ValueError, RecursionError):  # ValueError: a raw lone surrogate in a str
        pass
    try:
        return json.loads(text, parse_constant=_no_number, parse_float=_finite_float)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise
    except ValueError:  # an integer of more digits than Python converts (`sys.get_int_max_str_digits`)
        raise _too_many_digits(text) from None


def _no_number(constant: str) -> None:
    return None


def _finite_float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _too_many_digits(text: str | bytes) -> json.JSONDecodeError:
    """The `json.JSONDecodeError` for JSON text holding an integer Python refuses to convert, at that integer:
    it is valid JSON, but no record needs such a number, and converting it costs time quadratic in its length."""
    doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
    limit = sys.get_int_max_str_digits()
    found = re.search(rf"(?<=[\[:,\s-])\d{{{limit + 1},}}", doc)
    return json.JSONDecodeError(f"integer of more than {limit} digits", doc, found.start() if found else 0)


def json_error_where(exc: json.JSONDecodeError) -> str:
    """json's message and the column it names, as one phrase: some messages already end in "at" ("Unterminated
    string starting at", "Invalid control character at")."""
    return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"


def json_document_error(exc: json.JSONDecodeError | UnicodeDecodeError) -> str:
    """Why a whole JSON document (a file, an archive member) does not parse, in the wording of `json_error_where`
    with the line added, since the record's locator names the document, not the line."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 (byte {exc.start})"
    return f"{exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno}"


def decode_line(uri: str, lineno: int, text: str) -> Any:
    """The JSON value of one JSONL line, or the `InvalidRecord` saying why it has none."""
    try:
        return loads(text)
    except json.JSONDecodeError as exc:
        return InvalidRecord("malformed_json", json_error_where(exc), f"line {lineno}", uri)
    except RecursionError:
        return InvalidRecord("too_deep", "JSON nested deeper than the parser allows", f"line {lineno}", uri)


def iter_jsonl(uri: str, max_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[tuple[str, Any] | InvalidRecord]:
    """Parsed JSON values of a JSONL file, ``("line N", value)``."""
    for item in iter_lines(uri, max_bytes):
        value = item if isinstance(item, InvalidRecord) else decode_line(uri, *item)
        yield value if isinstance(value, InvalidRecord) else (f"line {item[0]}", value)


def max_record_bytes(opts: dict[str, Any]) -> int:
    """The record size bound of adapter options (``max_record_bytes``; unset or 0 → the default)."""
    return int(opts.get("max_record_bytes") or DEFAULT_MAX_RECORD_BYTES)


def read_document(uri: str, max_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> bytes | InvalidRecord:
    """A whole (decompressed) file, refused past `max_bytes` without reading it all."""
    try:
        with open_binary(uri) as f:
            data = f.read(max_bytes + 1)
    except (EOFError, zstandard.ZstdError, OSError) as exc:
        return stream_failure(exc, "document", uri)
    if len(data) > max_bytes:
        return InvalidRecord("record_too_large", f"document exceeds {max_bytes} bytes", "document", uri)
    return data.removeprefix(BOM)


def iter_json(uri: str, max_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[tuple[str, Any] | InvalidRecord]:
    """A JSON document: each element of a top-level list (``item N``), or the object itself."""
    data = read_document(uri, max_bytes)
    if isinstance(data, InvalidRecord):
        yield data
        return
    try:
        value = loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        if isinstance(exc, json.JSONDecodeError):
            yield InvalidRecord("malformed_json", json_error_where(exc), f"line {exc.lineno}", uri)
        else:
            yield InvalidRecord("malformed_json", json_document_error(exc), "document", uri)
        return
    except RecursionError:
        yield InvalidRecord("too_deep", "JSON nested deeper than the parser allows", "document", uri)
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield f"item {i}", item
    else:
        yield "document", value


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # what "surrogateescape" makes of a byte that is not UTF-8


class _QuoteCountingLines:
    """The lines of a CSV text as its reader takes them, with the quote characters taken since the last `reset`:
    an odd count after a rejected row means the reader stopped inside a quoted field, whose remaining lines
    `skip_rest_of_field` passes over (a doubled quote inside a field adds two)."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines
        self.quotes = 0

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.quotes += line.count('"')
        return line

    def reset(self) -> None:
        self.quotes = 0

    def skip_rest_of_field(self) -> None:
        while self.quotes % 2:
            try:
                next(self)
            except StopIteration:
                break
        self.quotes = 0


def iter_csv(uri: str, max_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[tuple[str, Any] | InvalidRecord]:
    """CSV rows as dicts keyed by the header, ``("row N", dict)`` (N counts data rows from 1).

    A row the parser rejects (a field over `max_bytes`, a stray quote), one with more fields than the
    header or bytes that are not UTF-8 is its own record (``malformed_csv``, ``bad_encoding``) and reading
    goes on at the next row: where the rejected row stopped inside a quoted field, after the line that closes
    it. A header naming one column twice is one record for the whole file: which of the two values a row
    means cannot be told.
    """
    csv.field_size_limit(min(max_bytes, sys.maxsize))
    try:
        with open_binary(uri) as f:
            lines = _QuoteCountingLines(io.TextIOWrapper(f, encoding="utf-8-sig", errors="surrogateescape", newline=""))
            reader = csv.DictReader(lines)
            try:
                header = reader.fieldnames or []
            except csv.Error as exc:
                yield InvalidRecord("malformed_csv", f"header: {exc}", "row 0", uri)
                return
            problem = _header_problem(header)
            if problem:
                yield InvalidRecord(*problem, "row 0", uri)
                return
            row = 0
            while True:
                lines.reset()
                try:
                    record = next(reader)
                except StopIteration:
                    return
                except csv.Error as exc:
                    row += 1
                    yield InvalidRecord("malformed_csv", str(exc), f"row {row}", uri)
                    lines.skip_rest_of_field()
                    continue
                row += 1
                if None in record:
                    yield InvalidRecord("malformed_csv", "more fields than the header", f"row {row}", uri)
                    continue
                if any(isinstance(v, str) and _ESCAPED_BYTE.search(v) for v in record.values()):
                    yield InvalidRecord("bad_encoding", "not UTF-8", f"row {row}", uri)
                    continue
                yield f"row {row}", record
    except (EOFError, zstandard.ZstdError, OSError) as exc:
        yield stream_failure(exc, "document", uri)


def _header_problem(header: list[str]) -> tuple[str, str] | None:
    """Why a CSV header cannot key its rows: bytes that are not UTF-8, or a column named twice."""
    if any(_ESCAPED_BYTE.search(name) for name in header):
        return "bad_encoding", "header: not UTF-8"
    seen: set[str] = set()
    for name in header:
        if name in seen:
            return "malformed_csv", f"column {name!r} appears twice in the header"
        seen.add(name)
    return None


def iter_parquet(uri: str, max_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[tuple[str, Any] | InvalidRecord]:
    """Parquet rows as dicts, read a row group at a time, ``("row N", dict)`` (0-based N).

    A row group that cannot be decoded (corrupt pages, a checksum or compression failure) is one
    ``malformed_parquet`` record naming its rows; the groups after it are still read.
    """
    import pyarrow.parquet as pq

    fs, path = filesystem(uri)
    try:
        check_link(fs, path)
        f = fs.open(path, "rb")
    except LinkOutsideInput as exc:
        yield InvalidRecord("link_outside_input", str(exc), "document", uri)
        return
    except OSError as exc:
        yield stream_failure(exc, "document", uri)
        return
    with f:
        try:
            pf = pq.ParquetFile(f)
        except Exception as exc:  # pyarrow raises ArrowInvalid/OSError variants for non-parquet bytes
            yield InvalidRecord("malformed_parquet", _first_line(exc), "document", uri)
            return
        start = 0
        for group in range(pf.metadata.num_row_groups):
            rows = pf.metadata.row_group(group).num_rows
            row = start
            try:
                for batch in pf.iter_batches(batch_size=256, row_groups=[group], use_threads=False):
                    for record in batch.to_pylist():
                        yield f"row {row}", record
                        row += 1
            except Exception as exc:  # any failure to decode the group's pages
                where = f"rows {row}-{start + rows - 1}" if rows > 1 else f"row {row}"
                yield InvalidRecord("malformed_parquet", f"row group {group} unreadable: {_first_line(exc)}",
                                    where, uri)
            start += rows


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def iter_container(uri: str, max_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[tuple[str, Any] | InvalidRecord]:
    """Records of any supported container, chosen by the file name, or by the first bytes where the name does not
    say (`container_kind`: a ``.log`` of JSON Lines)."""
    kind = container_kind(uri)
    reader = {"jsonl": iter_jsonl, "json": iter_json, "csv": iter_csv, "parquet": iter_parquet}.get(kind)
    if reader is None:
        what = f"a .{kind} file" if kind else "a file without a suffix"
        yield InvalidRecord("wrong_format", f"{what} that is not JSON Lines, JSON, CSV or Parquet, by its name or its "
                            "first bytes", "document", uri)
        return
    yield from reader(uri, max_bytes)
