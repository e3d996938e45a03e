"""Training progress: one line per logged step, and optionally one JSON object per logged step.

Fields: ``step``, ``loss`` (that step's Σ w·ℓ / D), ``tokens`` (real input tokens of the global
step, all ranks), ``weighted_tokens`` (Σ w over its targets), ``loss_tokens`` (targets with
w > 0), ``lr`` (the rate the step used), ``tokens_per_s`` / ``weighted_tokens_per_s``
measured since the previous logged step, ``rows`` / ``empty_rows`` (rows of the step, and those
without a single weighted target), and ``long_samples`` (what the ``--long-samples`` policy did so
far, all ranks: samples seen over the row, dropped, truncated_left, windowed, pieces, empty_pieces,
lost_loss_tokens).

The JSON log holds whole lines only: a line that cannot be written (a full disk) is not left half
written, and the run ends with one line naming the file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from training.step import StepResult


class StepLogger:
    """Reports steps every `every` steps through `echo`, and appends them to `json_path` when given."""

    def __init__(self, every: int, json_path: str | None, echo: Callable[[str], None], max_steps: int) -> None:
        self.every, self.json_path, self.echo, self.max_steps = max(1, every), json_path, echo, max_steps
        self._since = time.perf_counter()
        self._tokens = 0
        self._weighted = 0.0

    def record(
        self, step: int, result: StepResult, lr: float, extra: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Count the step; on a logged step report it and return the logged object."""
        self._tokens += result.tokens
        self._weighted += result.weighted_tokens
        if step % self.every and step != self.max_steps:
            return None
        now = time.perf_counter()
        elapsed = max(now - self._since, 1e-9)
        entry = {
            "step": step,
            "loss": result.loss,
            "tokens": result.tokens,
            "weighted_tokens": result.weighted_tokens,
            "loss_tokens": result.loss_tokens,
            "lr": lr,
            "tokens_per_s": self._tokens / elapsed,
            "weighted_tokens_per_s": self._weighted / elapsed,
            "rows": result.rows,
            "empty_rows": result.empty_rows,
            **(extra or {}),
        }
        self._since, self._tokens, self._weighted = now, 0, 0.0
        truncated = f" truncated {result.truncated}" if result.truncated else ""
        if result.empty_rows:
            truncated += f" rows without loss {result.empty_rows}/{result.rows}"
        self.echo(
            f"step {step}/{self.max_steps} loss {result.loss:.4f} lr {lr:.2e} "
            f"tok/s {entry['tokens_per_s']:.0f} weighted tok/s {entry['weighted_tokens_per_s']:.0f}{truncated}"
        )
        if self.json_path:
            append_line(self.json_path, json.dumps(entry))
        return entry


def append_line(path: str, line: str) -> None:
    """Append `line` to the file at `path`, whole or not at all: a write that fails (a full disk) cuts the file back
    to its previous end, so that it holds only complete lines, and is an OSError naming `path` (the operating
    system's own names no file)."""
    data = memoryview((line + "\n").encode())
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            end = os.fstat(descriptor).st_size
            try:
                while data:
                    data = data[os.write(descriptor, data) :]
            except OSError:
                os.ftruncate(descriptor, end)
                raise
        finally:
            os.close(descriptor)
    except OSError as failure:
        raise OSError(failure.errno, failure.strerror, path) from None
