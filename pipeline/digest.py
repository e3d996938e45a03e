"""sha256 of output files: hashed as they are written (`HashingFile`), or read back in blocks (`file_sha256`)."""

from __future__ import annotations

import hashlib

import fsspec


class HashingFile:
    """A file being written that hashes (sha256) every byte passed through it."""

    def __init__(self, raw) -> None:
        self.raw = raw
        self.sha256 = hashlib.sha256()

    def write(self, data) -> int:
        self.sha256.update(data)
        return self.raw.write(data)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


def file_sha256(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """sha256 (hex) of a file, read in blocks."""
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
