"""Compiled loops for the dedup hashes, where NumPy needs many passes.

`stages.dedup` hashes every word of a trajectory (crc32 and adler32 side by side), MinHashes its shingles and
keys its n-grams. With NumPy, the word hashes step all words through one byte position at a time (a dozen
array passes per byte of the longest word), a MinHash builds a table of 128 values per shingle, and the n-gram
keys take two sorts over all of a batch's windows. Compiled by numba, each is one pass over its input: over
one 2 GB-run part, 0.54 s → 0.10 s for the word hashes, 0.44 s → 0.14 s for the signatures and 0.27 s → 0.20 s
for the n-gram keys. The values are the same bits as the NumPy paths' (`stages.dedup` keeps those for small
work; the tests hold them to zlib, to datasketch and to the NumPy paths).

Loading numba and these loops costs a process about 0.5 s and 165 MB, from numba's cache on disk
(``cache=True``; compiling them with the normalization's loops, `stages.normalize_loops`, takes about 16 s, which
``make`` does once per change of their source: `stages.dedup.compile_kernels`), so `stages.dedup` imports this
module only once a process has enough text to hash to gain that back (`stages.dedup.KERNELS_AFTER_BYTES`).
"""

from __future__ import annotations

import numba
import numpy as np

_SPACE = 32
_ADLER = 65521
# adler32's sums reduced at least this often (zlib's NMAX is 5552): b stays far below 2**64 in between
_ADLER_EVERY = 4096


@numba.njit(cache=True, nogil=True)
def word_hashes(buf: np.ndarray, crc_table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each space-separated word of `buf` (uint8) starts, and ``crc32(word) << 32 | adler32(word)``."""
    n = len(buf)
    count = 0
    before = _SPACE
    for i in range(n):
        if buf[i] != _SPACE and before == _SPACE:
            count += 1
        before = buf[i]
    starts = np.empty(count, np.int64)
    out = np.empty(count, np.uint64)
    low = np.uint64(0xFF)
    w = -1
    crc = np.uint64(0)
    a = np.uint64(1)
    b = np.uint64(0)
    run = 0
    inside = False
    for i in range(n + 1):
        if i == n or buf[i] == _SPACE:
            if inside:
                adler = ((b % np.uint64(_ADLER)) << np.uint64(16)) | (a % np.uint64(_ADLER))
                out[w] = ((crc ^ np.uint64(0xFFFFFFFF)) << np.uint64(32)) | adler
                inside = False
            continue
        c = np.uint64(buf[i])
        if not inside:
            w += 1
            starts[w] = i
            inside = True
            crc = np.uint64(0xFFFFFFFF)
            a = np.uint64(1)
            b = np.uint64(0)
            run = 0
        crc = np.uint64(crc_table[(crc ^ c) & low]) ^ (crc >> np.uint64(8))
        a += c
        b += a
        run += 1
        if run == _ADLER_EVERY:
            a %= np.uint64(_ADLER)
            b %= np.uint64(_ADLER)
            run = 0
    return starts, out


@numba.njit(cache=True, nogil=True)
def minhash_sets(values: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MinHash signatures (n × len(a), uint32) of the sets ``values[offsets[i]:offsets[i + 1]]`` (32-bit
    values): ``min((a * fmix32(v) + b) mod 2**32)`` per permutation, all-max for an empty set. Repeats are
    harmless (a minimum)."""
    n = len(offsets) - 1
    perms = len(a)
    mask = np.uint64(0xFFFFFFFF)
    a64 = a.astype(np.uint64)
    b64 = b.astype(np.uint64)
    out = np.empty((n, perms), np.uint32)
    row = np.empty(perms, np.uint64)
    for i in range(n):
        row[:] = mask
        for j in range(offsets[i], offsets[i + 1]):
            h = np.uint64(values[j]) & mask
            h ^= h >> np.uint64(16)
            h = (h * np.uint64(0x85EBCA6B)) & mask
            h ^= h >> np.uint64(13)
            h = (h * np.uint64(0xC2B2AE35)) & mask
            h ^= h >> np.uint64(16)
            for q in range(perms):
                x = (a64[q] * h + b64[q]) & mask
                if x < row[q]:
                    row[q] = x
        for q in range(perms):
            out[i, q] = np.uint32(row[q])
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _fmix64(h):
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


@numba.njit(cache=True, nogil=True)
def ngram_keys(words: np.ndarray, lengths: np.ndarray, n: int, marked: np.ndarray, bitmap: np.ndarray, shift: int,
               m1: np.uint64, m2: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """The distinct n-gram keys of texts stored back to back (`words`, word hashes; text i has ``lengths[i]``
    words), text by text, each text's ascending by first half, as (keys (m, 2), count per text).

    A window's first half is ``fmix64(sum(w[s + j] * m1 ** (n - 1 - j)) + n)`` (mod 2**64, rolled from one
    window to the next), its second the same with `m2`, taken at the window where the first half first occurs.
    A marked text keeps only the first halves whose bit (the top bits, ``key >> shift``) is set in `bitmap`.
    """
    texts = len(lengths)
    total = 0
    for i in range(texts):
        if lengths[i] >= n:
            total += lengths[i] - n + 1
    keys = np.empty((total, 2), np.uint64)
    counts = np.zeros(texts, np.int64)
    longest = 0
    for i in range(texts):
        longest = max(longest, lengths[i] - n + 1)
    firsts = np.empty(max(longest, 0), np.uint64)
    where = np.empty(max(longest, 0), np.int64)
    top = np.uint64(1)
    for _ in range(n - 1):
        top *= m1  # m1 ** (n - 1): the weight of the word that leaves the window
    size = np.uint64(n)
    seven = np.uint64(7)
    one = np.uint8(1)
    ushift = np.uint64(shift)
    out = 0
    start = 0
    for i in range(texts):
        length = lengths[i]
        if length < n:
            start += length
            continue
        h = np.uint64(0)
        for j in range(n):
            h = h * m1 + words[start + j]
        kept = 0
        for s in range(length - n + 1):
            if s:
                h = (h - words[start + s - 1] * top) * m1 + words[start + s + n - 1]
            first = _fmix64(h + size)
            if marked[i]:
                at = first >> ushift
                if not (bitmap[at >> np.uint64(3)] >> np.uint8(at & seven)) & one:
                    continue
            firsts[kept] = first
            where[kept] = s
            kept += 1
        order = np.argsort(firsts[:kept], kind="mergesort")  # stable: a key's first window comes first
        for r in range(kept):
            f = firsts[order[r]]
            if r and f == firsts[order[r - 1]]:
                continue
            s = where[order[r]]
            g = np.uint64(0)
            for j in range(n):
                g = g * m2 + words[start + s + j]
            keys[out, 0] = f
            keys[out, 1] = _fmix64(g + size)
            out += 1
            counts[i] += 1
        start += length
    return keys[:out], counts
