"""Ctrl-C and SIGTERM during the step loop: noted when they arrive, acted on between two steps.

Raised at once, as Python does by default, the interrupt could land after the optimizer has
stepped but before the step's samples are recorded as used, and a checkpoint written then would
train those samples twice on resume. Deferred to the end of the step, the state is whole: the run
saves it (with ``--out``) and then ends as the signal's own handler ends it (``lwm``: one line, exit
130 or 143). A second signal while the step finishes ends the run at once, without a checkpoint.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, NoReturn

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopBetweenSteps:
    """While entered (in the main thread), SIGINT and SIGTERM set `signum` instead of interrupting."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopBetweenSteps:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                previous = signal.getsignal(signum)
                if previous not in (signal.SIG_IGN, None):  # a signal the process ignores stays ignored
                    self._previous[signum] = previous
                    signal.signal(signum, self._noted)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _noted(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
            return
        self._pass_on(signum, frame)  # asked twice: no waiting for the step

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _pass_on(self, signum: int, frame: Any) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        self._restore()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.raise_signal(signum)  # the default action: the process ends as the signal ends it

    def stop(self, note: str) -> NoReturn:
        """End the run as the noted signal would have (a rank that got none: as Ctrl-C does); `note` becomes the
        message of the exception, which ``lwm`` prints in its one line."""
        try:
            if self.signum is not None:
                self._pass_on(self.signum, None)
            raise KeyboardInterrupt()
        except KeyboardInterrupt as stop:
            stop.args = (note,) if note else ()
            raise
