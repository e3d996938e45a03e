"""The compiled loop of `stages.dedup.normalize_many`, loaded with `stages.kernels` (the same rule).

Before any hash, every text is normalized (`stages.dedup.normalize_text`: six regular expressions, then the
whitespace collapsed), which was a third of a dedup map task. `normalize_texts` does it for a batch's texts
joined by NULs: the digit fields (`stages.digit_fields`), then, in a text that may hold one, the log dates and the
weekdays before them, each pattern followed by hand with the backtracking ``re`` would do; then the whitespace.
Only a text that may hold a process id or a temporary path (none in the benchmark corpus) is left to the last
regular expressions. Over the 48,887 distinct texts (21.4 MB) of 4 map tasks of a 0.2 GB run: 0.56 s → 0.29 s;
16 map tasks: 7.0 s → 5.0 s. The tests hold the results to the regular expressions' on generated texts of every
field, on any text, and on every text of the real logs.
"""

from __future__ import annotations

import numba
import numpy as np

from stages.digit_fields import (
    TOKEN_CODES,
    TOKEN_STARTS,
    code_at,
    digits_end,
    field_at,
    is_digit,
    is_space,
    word_or_dot,
)

# What `normalize_texts` looks for in a text before its passes: a log date or a weekday's name (`_DATES`: a
# month's name, an optional dot, one or two spaces and a digit; or a weekday's name), which the date passes
# replace; a process id ("pid", "PID", "Pid", or "[" after a name and before a digit) or a temporary path
# (`_RARE`), which the regular expressions replace.
_DATES, _RARE = 1, 2
_NAMES = np.array([(ord(w[0]) << 16) | (ord(w[1]) << 8) | ord(w[2]) for w in (
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", "pid", "PID", "Pid")], np.int64)
_MONTHS, _WEEKDAYS = 12, 19  # _NAMES[:12] are months, then weekdays up to 19, then the process ids
_NAME_STARTS = np.zeros(128 * 128, np.bool_)  # the first two characters of a name, for a quick test
_NAME_STARTS[[((w >> 16) << 7) | ((w >> 8) & 0xFF) for w in _NAMES.tolist()]] = True
_TMP_PATHS = [np.array([ord(c) for c in w], np.uint32) for w in ("/tmp/tmp", "/var/folders/", "pytest-of-")]
_TMP_TMP, _TMP_VAR, _TMP_PYTEST = _TMP_PATHS
_DATE_TOKEN = np.array([ord(c) for c in "<DATE>"], np.uint32)
_LOOKED_AT = np.zeros(128, np.bool_)  # the ASCII characters `_looks_for` looks at: [, /, p and the capitals
_LOOKED_AT[[91, 47, 112, *range(65, 91)]] = True


@numba.njit(cache=True, nogil=True)
def _holds(codes, n, k, word) -> bool:
    if k + len(word) > n:
        return False
    for j in range(len(word)):  # noqa: SIM110 (a loop numba compiles)
        if codes[k + j] != word[j]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _name_at(codes, n, k) -> int:
    """The index in `_NAMES` of the name at k, or -1."""
    if k + 2 >= n or codes[k] >= 128 or codes[k + 1] >= 128 or not _NAME_STARTS[(codes[k] << 7) | codes[k + 1]]:
        return -1
    name = (np.int64(codes[k]) << 16) | (np.int64(codes[k + 1]) << 8) | np.int64(codes[k + 2])
    for j in range(len(_NAMES)):
        if _NAMES[j] == name:
            return j
    return -1


@numba.njit(cache=True, nogil=True)
def _looks_for(codes, lo, hi, table) -> int:
    """What ``codes[lo:hi]`` may hold (`_DATES`, `_RARE`, both or neither); a superset of what it holds."""
    found = 0
    for k in range(lo, hi):
        c = codes[k]
        if c >= 128 or not _LOOKED_AT[c]:
            continue
        if c == 91:  # [ after [A-Za-z0-9_)] and before a digit
            if k > lo and (word_or_dot(codes[k - 1]) or codes[k - 1] == 41) and is_digit(codes, hi, k + 1, table):
                found |= _RARE
        elif c == 47:  # /
            if _holds(codes, hi, k, _TMP_TMP) or _holds(codes, hi, k, _TMP_VAR):
                found |= _RARE
        else:  # p or a capital
            if c == 112 and _holds(codes, hi, k, _TMP_PYTEST):
                found |= _RARE
            j = _name_at(codes, hi, k)
            if j >= _WEEKDAYS:
                found |= _RARE
            elif j >= _MONTHS:
                found |= _DATES
            elif j >= 0:
                e = k + 3
                if e < hi and codes[e] == 46:
                    e += 1
                if e < hi and codes[e] == 32:
                    e += 1
                    if e < hi and codes[e] == 32:
                        e += 1
                    if is_digit(codes, hi, e, table):
                        found |= _DATES
        if found == _DATES | _RARE:
            break
    return found


@numba.njit(cache=True, nogil=True)
def _digit_fields_into(codes, n, lo, hi, table, out) -> int:
    """``codes[lo:hi]`` with its digit fields replaced (`_DIGIT_VOLATILE`), into `out` from 0; its length."""
    o = 0
    p = lo
    while p < hi:
        run = p  # a run of ASCII characters that are not digits, copied at once
        while run < hi and codes[run] < 128 and not 48 <= codes[run] <= 57:
            run += 1
        if run > p:
            for j in range(p, run):
                out[o] = codes[j]
                o += 1
            p = run
            continue
        kind = -1
        e = 0
        if is_digit(codes, n, p, table) and (p == 0 or not word_or_dot(codes[p - 1])):
            kind, e = field_at(codes, n, p, table)
        if kind < 0:
            out[o] = codes[p]
            o += 1
            p += 1
            continue
        for j in range(TOKEN_STARTS[kind], TOKEN_STARTS[kind + 1]):
            out[o] = TOKEN_CODES[j]
            o += 1
        p = e
    return o


@numba.njit(cache=True, nogil=True)
def _month_at(src, m, k, table) -> int:
    """The end of the log date (`stages.dedup._MONTH_DAY`) at k, or -1."""
    after_letter = k > 0 and (65 <= src[k - 1] <= 90 or 97 <= src[k - 1] <= 122)  # the lookbehind
    if after_letter or not 0 <= _name_at(src, m, k) < _MONTHS:
        return -1
    j = k + 3
    if code_at(src, m, j) == 46:  # \.?
        j += 1
    if code_at(src, m, j) != 32:  # " {1,2}": two spaces, or one (a second space is then no digit either way)
        return -1
    j += 2 if code_at(src, m, j + 1) == 32 else 1
    r = digits_end(src, m, table, j) - j  # \d{1,2}(?!\d)
    if r < 1 or r > 2:
        return -1
    e = j + r
    f = e + 1 if code_at(src, m, e) == 44 else e  # (?:,? \d{4}(?!\d))?
    if code_at(src, m, f) == 32 and digits_end(src, m, table, f + 1) - f - 1 == 4:
        e = f + 5
    return e


@numba.njit(cache=True, nogil=True)
def _weekday_at(src, m, k) -> int:
    """The end of the weekday and the date after it (`stages.dedup._WEEKDAY_DATE`) at k, or -1."""
    if not _MONTHS <= _name_at(src, m, k) < _WEEKDAYS:
        return -1
    j = k + 3
    while j < m and 97 <= src[j] <= 122:  # [a-z]*
        j += 1
    if code_at(src, m, j) == 44:  # ,?
        j += 1
    if code_at(src, m, j) == 32 and _holds(src, m, j + 1, _DATE_TOKEN):
        return j + 1 + len(_DATE_TOKEN)
    return -1


@numba.njit(cache=True, nogil=True)
def _dates_into(src, m, out, table, weekdays) -> int:
    """``src[:m]`` with its log dates (`stages.dedup._MONTH_DAY`) replaced, or with `weekdays` each weekday before
    a date made part of it (`stages.dedup._WEEKDAY_DATE`), into `out`; its length."""
    o = 0
    k = 0
    while k < m:
        c = src[k]
        e = -1
        if 65 <= c <= 90:  # a name's capital, tested here: most characters are none
            e = _weekday_at(src, m, k) if weekdays else _month_at(src, m, k, table)
        if e < 0:
            out[o] = c
            o += 1
            k += 1
            continue
        for j in range(len(_DATE_TOKEN)):
            out[o] = _DATE_TOKEN[j]
            o += 1
        k = e
    return o


@numba.njit(cache=True, nogil=True)
def normalize_texts(codes: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Texts joined by NULs (`codes`: uint8 for ASCII text, else uint32 code points; `table`: `ASCII_TABLE` or
    `classes_of(codes)`) with their digit fields and log dates replaced, and, in those that can hold no process id
    or temporary path (`_looks_for`), whitespace collapsed: such a text is then `stages.dedup.normalize_text`'s result. Returns the output (joined by NULs, the
    dtype of `codes`) and per text whether the rest of the patterns are still to be applied to it (before the
    whitespace: `stages.dedup._normalize_tail`)."""
    n = len(codes)
    texts = 1
    longest = 0
    start = 0
    for k in range(n + 1):
        if k == n or codes[k] == 0:
            texts += k < n
            longest = max(longest, k - start)
            start = k + 1
    pending = np.zeros(texts, np.bool_)
    out = np.empty(2 * n + 16, codes.dtype)  # a field is never more than twice as long as its token
    a = np.empty(3 * longest + 16, codes.dtype)  # a log date may be longer by a fifth
    b = np.empty(3 * longest + 16, codes.dtype)
    o = 0
    lo = 0
    for t in range(texts):
        hi = lo
        while hi < n and codes[hi] != 0:
            hi += 1
        found = _looks_for(codes, lo, hi, table)
        m = _digit_fields_into(codes, n, lo, hi, table, a)
        if found & _DATES:
            m = _dates_into(b, _dates_into(a, m, b, table, False), a, table, True)
        if found & _RARE:
            pending[t] = True
            out[o : o + m] = a[:m]
            o += m
        else:  # whitespace runs as one space, none at the ends
            space = False
            begun = False
            k = 0
            while k < m:
                if is_space(a, k, table):
                    space = begun
                    k += 1
                    continue
                if space:
                    out[o] = 32
                    o += 1
                    space = False
                out[o] = a[k]
                o += 1
                k += 1
                begun = True
        if t < texts - 1:
            out[o] = 0
            o += 1
        lo = hi + 1
    return out[:o], pending
