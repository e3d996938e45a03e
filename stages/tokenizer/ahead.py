"""Tokenize the texts of the rows ahead on a second thread, while this one assembles the current row's samples.

A sample task spends about a third of its time in the tokenizer and the rest in Python (rendering, masking
statistics, assembly). The tiktoken engine lets go of the GIL while it encodes, so where the process has a
CPU to spare (the in-process runner; a Ray worker holds one CPU and gets none), `EncodeAhead` encodes the
observations of the next rows on a thread of its own and offers each row's ids to the `SegmentTokenizer`
when the task reaches that row (`SegmentTokenizer.given`). The segment tokenizer takes an offered text's ids
instead of calling the tokenizer, and does everything else as before: its memo, its counter and the ids
are the same (the same tokenizer encodes the same text), only the thread that did the work differs. A text
the thread has not reached, or any text when it fails, is encoded by the task itself. A row the thread is
encoding when the task reaches it is waited for: the task would otherwise encode its texts a second time (on
the 41 MB benchmark corpus, 3.3 M of the 24 M characters of observations, mostly the longest ones, whose
encoding the task was most likely to catch up with; waiting took the one-process run from 8.90–9.23 s to
8.40–8.65 s).

Two threads trading the GIL hand it over only every ``sys.getswitchinterval()`` seconds (5 ms by default):
the encoding thread would wait that long after each text to return its ids. While the thread runs, the
interval is set to `SWITCH_INTERVAL` and set back afterwards. Measured on 2 cores with the 24.4 MB of
observations of the 41 MB benchmark corpus: an encoding thread (1.8–2.1 s alone) beside a 2 s Python loop finished
both in 4.33 s at 5 ms, no better than one after the other, and in 2.77 s at 2 µs.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Iterator

import numpy as np

SWITCH_INTERVAL = 2e-6
# How far the thread may run ahead: rows, and characters of texts encoded but not yet taken.
WINDOW_ROWS = 8
WINDOW_CHARS = 8 << 20
_MIN_CHARS = 49  # shorter texts go to the segment tokenizer's own table of short strings (`_SHORT_CHARS`)


class EncodeAhead:
    """Encodes, on a thread, the texts of the rows after the current one; `at(i)` moves to row `i`.

    `rows` yields each row's texts, in the order the task meets the rows (the thread draws from it, so it
    must not be shared). Use as a context manager: the thread starts on entry and is stopped and joined on
    exit, and the switch interval restored.
    """

    def __init__(self, seg, rows: Iterable[list[str]], window_rows: int = WINDOW_ROWS,
                 window_chars: int = WINDOW_CHARS, switch_interval: float = SWITCH_INTERVAL) -> None:
        self.seg = seg
        self._rows: Iterator[list[str]] = iter(rows)
        self.window_rows, self.window_chars, self.switch_interval = window_rows, window_chars, switch_interval
        self._ready: dict[int, dict[str, np.ndarray]] = {}  # row → its texts' ids, filled by the thread
        self._chars: dict[int, int] = {}
        self._held = 0  # characters of the texts in `_ready`
        self._current = -1
        self._working = -1  # the row the thread is encoding now (-1: none)
        self._stop = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._work, name="lwm-encode-ahead", daemon=True)
        self._interval = sys.getswitchinterval()
        self.error: BaseException | None = None  # what stopped the thread early (its texts are then encoded here)
        self.offered = 0  # texts whose ids were offered to the segment tokenizer (a measure for tests)

    def __enter__(self) -> EncodeAhead:
        self._interval = sys.getswitchinterval()
        sys.setswitchinterval(self.switch_interval)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join()
        sys.setswitchinterval(self._interval)
        self.seg.given.clear()
        self._ready.clear()

    def at(self, index: int) -> None:
        """The task moves to row `index` (0-based, every row counted): that row's encoded texts are offered to
        the segment tokenizer, the ones of earlier rows dropped, and the thread may go one row further."""
        given = self.seg.given
        given.clear()
        with self._cond:
            while self._working == index:  # the thread is encoding this row: wait for its ids, not encode them again
                self._cond.wait()
            self._current = index
            for row in [r for r in self._ready if r <= index]:
                ids = self._ready.pop(row)
                self._held -= self._chars.pop(row)
                if row == index:
                    given.update(ids)
                    self.offered += len(ids)
            self._cond.notify_all()

    def _work(self) -> None:
        seg, tok = self.seg, self.seg.tok
        try:
            for row, texts in enumerate(self._rows):
                with self._cond:
                    while not self._stop and (row > self._current + self.window_rows or self._held > self.window_chars):
                        self._cond.wait()
                    if self._stop:
                        return
                    if row <= self._current:  # the task got there first
                        continue
                    self._working = row
                ids: dict[str, np.ndarray] = {}
                chars = 0
                known = seg.kept_texts()
                for text in texts:
                    if len(text) >= _MIN_CHARS and text not in ids and text not in known:
                        ids[text] = tok.encode_array(text)
                        chars += len(text)
                with self._cond:
                    self._working = -1
                    if row > self._current:
                        self._ready[row] = ids
                        self._chars[row] = chars
                        self._held += chars
                    self._cond.notify_all()
        except BaseException as exc:  # the task encodes what is left itself; results do not change
            self.error = exc
            with self._cond:
                self._working = -1
                self._cond.notify_all()
