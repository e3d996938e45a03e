"""Exact and near-duplicate trajectories: normalization, content hashes, MinHash signatures, LSH bands, clusters.

Pure functions; the distributed stage (pipeline/dedup_stage.py) runs them as map (hashes per trajectories
part) → shuffle (rows hashed into buckets) → reduce (candidate pairs per bucket) → connected components.

**Normalization** (`normalize_text`) removes what differs between two runs of the same episode, so such
runs hash alike. In this order, each replaced by a fixed token:

- ISO timestamps ``2024-05-01T12:00:03.123Z`` / ``2024-05-01 12:00:03+02:00`` → ``<TS>``;
- dates ``2024-05-01``, ``2024/05/01``, ``5/1/24`` → ``<DATE>``; clock times ``12:00``, ``12:00:03.5`` →
  ``<TIME>``; log dates ``May  1`` / ``May 1, 2024`` (optionally after a weekday) → ``<DATE>``;
- hex addresses of 6+ digits ``0x7f3a2b1c`` → ``0x<ADDR>``; durations ``0.23s``, ``12ms``, ``3µs``,
  ``1m2.5s``, ``1.5 seconds`` → ``<DUR>``; epoch seconds or milliseconds (10 or 13 digits starting with 1,
  as a whole number) → ``<EPOCH>``;
- process ids ``pid=1234`` / ``PID: 1234`` / ``Pid 1234`` → ``pid=<PID>`` and ``sshd[1234]`` (2–7 digits in brackets right
  after a name) → ``sshd[<PID>]``; element indices like ``[12] button`` are kept (they are content);
- temporary paths ``/tmp/tmpab12cd``, ``/tmp/tmp.XyZ123``, ``/var/folders/xx/…/T/``,
  ``pytest-of-user/pytest-12`` → ``<TMP>``;
- every whitespace run → one space.

**Exact key**: blake2b-128 of domain ⊕ the five system fields ⊕ every turn's action and observation, each
normalized, with separators (so the turn structure counts). **Near duplicates**: MinHash over word
shingles (k words, lowercased) of the turns' actions and observations; signatures are datasketch's
``affine32`` scheme (same permutations, same values as ``datasketch.MinHash(scheme="affine32")`` fed with
our shingle hashes), computed for all shingles at once with numpy, or by the compiled loops of
`stages.kernels` in a process with much text to hash (the same values). LSH: b bands of r rows (b = 0 in the
config → datasketch's optimal parameters for the threshold); a candidate pair shares a band key and is
kept when its estimated Jaccard (share of equal signature values) reaches the threshold.

**Survivor rule** of a cluster: most turns, then the longest normalized text, then the smallest traj_id.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from stages.distinct import distinct
from stages.gram_filter import GramFilter
from stages.memo import TextMemo

# --- normalization -----------------------------------------------------------------------------------------

# Every alternative starts after a first digit that is not inside a word or a number: the leading
# character class lets the regex engine skip non-digits quickly (~40 MB/s instead of ~5). The lookahead after
# it holds wherever an alternative matches: after the number's digits comes one of the characters an
# alternative continues with (- / : x m . µ u n or a space), or the number is an epoch of 10 or 13 digits.
# It changes no match, only rejects most numbers (ids, counts, JSON values) before the six alternatives are
# tried at each: a third less time for this pattern over dedup's texts.
_DIGIT_VOLATILE = re.compile(
    r"\d(?<![A-Za-z0-9_.]\d)(?=\d*+[\-/:xm.µun ]|\d{9}(?:\d{3})?(?![\d.]))(?:"
    r"(?P<ts>\d{3}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r"|(?P<date>\d{3}[-/]\d{2}[-/]\d{2}(?!\d)|\d?/\d{1,2}/\d{2,4}(?!\d))"
    r"|(?P<time>\d?:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?![\d:]))"
    r"|(?P<addr>(?<=0)x[0-9a-fA-F]{6,16}(?![0-9a-zA-Z]))"
    r"|(?P<dur>(?:\d*m\d+(?:\.\d+)?s|\d*(?:\.\d+)? ?(?:ms|µs|us|ns)|\d*\.\d+ ?(?:s|sec|secs|seconds))(?![\w=]))"
    r"|(?P<epoch>(?<=1)\d{9}(?:\d{3})?(?:\.\d+)?(?![\d.])))"
)
_DIGIT_TOKENS = {"ts": "<TS>", "date": "<DATE>", "time": "<TIME>", "addr": "0x<ADDR>", "dur": "<DUR>",
                 "epoch": "<EPOCH>"}
_MONTH_DAY = re.compile(
    r"[ADFJMNOS](?<![A-Za-z][ADFJMNOS])(?:(?<=J)an|(?<=F)eb|(?<=M)ar|(?<=A)pr|(?<=M)ay|(?<=J)u[nl]|(?<=A)ug"
    r"|(?<=S)ep|(?<=O)ct|(?<=N)ov|(?<=D)ec)\.? {1,2}\d{1,2}(?!\d)(?:,? \d{4}(?!\d))?"
)
_WEEKDAY_DATE = re.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? <DATE>")
# The three spellings programs print; normalize_text searches only texts that hold one (a case-insensitive
# pattern behind that check would also rewrite "PId: 7", but only in texts that happen to hold "pid" too).
_PID = re.compile(r"(?:pid|PID|Pid)(?<![A-Za-z]...)[=: ]+\d+")
_BRACKET_PID = re.compile(r"\[(?<=[A-Za-z0-9_)]\[)\d{2,7}\]")
_TMP = re.compile(
    r"/tmp/tmp[._]?[A-Za-z0-9_]{6,}|/var/folders/[A-Za-z0-9_]{2}/[A-Za-z0-9_+\-]+/T(?=/)|pytest-of-[\w.-]+/pytest-\d+"
)


# The same patterns for ASCII-only text (most text): `\d` and `\w` then match exactly what re.ASCII's do,
# and the engine tests ASCII classes faster than Unicode categories (~15-25% of the time).
_DIGIT_VOLATILE_ASCII = re.compile(_DIGIT_VOLATILE.pattern, re.ASCII)
_TMP_ASCII = re.compile(_TMP.pattern, re.ASCII)


def _digit_token(m: re.Match) -> str:
    return _DIGIT_TOKENS[m.lastgroup]


def normalize_text(text: str) -> str:
    """`text` with volatile fields replaced and whitespace collapsed (see the module docstring)."""
    if not text:
        return ""
    ascii_only = text.isascii()
    return _normalize_rest((_DIGIT_VOLATILE_ASCII if ascii_only else _DIGIT_VOLATILE).sub(_digit_token, text),
                           ascii_only)


def normalize_many(texts: Sequence[str]) -> list[str]:
    """``[normalize_text(t) for t in texts]``. Where this process has loaded the compiled loops (`_kernels`), two
    scans do most of the work, one over the ASCII texts joined by NULs and one over the others
    (`stages.normalize_loops.normalize_texts`): the digit fields and log dates of every text, and the whitespace
    of every text that can hold no other field. The few others (that may hold a process id or a temporary path)
    get the other regular expressions. A text that holds a NUL is normalized alone."""
    if _kernels(0) is None:
        return [normalize_text(t) for t in texts]
    from stages import digit_fields, normalize_loops

    out: list[str | None] = [None] * len(texts)
    ascii_only = [t.isascii() for t in texts]
    for ascii_group in (True, False):
        index = [i for i, t in enumerate(texts) if ascii_only[i] == ascii_group and t and "\x00" not in t]
        if not index:
            continue
        joined = "\x00".join(texts[i] for i in index)
        if ascii_group:
            codes = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
            table = digit_fields.ASCII_TABLE
        else:
            codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            table = digit_fields.classes_of(codes)
        made, pending = normalize_loops.normalize_texts(codes, table)
        made = (made.tobytes().decode("ascii") if ascii_group else
                made.tobytes().decode("utf-32-le", "surrogatepass")).split("\x00")
        for i, text, rest in zip(index, made, pending.tolist(), strict=True):
            out[i] = _normalize_tail(text, ascii_group) if rest else text
    return [normalize_text(t) if done is None else done for t, done in zip(texts, out, strict=True)]


def _normalize_rest(text: str, ascii_only: bool) -> str:
    """`normalize_text` after the digit fields."""
    text = _MONTH_DAY.sub("<DATE>", text)
    if "<DATE>" in text:
        text = _WEEKDAY_DATE.sub("<DATE>", text)
    return _normalize_tail(text, ascii_only)


def _normalize_tail(text: str, ascii_only: bool) -> str:
    """`normalize_text` after the digit fields and the log dates."""
    if "pid" in text or "PID" in text or "Pid" in text:
        text = _PID.sub("pid=<PID>", text)
    if "[" in text:
        text = _BRACKET_PID.sub("[<PID>]", text)
    if "/tmp/tmp" in text or "/var/folders/" in text or "pytest-of-" in text:
        text = (_TMP_ASCII if ascii_only else _TMP).sub("<TMP>", text)
    return " ".join(text.split())


class NormalizeMemo(TextMemo[str]):
    """`normalize_text` that keeps the results of recent texts (`stages.memo.TextMemo`): normalizing a text is
    regular-expression work in proportion to its length, and agent logs repeat whole texts. The kept texts and
    results count their characters against `budget`."""

    def __init__(self, budget: int = 4 << 20, longest: int = 1 << 16) -> None:
        super().__init__(normalize_text, budget, longest, many=normalize_many)


def turn_texts(turns: Iterable[dict]) -> list[str]:
    """Actions and observations of the turns, in order (the text shingles and n-grams are taken from)."""
    out = []
    for t in turns:
        out.append(t.get("action") or "")
        out.append(t.get("observation") or "")
    return out


def words_of(texts: Iterable[str], normalized: bool = False) -> list[bytes]:
    """Lowercased words (UTF-8 bytes) of the texts, normalized first unless they already are, in order."""
    words: list[bytes] = []
    for text in texts:
        if text:
            text = text if normalized else normalize_text(text)
            words.extend(text.lower().encode("utf-8", "surrogatepass").split())
    return words


def exact_content(domain: str, system: dict, turns: Sequence[dict], normalized_turns: Sequence[str] | None = None,
                  normalize: Callable[[str], str] = normalize_text) -> str:
    """The normalized text the exact key hashes (also measured for the survivor rule).

    `normalized_turns`: `turn_texts(turns)` already normalized, when the caller has them; `normalize`:
    `normalize_text` or a function equal to it (a `NormalizeMemo`).
    """
    norm = list(normalized_turns) if normalized_turns is not None else [normalize(t) for t in turn_texts(turns)]
    fixed = [normalize(t) for t in system_texts(system)]
    parts = [domain, *fixed[: len(_SYSTEM_FIELDS)]]
    parts += [fixed[i] + "\x1e" + fixed[i + 1] for i in range(len(_SYSTEM_FIELDS), len(fixed), 2)]
    parts += [norm[i] + "\x1e" + norm[i + 1] for i in range(0, len(norm), 2)]
    return "\x1f".join(parts)


_SYSTEM_FIELDS = ("task_description", "action_space", "initial_state", "simulation_instruction")


def system_texts(system: dict) -> list[str]:
    """The system texts `exact_content` normalizes, in its order: four fields, then each demonstration's action
    and observation."""
    texts = [system.get(name) or "" for name in _SYSTEM_FIELDS]
    for d in system.get("demonstrations") or []:
        texts += (d.get("action") or "", d.get("observation") or "")
    return texts


def exact_key(content: str) -> tuple[int, int]:
    """A 128-bit key of the exact content, as two unsigned 64-bit integers."""
    digest = hashlib.blake2b(content.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")


# --- word-window hashes --------------------------------------------------------------------------------------

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)


def _fmix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def word_hashes(words: Sequence[bytes]) -> np.ndarray:
    """A 64-bit hash per word (crc32 and adler32 side by side), the same on every machine and process."""
    crc = np.fromiter(map(zlib.crc32, words), dtype=np.uint64, count=len(words))
    adler = np.fromiter(map(zlib.adler32, words), dtype=np.uint64, count=len(words))
    return (crc << np.uint64(32)) | adler


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> np.uint32(1)) ^ np.uint32(0xEDB88320), table >> np.uint32(1))
    return table.astype(np.uint32)


_CRC = _crc_table()
_LONG_WORD = 48  # bytes; longer words (rare) are hashed one by one by zlib

# The compiled word hashes, MinHash and n-gram keys (`stages.kernels`) from the point where a process has this
# many bytes of text to hash, counted as it hashes them and as tasks announce them (`expect_text`). Loading numba
# and the compiled loops costs a process about 0.5 s (and 165 MB); they save about 25 ms per MB of text, so they
# pay off from about 20 MB on. A run of a few MB per process never loads them; each map task of a 2 GB run
# hashes about 40 MB and loads them before its first batch.
KERNELS_AFTER_BYTES = 32 << 20
_hashed_bytes = 0
_announced = 0  # bytes counted by `expect_text` that the hashing has not yet reached (not counted twice)
_compiled = None
_forced: bool | None = None  # `use_compiled`


def use_compiled(choice: bool | None) -> None:
    """The compiled loops in this process always (True), never (False), or by the rule above (None, the
    default). The values are the same either way; the benchmarks time each path."""
    global _forced
    _forced = choice
    if choice:
        _load_kernels()


def _load_kernels():
    global _compiled
    if _compiled is None:
        from stages import kernels

        _compiled = kernels
    return _compiled


def _kernels(work: int):
    """`stages.kernels` once this process has counted `KERNELS_AFTER_BYTES` of text, `work` bytes included;
    else None (the NumPy paths, which give the same values)."""
    global _hashed_bytes
    if _forced is False:
        return None
    if _compiled is None:
        _hashed_bytes += work
        if _hashed_bytes < KERNELS_AFTER_BYTES:
            return None
    return _load_kernels()


def expect_text(size: int) -> None:
    """Count `size` bytes of text this process is about to hash: a task that knows its input's size says so
    before its first batch, so that a large task hashes all of its batches with the compiled loops. The hashing
    of those bytes is then not counted again."""
    global _announced
    _kernels(size)
    _announced += size


def _count_hashed(size: int):
    """`_kernels` for `size` bytes being hashed now, less what `expect_text` counted already."""
    global _announced
    counted = min(size, _announced)
    _announced -= counted
    return _kernels(size - counted)


def text_word_hashes(texts: Iterable[str], normalized: bool = False) -> np.ndarray:
    """``word_hashes(words_of(texts, normalized))`` without a bytes object per word (see `text_word_hashes_many`)."""
    return text_word_hashes_many([texts], normalized)[0]


def text_word_hashes_many(groups: Iterable[Iterable[str]], normalized: bool = False) -> list[np.ndarray]:
    """``word_hashes(words_of(texts, normalized))`` of each group of texts, computed together.

    All texts are lowercased and encoded into one buffer with a space between them; crc32 and adler32 of
    every word are then stepped byte by byte for all words at once (longest first, so the words still
    running are a prefix), a few numpy calls per byte position instead of two calls per word.
    """
    groups = list(groups)
    if not groups:
        return []
    parts = [" ".join(t if normalized else normalize_text(t) for t in texts if t).lower().encode("utf-8", "surrogatepass")
             for texts in groups]
    # a normalized text has single spaces and no other whitespace, and lowercasing adds none
    buf = np.frombuffer(b" ".join(parts), dtype=np.uint8)
    part_starts = np.cumsum([len(p) + 1 for p in parts[:-1]], dtype=np.int64)
    compiled = _count_hashed(len(buf))
    starts, hashes = compiled.word_hashes(buf, _CRC) if compiled else _buffer_word_hashes(buf)
    return np.split(hashes, np.searchsorted(starts, part_starts))


def _buffer_word_hashes(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each space-separated word of `buf` starts, and its `word_hashes` value."""
    # the words lie between consecutive spaces (and the buffer's ends); empty runs (two spaces) are no words
    spaces = np.flatnonzero(buf == 32)
    bounds = np.empty(len(spaces) + 2, dtype=np.int64)
    bounds[0], bounds[1:-1], bounds[-1] = -1, spaces, len(buf)
    starts, ends = bounds[:-1] + 1, bounds[1:]
    word = ends > starts
    starts, ends = starts[word], ends[word]  # word i is buf[starts[i]:ends[i]]
    lengths = ends - starts
    out = np.empty(len(starts), dtype=np.uint64)
    # longest first; the long words (hashed apart) in one group: a 16-bit key, which NumPy sorts by radix
    order = np.argsort(-np.minimum(lengths, _LONG_WORD + 1).astype(np.int16), kind="stable")
    long = order[: int(np.count_nonzero(lengths > _LONG_WORD))]
    raw = buf.tobytes() if len(long) else b""
    for i in long.tolist():
        word = raw[starts[i] : ends[i]]
        out[i] = (zlib.crc32(word) << 32) | zlib.adler32(word)
    order = order[len(long) :]
    first, size = starts[order], lengths[order]
    crc = np.full(len(order), 0xFFFFFFFF, dtype=np.uint32)
    a = np.ones(len(order), dtype=np.uint32)
    b = np.zeros(len(order), dtype=np.uint32)
    # running[j]: how many words have more than j bytes (a prefix, since `size` is descending)
    running = np.searchsorted(-size, -np.arange(1, (int(size[0]) if len(size) else 0) + 1), side="right")
    for j, m in enumerate(running.tolist()):  # the m longest words have a byte at position j
        byte = buf[first[:m] + j]
        crc[:m] = _CRC[(crc[:m] ^ byte) & 0xFF] ^ (crc[:m] >> np.uint32(8))
        a[:m] += byte
        b[:m] += a[:m]
    adler = ((b % 65521).astype(np.uint64) << np.uint64(16)) | (a % 65521).astype(np.uint64)
    out[order] = ((crc ^ np.uint32(0xFFFFFFFF)).astype(np.uint64) << np.uint64(32)) | adler
    return starts, out


def window_hashes(hashes: np.ndarray, k: int, multiplier: np.uint64 = _M1) -> np.ndarray:
    """A mixed 64-bit hash of every run of k consecutive word hashes (the whole text when it is shorter)."""
    n = len(hashes)
    if k < 1:
        raise ValueError(f"a window has at least one word, not {k}")
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    k = min(k, n)
    with np.errstate(over="ignore"):
        h = _polynomial_windows(np.asarray(hashes, dtype=np.uint64), k, multiplier)
    return _fmix64(h + np.uint64(k))


def _polynomial_windows(words: np.ndarray, k: int, multiplier: np.uint64) -> np.ndarray:
    """``sum(words[s + i] * multiplier ** (k - 1 - i) for i < k)`` (mod 2**64) of every window s of k words.

    Built from the windows of 1, 2, 4, ... words: a window of a + b words is the one of its first a words
    times ``multiplier ** b`` plus the one of its last b, so k words take two passes per bit of k and per
    doubling (8 for 13 words) instead of two per word (26), with the same values.
    """
    n = len(words)
    out, length = None, 0  # windows of `length` words: the bits of k taken so far
    part, size, scale = words, 1, multiplier  # windows of `size` words (a power of two); scale = multiplier ** size
    while True:
        if k & size:
            if out is None:
                out, length = part, size
            else:
                count = n - (length + size) + 1
                out = out[:count] * scale + part[length : length + count]
                length += size
        if 2 * size > k:
            return out
        count = len(part) - size
        part = part[:count] * scale + part[size : size + count]
        scale, size = scale * scale, 2 * size


def window_hashes_at(hashes: np.ndarray, k: int, at: np.ndarray, multiplier: np.uint64 = _M1) -> np.ndarray:
    """``window_hashes(hashes, k, multiplier)[at]`` for windows of k words that `hashes` holds whole: only
    those windows are hashed (fewer than all, when a filter has dropped most)."""
    h = np.zeros(len(at), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i in range(k):
            h = h * multiplier + hashes[at + i]
    return _fmix64(h + np.uint64(k))


def shingle_hashes(hashes: np.ndarray, k: int) -> np.ndarray:
    """32-bit hashes of the k-word shingles, from `word_hashes` (what a MinHash is updated with; repeats are harmless)."""
    return (window_hashes(hashes, k) >> np.uint64(32)).astype(np.uint32)


def shingles_many(texts: Sequence[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """`shingle_hashes` of many texts (their `word_hashes`) stored back to back, and the offsets of each text's.

    The windows are hashed once over all texts side by side and those that cross from one text into the
    next are dropped, so a batch costs a dozen numpy calls instead of a dozen per text; a text shorter
    than k words (one shingle of its own length) is hashed on its own.
    """
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    counts = np.where(lengths >= k, lengths - k + 1, np.minimum(lengths, 1))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    values = np.empty(int(offsets[-1]), dtype=np.uint32)
    long = lengths >= k
    if long.any():
        words = np.concatenate(texts)
        starts = np.zeros(len(texts), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        # window w of the concatenation starts at word w; text i's own windows are starts[i] .. + counts[i]
        first = np.repeat(starts[long] - offsets[:-1][long], counts[long])
        taken = np.flatnonzero(np.repeat(long, counts))  # positions in `values` of the long texts' shingles
        windows = window_hashes(words, k)
        values[taken] = (windows[taken + first] >> np.uint64(32)).astype(np.uint32)
    for i in np.flatnonzero((lengths > 0) & ~long).tolist():
        values[offsets[i]] = shingle_hashes(texts[i], k)[0]
    return values, offsets


def ngram_keys(hashes: np.ndarray, n: int) -> np.ndarray:
    """Distinct 128-bit keys of the n-word n-grams, from `word_hashes`, as an (m, 2) uint64 array.

    A text shorter than n words has none.
    """
    if len(hashes) < n:
        return np.zeros((0, 2), dtype=np.uint64)
    first = window_hashes(hashes, n, _M1)
    # Distinct by the first half: two different n-grams of one text agreeing on 64 bits do not happen in practice.
    _, index = np.unique(first, return_index=True)
    return np.stack([first[index], window_hashes(hashes, n, _M2)[index]], axis=1)


def ngram_keys_many(texts: Sequence[np.ndarray], n: int, grams: GramFilter | None = None,
                    filtered: Sequence[bool] = ()) -> list[np.ndarray]:
    """`ngram_keys` of many texts (their `word_hashes`), computed together: the same arrays.

    As in `shingles_many`, the windows are hashed once over all texts side by side and those that cross from
    one text into the next are dropped; the keys are then made distinct within each text by sorting all windows
    by text and first half, keeping each key's first window as `np.unique` does. Where this process has loaded
    the compiled loops (`stages.kernels`), one loop does all of it, text by text.

    `grams` and `filtered` (per text): the texts marked get only the keys whose first half the filter holds,
    ``keys[grams.holds(keys[:, 0])]``. The windows are filtered before they are made distinct (the same keys: a
    first half is kept or dropped with all its windows), so the sort sees only those kept.
    """
    if not texts:
        return []
    compiled = _kernels(0)
    if compiled is not None:
        marked = np.zeros(len(texts), dtype=bool)
        if grams is not None and len(filtered):
            marked[:] = filtered
        # read-only either way (as a filter read from its file is), so the loop is compiled for one array type
        bitmap = (grams.bitmap if grams is not None else np.zeros(1, dtype=np.uint8)).view()
        bitmap.flags.writeable = False
        keys, per_text = compiled.ngram_keys(
            np.concatenate(texts).astype(np.uint64, copy=False), np.fromiter(map(len, texts), np.int64, len(texts)),
            n, marked, bitmap, 64 - grams.bits if grams is not None else 0, _M1, _M2)
        return [part.copy() for part in np.split(keys, np.cumsum(per_text[:-1]))]
    accept = grams.holds if grams is not None else None
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    counts = np.where(lengths >= n, lengths - n + 1, 0)
    total = int(counts.sum())
    if not total:
        return [np.zeros((0, 2), dtype=np.uint64) for _ in texts]
    words = np.concatenate(texts)
    starts = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    owner = np.repeat(np.arange(len(texts)), counts)  # the text of each kept window
    first_window = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(counts[:-1], out=first_window[1:])
    at = starts[owner] + (np.arange(total) - first_window[owner])  # each kept window's start word
    first = window_hashes(words, n, _M1)[at]
    if accept is not None and any(filtered):
        marked = np.asarray(filtered, dtype=bool)[owner]
        kept = ~marked
        kept[marked] = accept(first[marked])
        owner, at, first = owner[kept], at[kept], first[kept]
        if not len(owner):
            return [np.zeros((0, 2), dtype=np.uint64) for _ in texts]
    # the windows by text, then by first half: one sort of the first halves (not stable: NumPy's fastest), then a
    # stable one by text (a radix sort where the batch has fewer than 32,768 texts). A key's windows are then
    # together, in any order; the least of their positions is its first window, the one `np.unique` keeps.
    order = np.argsort(first)
    order = order[np.argsort(owner[order].astype(np.int16 if len(texts) <= 1 << 15 else np.int64), kind="stable")]
    by_text, by_first = owner[order], first[order]
    starts = np.flatnonzero(np.r_[True, (by_text[1:] != by_text[:-1]) | (by_first[1:] != by_first[:-1])])
    index = np.minimum.reduceat(order, starts)
    keys = np.stack([first[index], window_hashes_at(words, n, at[index], _M2)], axis=1)
    per_text = np.bincount(owner[index], minlength=len(texts))
    # each text's own array, as `ngram_keys` gives: a view would keep the whole batch's keys alive as long as
    # any one text's keys are held (the map's bucket rows hold them until a flush)
    return [part.copy() for part in np.split(keys, np.cumsum(per_text[:-1]))]


# --- MinHash ---------------------------------------------------------------------------------------------

_MAX32 = np.uint32(0xFFFFFFFF)
_CHUNK = 4096


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


@functools.lru_cache(maxsize=8)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutation parameters (a odd, b) for (num_perm, seed)."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def minhash(values: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """The MinHash signature (uint32 × num_perm) of a set of 32-bit values; all-max for an empty set."""
    a, b = permutations(num_perm, seed)
    sig = np.full(num_perm, _MAX32, dtype=np.uint32)
    with np.errstate(over="ignore"):
        for start in range(0, len(values), _CHUNK):
            # (num_perm, chunk) with in-place updates: contiguous rows reduce several times faster.
            table = np.multiply.outer(a, _fmix32(values[start : start + _CHUNK].astype(np.uint32)))
            table += b[:, None]
            sig = np.minimum(sig, table.min(axis=1))
    return sig


def distinct_per_set(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sets stored back to back (as `minhash_many` takes them) with each set's repeated values dropped: the
    32-bit values of each set, ascending, and the new offsets. A signature is a minimum over a set's values,
    so it is the same; the permutation table, 128 values per value, is what costs. The shingles of agent logs
    repeat within a trajectory (a screen, a listing, an error seen again): about half of them in the demo
    corpus, whose signatures of 1.5 million shingles take 0.08 s this way against 0.12 s."""
    n = len(offsets) - 1
    owner = np.repeat(np.arange(n, dtype=np.uint64), np.diff(offsets))
    values = values[int(offsets[0]) : int(offsets[-1])].astype(np.uint32)
    keys = distinct((owner << np.uint64(32)) | values.astype(np.uint64))  # (set, value) pairs, once each
    counts = np.bincount((keys >> np.uint64(32)).astype(np.intp), minlength=n)
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    return keys.astype(np.uint32), new_offsets


def minhash_many(values: np.ndarray, offsets: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """Signatures (n × num_perm) of n sets stored back to back: set i is ``values[offsets[i]:offsets[i + 1]]``.

    Equal to `minhash` of each set. Consecutive sets share one permutation table of up to `_CHUNK`
    values and one segmented minimum, so many small sets cost a few numpy calls instead of a few per set.
    Each set's repeats are dropped first (`distinct_per_set`); the compiled loop (`stages.kernels`), where this
    process has loaded it, takes the sets as they are.
    """
    compiled = _kernels(0)
    if compiled is not None:
        a, b = permutations(num_perm, seed)
        return compiled.minhash_sets(np.asarray(values).astype(np.uint32, copy=False),
                                     np.asarray(offsets, dtype=np.int64), a, b)
    values, offsets = distinct_per_set(values, offsets)
    n = len(offsets) - 1
    a, b = permutations(num_perm, seed)
    out = np.full((n, num_perm), _MAX32, dtype=np.uint32)
    limit = _CHUNK
    i = 0
    with np.errstate(over="ignore"):
        while i < n:
            j = i + 1
            while j < n and offsets[j + 1] - offsets[i] <= limit:
                j += 1
            lo, hi = int(offsets[i]), int(offsets[j])
            if j == i + 1 and hi - lo > limit:  # one large set: the chunked single-set path
                out[i] = minhash(values[lo:hi], num_perm, seed)
            elif hi > lo:
                table = np.multiply.outer(a, _fmix32(values[lo:hi].astype(np.uint32)))
                table += b[:, None]
                sizes = np.diff(offsets[i : j + 1])
                full = np.flatnonzero(sizes)  # empty sets keep the all-max signature
                out[i + full] = np.minimum.reduceat(table, (offsets[i:j][full] - lo).astype(np.intp), axis=1).T
            i = j
    return out


def jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Estimated Jaccard similarity: the share of equal signature values."""
    return float(np.count_nonzero(sig_a == sig_b)) / len(sig_a)


def pairwise_jaccard(sigs: np.ndarray, others: np.ndarray | None = None, rows: int = 64) -> np.ndarray:
    """Estimated Jaccard of every row of `sigs` against every row of `others` (default: itself)."""
    others = sigs if others is None else others
    out = np.empty((len(sigs), len(others)), dtype=np.float32)
    for start in range(0, len(sigs), rows):
        block = sigs[start : start + rows, None, :] == others[None, :, :]
        # a count over the length: the mean of the matches, exactly (a sum of booleans in integers is faster)
        out[start : start + rows] = block.sum(axis=2, dtype=np.int32) / sigs.shape[1]
    return out


@functools.lru_cache(maxsize=32)
def lsh_params(threshold: float, num_perm: int, bands: int = 0) -> tuple[int, int]:
    """(bands, rows per band): given, or datasketch's optimum for the threshold (equal error weights)."""
    if bands:
        if bands > num_perm:
            raise ValueError(f"dedup.bands ({bands}) exceeds dedup.num_perm ({num_perm})")
        return bands, num_perm // bands
    # The same search as datasketch's (b ascending, then r; the first strictly smaller error wins), with the
    # error integrals by Gauss-Legendre quadrature: the integrands are polynomials of degree ≤ num_perm, so
    # num_perm // 2 + 1 nodes integrate them exactly, and importing scipy (seconds per run) is not needed.
    nodes, weights = np.polynomial.legendre.leggauss(num_perm // 2 + 1)
    below = threshold * (nodes + 1) / 2  # the nodes mapped onto [0, threshold] ...
    above = threshold + (1 - threshold) * (nodes + 1) / 2  # ... and onto [threshold, 1]
    best, opt = float("inf"), (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            false_pos = threshold / 2 * float(np.dot(weights, 1 - (1 - below**r) ** b))
            false_neg = (1 - threshold) / 2 * float(np.dot(weights, (1 - above**r) ** b))
            error = false_pos * 0.5 + false_neg * 0.5
            if error < best:
                best, opt = error, (b, r)
    return opt


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """A 64-bit key per band of each signature: (n, bands) for an (n, num_perm) signature matrix."""
    sigs = np.atleast_2d(sigs)
    n = len(sigs)
    view = sigs[:, : bands * rows].reshape(n, bands, rows).astype(np.uint64)
    h = np.broadcast_to(np.arange(1, bands + 1, dtype=np.uint64), (n, bands)).copy()
    with np.errstate(over="ignore"):
        for j in range(rows):
            h = h * _M1 + view[:, :, j]
    return _fmix64(h)


@dataclass(frozen=True)
class Signer:
    """Signature settings of one run: shingle length, permutations, LSH bands."""

    shingle: int = 5
    num_perm: int = 128
    seed: int = 1
    bands: int = 9
    rows: int = 13

    @classmethod
    def from_config(cls, dedup: dict) -> Signer:
        b, r = lsh_params(float(dedup["threshold"]), int(dedup["num_perm"]), int(dedup.get("bands") or 0))
        return cls(int(dedup["shingle"]), int(dedup["num_perm"]), int(dedup["seed"]), b, r)

    def signature(self, words: Sequence[bytes] | np.ndarray) -> np.ndarray:
        """MinHash of a text's shingles, from its words or their `word_hashes`."""
        hashes = words if isinstance(words, np.ndarray) else word_hashes(words)
        return minhash(shingle_hashes(hashes, self.shingle), self.num_perm, self.seed)

    def signatures(self, texts: Sequence[np.ndarray]) -> np.ndarray:
        """`signature` of many texts given by their `word_hashes` (n × num_perm), computed together."""
        values, offsets = shingles_many(texts, self.shingle)
        return minhash_many(values, offsets, self.num_perm, self.seed)


# --- clusters ------------------------------------------------------------------------------------------------


class UnionFind:
    """Disjoint sets over hashable nodes (path halving, union by size)."""

    def __init__(self) -> None:
        self.parent: dict = {}
        self.size: dict = {}

    def find(self, x):
        parent = self.parent
        if x not in parent:
            parent[x] = x
            self.size[x] = 1
            return x
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a, b) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if self.size[ra] < self.size[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.size[ra] += self.size[rb]
        return True

    def groups(self) -> list[list]:
        """Every set of two or more nodes, each sorted, in order of its first node."""
        out: dict = {}
        for x in self.parent:
            out.setdefault(self.find(x), []).append(x)
        return sorted((sorted(g) for g in out.values() if len(g) > 1), key=lambda g: g[0])


def connected_components(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Clusters (sorted lists of two or more nodes) of an undirected edge list."""
    uf = UnionFind()
    for a, b in edges:
        uf.union(a, b)
    return uf.groups()


def unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, axis=0, return_inverse=True)`` of a small 2-D array: the distinct rows in
    lexicographic order and the class of every row. Through tuples, since numpy's structured-row path costs
    milliseconds per call and a reduce task makes one call per LSH band group.
    """
    keys = [tuple(r) for r in rows.tolist()]
    distinct = sorted(set(keys))
    index = {k: i for i, k in enumerate(distinct)}
    inverse = np.fromiter((index[k] for k in keys), dtype=np.int64, count=len(keys))
    classes = np.array(distinct, dtype=rows.dtype).reshape(len(distinct), rows.shape[1])
    return classes, inverse


def band_group_edges(ids: list[str], roles: list[int], sigs: np.ndarray, threshold: float, near: bool) -> list[tuple]:
    """Verified edges among the members of one LSH band group (distinct ids; roles 0 train, 1 eval, 2 reference).

    ``near`` (when `near`): pairs on the same side (train–train, eval–eval) with estimated Jaccard ≥
    `threshold`, reduced to a spanning forest (the clusters are the same, the edge list is linear).
    ``decontam_near``: each training member → the closest eval/reference member at ≥ `threshold` (the
    smallest id among equals).
    Members with identical signatures are compared once (a class), so a group of many copies stays linear.
    """
    order = sorted(range(len(ids)), key=ids.__getitem__)
    ids = [ids[i] for i in order]
    roles = [roles[i] for i in order]
    classes, inverse = unique_rows(sigs[order])
    sim = pairwise_jaccard(classes)
    close = sim >= np.float32(threshold)  # compared as float32, as the estimates are
    members: dict[int, list[int]] = {}
    for i, c in enumerate(inverse.tolist()):
        members.setdefault(c, []).append(i)
    edges: list[tuple] = []
    if near:
        for side in (0, 1):
            firsts: dict[int, int] = {}
            for c in sorted(members):
                same = [i for i in members[c] if roles[i] == side]
                if same:
                    firsts[c] = same[0]
                    edges += [("near", ids[same[0]], ids[i], 1.0) for i in same[1:]]
            # Class pairs in order (x < y, row by row), each joining two trees into one: a spanning forest,
            # complete once every class is in one tree (a group of near copies: then no pair is left to visit).
            uf, cls = UnionFind(), sorted(firsts)
            trees = len(cls)
            for x, c1 in enumerate(cls):
                if trees == 1:
                    break
                row = close[c1].tolist()
                for c2 in cls[x + 1 :]:
                    if row[c2] and uf.union(c1, c2):
                        trees -= 1
                        a, b = sorted((ids[firsts[c1]], ids[firsts[c2]]))
                        edges.append(("near", a, b, float(sim[c1, c2])))
                        if trees == 1:
                            break
    ref_min = {c: min(ids[i] for i in m if roles[i] != 0) for c, m in members.items() if any(roles[i] != 0 for i in m)}
    for c, m in sorted(members.items()):
        trains = [i for i in m if roles[i] == 0]
        hits = [(ref_min[r], float(sim[c, r])) for r in ref_min if close[c, r]]
        if trains and hits:
            witness, jac = min(hits, key=lambda h: (-h[1], h[0]))  # the closest record, then the smallest id
            edges += [("decontam_near", ids[i], witness, jac) for i in trains]
    return edges


def survivor_rank(node: str, turns: int, text_len: int) -> tuple[int, int, str]:
    """Sort key of the survivor rule: most turns, then longest normalized text, then smallest id."""
    return (-turns, -text_len, node)


def cluster_id(members: Iterable[str]) -> str:
    """A stable id of a cluster: a hash of its sorted member ids."""
    return hashlib.sha256("\n".join(sorted(members)).encode()).hexdigest()[:16]


# --- benchmark -------------------------------------------------------------------------------------------


def _synthetic_turns(rng: random.Random, vocab: list[str], turns: int, words: int) -> list[dict]:
    def text(n: int) -> str:
        return " ".join(rng.choice(vocab) for _ in range(n))

    return [{"action": text(12), "observation": f"2024-05-01T12:00:0{i % 10}Z " + text(words)} for i in range(turns)]


def bench_signatures(n: int = 2000, turns: int = 8, words: int = 120) -> float:
    """Trajectories per second (one core) for normalization + shingles + MinHash + band keys.

    Synthetic trajectories of `turns` turns with `words`-word observations (~6 KB of text each).
    """
    rng = random.Random(0)
    vocab = [f"w{rng.randrange(50_000)}" for _ in range(5000)]
    trajs = [_synthetic_turns(rng, vocab, turns, words) for _ in range(n)]
    signer = Signer()
    start = time.perf_counter()
    for first in range(0, n, 64):  # as the dedup map does: signatures and band keys of 64 at a time
        hashes = text_word_hashes_many([turn_texts(t) for t in trajs[first : first + 64]])
        band_keys(signer.signatures(hashes), signer.bands, signer.rows)
    rate = n / (time.perf_counter() - start)
    print(f"near-dup signatures: {rate:.0f} trajectories/s per core")
    return rate


def compile_kernels() -> None:
    """Compile every loop of `stages.kernels`, `stages.digit_fields` and `stages.normalize_loops` for the
    argument types this module gives them, into numba's cache on disk (``make`` does this once per change of
    their source): the first run on a machine then loads them (about 0.3 s a process) instead of compiling them
    in each worker that needs them (about 15 s)."""
    use_compiled(True)
    try:
        texts = ["at 12:00 took 5ms", "é 2024-05-01 ٣ words", "May  1 pid=3"]
        hashes = text_word_hashes_many([normalize_many(texts)], normalized=True)
        Signer(2, 8, 1, 4, 2).signatures(hashes)
        ngram_keys_many(hashes, 2)
        ngram_keys_many(hashes, 2, GramFilter(16), [True])
    finally:
        use_compiled(None)
