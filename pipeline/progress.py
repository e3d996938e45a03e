"""Progress display per stage: a live line on a terminal, plain periodic lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts finished tasks, rows and bytes of one stage and reports them at most every `every` s."""

    def __init__(self, stage: str, total: int, mode: str = "auto", stream: TextIO | None = None, every: float = 2.0):
        self.stage, self.total = stage, total
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "lines"
        self.mode = mode
        self.every = every if mode == "lines" else 0.1
        self.done = 0
        self.rows = 0
        self.bytes = 0
        self.start = time.monotonic()
        self._last = float("-inf")  # the first update always shows

    def update(self, tasks: int = 1, rows: int = 0, nbytes: int = 0) -> None:
        self.done += tasks
        self.rows += rows
        self.bytes += nbytes
        now = time.monotonic()
        if now - self._last >= self.every or self.done == self.total:
            self._last = now
            self._emit(final=False)

    def count(self, result: dict) -> dict:
        """One finished task, by its result's ``rows`` and ``bytes`` (what every executor reports); returns it."""
        self.update(rows=int(result.get("rows", 0)), nbytes=int(result.get("bytes", 0)))
        return result

    def _line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = self.rows / elapsed
        mb = self.bytes / 1e6
        return (
            f"[{self.stage}] {self.done}/{self.total} tasks  {self.rows:,} rows  "
            f"{mb:,.1f} MB  {rate:,.0f} rows/s  {elapsed:,.1f}s"
        )

    def _emit(self, final: bool) -> None:
        if self.mode == "off":
            return
        if self.mode == "bar":
            end = "\n" if final else ""
            self.stream.write("\r\x1b[K" + self._line() + end)
        elif final or self.done < self.total:
            self.stream.write(self._line() + "\n")
        self.stream.flush()

    def finish(self) -> float:
        """Print the final line; returns the stage's wall time in seconds."""
        self._emit(final=True)
        return time.monotonic() - self.start
