"""Bytes of one part of a file: raw chunks from an offset, zstd frame boundaries, bounded inflation.

Byte-range reading (stages/ingest/ranges.py) cuts ``.zst`` files only between frames: the seek
table of the zstd seekable format gives them when present, else the frame and block headers are
walked (a few bytes per 128 KiB block). A layout that cannot be trusted keeps the file whole.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import zstandard

from stages.ingest.reading import _STEP_OUTPUT, _ZSTD_STEP_INPUT, _ZstdFrames, filesystem

_CHUNK = 1 << 20
_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MASK, _SKIPPABLE_MAGIC = 0xFFFFFFF0, 0x184D2A50
_SEEKABLE_FOOTER_MAGIC = 0x8F92EAB1


def zstd_frames(uri: str, size: int) -> list[tuple[int, int]]:
    """``(offset, compressed size)`` of each data frame; ``[]`` when the layout cannot be trusted
    (a truncated or unknown frame), which keeps the file whole and leaves errors to the reader."""
    fs, path = filesystem(uri)
    with fs.open(path, "rb") as f:
        table = _seek_table(f, size)
        return table if table is not None else _walk_frames(f, size)


def _seek_table(f, size: int) -> list[tuple[int, int]] | None:
    """Frames from the trailing seek table of the zstd seekable format, if the file has one."""
    if size < 17:
        return None
    f.seek(size - 9)
    count, descriptor, magic = struct.unpack("<IBI", f.read(9))
    if magic != _SEEKABLE_FOOTER_MAGIC:
        return None
    entry = 12 if descriptor & 0x80 else 8
    table_frame = 8 + count * entry + 9
    if table_frame > size:
        return None
    f.seek(size - table_frame)
    data = f.read(table_frame)
    frames, offset = [], 0
    for i in range(count):
        csize = struct.unpack_from("<I", data, 8 + i * entry)[0]
        frames.append((offset, csize))
        offset += csize
    return frames if offset == size - table_frame else None


def _walk_frames(f, size: int) -> list[tuple[int, int]]:
    """Frame boundaries from frame and block headers (reads a few bytes per 128 KiB block)."""
    frames, offset = [], 0
    while offset < size:
        f.seek(offset)
        head = f.read(18)
        if len(head) < 8:
            return []
        magic = struct.unpack_from("<I", head)[0]
        if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
            offset += 8 + struct.unpack_from("<I", head, 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            return []
        try:
            pos = offset + zstandard.frame_header_size(head)
            checksum = zstandard.get_frame_parameters(head).has_checksum
        except zstandard.ZstdError:
            return []
        while True:
            f.seek(pos)
            block = f.read(3)
            if len(block) < 3:
                return []
            header = int.from_bytes(block, "little")
            kind, bsize = (header >> 1) & 3, header >> 3
            if kind == 3:
                return []
            pos += 3 + (1 if kind == 1 else bsize)
            if header & 1:
                break
        end = pos + (4 if checksum else 0)
        if end > size:
            return []
        frames.append((offset, end - offset))
        offset = end
    return frames


def raw_chunks(uri: str, start: int, stop: int | None = None) -> Iterator[bytes]:
    """The file's bytes from offset `start` to `stop` (or the end), 1 MiB at a time. A file that ends before
    `stop` (it was cut short since its ranges were planned) raises `EOFError`, which the readers report as a
    damaged stream, so its records are quarantined, not silently missing."""
    fs, path = filesystem(uri)
    with fs.open(path, "rb") as raw:
        raw.seek(start)
        remaining = None if stop is None else stop - start
        while remaining is None or remaining > 0:
            chunk = raw.read(_CHUNK if remaining is None else min(_CHUNK, remaining))
            if not chunk:
                if remaining:
                    raise EOFError(f"the file ends {remaining} bytes before byte {stop}, where it ended when the run "
                                   "began: it was cut short while the run read it")
                return
            if remaining is not None:
                remaining -= len(chunk)
            yield chunk


def inflate(chunks: Iterator[bytes], compression: str | None) -> Iterator[bytes]:
    """Decompressed bytes of `chunks` (starting at a frame for zstd; frames follow one another),
    decoded in bounded steps as `open_binary` does, so a bomb never expands in one piece."""
    if compression != "zstd":
        yield from chunks
        return
    frames = _ZstdFrames()
    for chunk in chunks:
        view = memoryview(chunk)
        for i in range(0, len(chunk), _ZSTD_STEP_INPUT):
            piece = bytes(view[i : i + _ZSTD_STEP_INPUT])
            while piece:
                out, piece = frames.step(piece, _STEP_OUTPUT)
                if out:
                    yield out
    if frames.in_frame:
        raise EOFError("compressed stream ended before the end of its frame")
