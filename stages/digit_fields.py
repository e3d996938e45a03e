"""The digit fields of `stages.dedup.normalize_text` (`_DIGIT_VOLATILE`), found by compiled loops for
`stages.normalize_loops`: each alternative of the pattern in order, with the backtracking ``re`` would do, over
a text's code points (uint8 for ASCII text, else uint32) and a table of their classes (`classes_of`)."""

from __future__ import annotations

import numba
import numpy as np

# What `stages.normalize_loops.normalize_texts` writes for each kind of digit field: the group names of `stages.dedup._DIGIT_VOLATILE`,
# in its order, and their tokens (`stages.dedup._DIGIT_TOKENS`)
FIELD_TOKENS = ("<TS>", "<DATE>", "<TIME>", "0x<ADDR>", "<DUR>", "<EPOCH>")
TOKEN_CODES = np.array([ord(c) for t in FIELD_TOKENS for c in t], np.uint32)
TOKEN_STARTS = np.cumsum(np.array([0] + [len(t) for t in FIELD_TOKENS], np.int64))
_DIGIT, _WORD, _SPACE_CLASS = 1, 2, 4  # a code point's classes: re's \d and \w of a str pattern, str.split's space


def _class_of(c: int) -> int:
    ch = chr(c)
    return ((_DIGIT if ch.isdecimal() else 0) | (_WORD if ch.isalnum() or ch == "_" else 0)
            | (_SPACE_CLASS if ch.isspace() else 0))


def _ascii_classes() -> np.ndarray:
    return np.array([_class_of(c) for c in range(128)], np.uint8)


ASCII_TABLE = _ascii_classes()


def classes_of(codes: np.ndarray) -> np.ndarray:
    """The classes of every code point up to the largest of `codes` (`_DIGIT` for a decimal digit, `_WORD` for
    what re's \\w matches, `_SPACE_CLASS` for what str.split splits at), by code point, as `normalize_texts`
    takes them: those of the code points `codes` holds, 0 for the others (at most 1.1 MB)."""
    table = np.zeros(max(128, int(codes.max()) + 1 if len(codes) else 0), np.uint8)
    table[:128] = ASCII_TABLE
    for c in np.unique(codes[codes > 127]).tolist():
        table[c] = _class_of(c)
    return table


@numba.njit(cache=True, nogil=True)
def is_digit(codes, n, k, table) -> bool:
    """re's \\d at k (False past the end)."""
    if k >= n:
        return False
    c = codes[k]
    if c < 128:
        return 48 <= c <= 57
    return (table[c] & 1) != 0


@numba.njit(cache=True, nogil=True)
def _w(codes, n, k, table) -> bool:
    """re's \\w at k (False past the end)."""
    return k < n and (table[codes[k]] & 2) != 0


@numba.njit(cache=True, nogil=True)
def word_or_dot(c) -> bool:
    """[A-Za-z0-9_.]"""
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 95 or c == 46


@numba.njit(cache=True, nogil=True)
def code_at(codes, n, k) -> int:
    """The code point at k, or 0 past the end (0 is no character any pattern here names)."""
    return codes[k] if k < n else 0


@numba.njit(cache=True, nogil=True)
def digits_end(codes, n, table, k) -> int:
    """The end of the run of digits from k."""
    while is_digit(codes, n, k, table):
        k += 1
    return k


@numba.njit(cache=True, nogil=True)
def field_at(codes, n, p, table):
    """(kind, end) of the digit field that starts at p (whose lookbehind holds), kind -1 for none: the
    alternatives of `stages.dedup._DIGIT_VOLATILE` in order, each with the backtracking ``re`` would do (written
    out where it can change the end; most quantifiers here end where the next character cannot continue them)."""
    i = p + 1
    q = digits_end(codes, n, table, i)  # \d*+ after the first digit
    after = code_at(codes, n, q)
    digits = q - i
    # the lookahead: [\-/:xm.µun ] after the digits, or an epoch's 9 or 12 more digits not followed by a dot
    if not (after == 45 or after == 47 or after == 58 or after == 120 or after == 109 or after == 46
            or after == 181 or after == 117 or after == 110 or after == 32 or digits == 9 or digits == 12):
        return -1, 0
    # ts: \d{3}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?
    if (digits >= 3 and is_digit(codes, n, i, table) and is_digit(codes, n, i + 1, table) and is_digit(codes, n, i + 2, table) and code_at(codes, n, i + 3) == 45
            and is_digit(codes, n, i + 4, table) and is_digit(codes, n, i + 5, table) and code_at(codes, n, i + 6) == 45 and is_digit(codes, n, i + 7, table)
            and is_digit(codes, n, i + 8, table) and (code_at(codes, n, i + 9) == 84 or code_at(codes, n, i + 9) == 32)
            and is_digit(codes, n, i + 10, table) and is_digit(codes, n, i + 11, table) and code_at(codes, n, i + 12) == 58 and is_digit(codes, n, i + 13, table)
            and is_digit(codes, n, i + 14, table)):
        e = i + 15
        if code_at(codes, n, e) == 58 and is_digit(codes, n, e + 1, table) and is_digit(codes, n, e + 2, table):
            e += 3
            f = code_at(codes, n, e)
            if (f == 46 or f == 44) and is_digit(codes, n, e + 1, table):
                e = digits_end(codes, n, table, e + 1)
        z = code_at(codes, n, e)
        if z == 90:
            e += 1
        elif (z == 43 or z == 45) and is_digit(codes, n, e + 1, table) and is_digit(codes, n, e + 2, table):
            if code_at(codes, n, e + 3) == 58 and is_digit(codes, n, e + 4, table) and is_digit(codes, n, e + 5, table):
                e += 6
            elif is_digit(codes, n, e + 3, table) and is_digit(codes, n, e + 4, table):
                e += 5
        return 0, e
    # date: \d{3}[-/]\d{2}[-/]\d{2}(?!\d)
    if digits >= 3:
        s1 = code_at(codes, n, i + 3)
        s2 = code_at(codes, n, i + 6)
        if ((s1 == 45 or s1 == 47) and is_digit(codes, n, i + 4, table) and is_digit(codes, n, i + 5, table) and (s2 == 45 or s2 == 47)
                and is_digit(codes, n, i + 7, table) and is_digit(codes, n, i + 8, table) and not is_digit(codes, n, i + 9, table)):
            return 1, i + 9
    # date: \d?/\d{1,2}/\d{2,4}(?!\d)
    j = i + 1 if is_digit(codes, n, i, table) else i  # after \d? (with a digit there, the path without one fails at once)
    if code_at(codes, n, j) == 47:
        k = -1
        if is_digit(codes, n, j + 1, table) and is_digit(codes, n, j + 2, table) and code_at(codes, n, j + 3) == 47:
            k = j + 4
        elif is_digit(codes, n, j + 1, table) and code_at(codes, n, j + 2) == 47:
            k = j + 3
        if k >= 0:
            r = digits_end(codes, n, table, k) - k
            if 2 <= r <= 4:
                return 1, k + r
    # time: \d?:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?![\d:])
    if code_at(codes, n, j) == 58 and is_digit(codes, n, j + 1, table) and is_digit(codes, n, j + 2, table):
        k = j + 3
        if code_at(codes, n, k) == 58 and is_digit(codes, n, k + 1, table) and is_digit(codes, n, k + 2, table):
            m = k + 3
            f = code_at(codes, n, m)
            if (f == 46 or f == 44) and is_digit(codes, n, m + 1, table):
                e = digits_end(codes, n, table, m + 1)
                if code_at(codes, n, e) != 58:
                    return 2, e
            if not is_digit(codes, n, m, table) and code_at(codes, n, m) != 58:
                return 2, m
        if not is_digit(codes, n, k, table) and code_at(codes, n, k) != 58:
            return 2, k
    # addr: (?<=0)x[0-9a-fA-F]{6,16}(?![0-9a-zA-Z])
    if codes[p] == 48 and code_at(codes, n, i) == 120:
        h = i + 1
        while h < n and ((48 <= codes[h] <= 57) or (97 <= codes[h] <= 102) or (65 <= codes[h] <= 70)):
            h += 1
        z = code_at(codes, n, h)
        if 6 <= h - i - 1 <= 16 and not ((48 <= z <= 57) or (97 <= z <= 122) or (65 <= z <= 90)):
            return 3, h
    # dur: (?:\d*m\d+(?:\.\d+)?s|\d*(?:\.\d+)? ?(?:ms|µs|us|ns)|\d*\.\d+ ?(?:s|sec|secs|seconds))(?![\w=])
    if after == 109 and is_digit(codes, n, q + 1, table):
        b = digits_end(codes, n, table, q + 1)
        if code_at(codes, n, b) == 46:
            if is_digit(codes, n, b + 1, table):
                c = digits_end(codes, n, table, b + 1)
                if code_at(codes, n, c) == 115 and not _word_or_eq(codes, n, table, c + 1):
                    return 4, c + 1
        elif code_at(codes, n, b) == 115 and not _word_or_eq(codes, n, table, b + 1):
            return 4, b + 1
    j = q
    if after == 46 and is_digit(codes, n, q + 1, table):
        j = digits_end(codes, n, table, q + 1)
    u = j + 1 if code_at(codes, n, j) == 32 else j
    f = code_at(codes, n, u)
    if ((f == 109 or f == 181 or f == 117 or f == 110) and code_at(codes, n, u + 1) == 115
            and not _word_or_eq(codes, n, table, u + 2)):
        return 4, u + 2
    if after == 46 and is_digit(codes, n, q + 1, table) and code_at(codes, n, u) == 115:
        if not _word_or_eq(codes, n, table, u + 1):
            return 4, u + 1
        if code_at(codes, n, u + 1) == 101 and code_at(codes, n, u + 2) == 99:
            if not _word_or_eq(codes, n, table, u + 3):
                return 4, u + 3
            if code_at(codes, n, u + 3) == 115 and not _word_or_eq(codes, n, table, u + 4):
                return 4, u + 4
            if (code_at(codes, n, u + 3) == 111 and code_at(codes, n, u + 4) == 110 and code_at(codes, n, u + 5) == 100
                    and code_at(codes, n, u + 6) == 115 and not _word_or_eq(codes, n, table, u + 7)):
                return 4, u + 7
    # epoch: (?<=1)\d{9}(?:\d{3})?(?:\.\d+)?(?![\d.])
    if codes[p] == 49 and (digits == 9 or digits == 12):
        if after != 46:
            return 5, q
        if is_digit(codes, n, q + 1, table):
            e = digits_end(codes, n, table, q + 1)
            if code_at(codes, n, e) != 46:
                return 5, e
    return -1, 0


@numba.njit(cache=True, nogil=True)
def _word_or_eq(codes, n, table, k) -> bool:
    """[\\w=] at k (False past the end)."""
    return k < n and (_w(codes, n, k, table) or codes[k] == 61)


@numba.njit(cache=True, nogil=True)
def is_space(codes, k, table) -> bool:
    c = codes[k]
    if c < 128:
        return c == 32 or 9 <= c <= 13 or 28 <= c <= 31
    return (table[c] & 4) != 0
