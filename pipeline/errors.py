"""How a command ends on an error: one line (what failed, on which path) and an exit status.

Shared by every ``lwm`` command; ``--debug`` on the group re-raises for the traceback instead.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import select
import signal
import sys
import threading

import click

from schemas.errors import ConfigError, os_error_text
from schemas.text import one_line


class StreamWriteError(OSError):
    """A write to standard output that the system refused (a full disk behind a redirect, ``/dev/full``)."""


class _GuardedStream:
    """Standard output or error as a command writes to it (`guard_streams`): a refused write to standard output is
    a `StreamWriteError` naming it (not taken for the output folder's disk); one to standard error, where
    progress and warnings go, is dropped, so the command goes on and its exit status still tells the result.
    A reader that went away (EPIPE) on standard output stays a `BrokenPipeError`, as the pipe handling expects."""

    def __init__(self, inner, name: str, quiet: bool) -> None:
        self._inner, self._name, self._quiet = inner, name, quiet

    def _refused(self, exc: OSError) -> None:
        if self._quiet:
            return
        if isinstance(exc, BrokenPipeError):
            raise exc
        raise StreamWriteError(exc.errno, f"cannot write to standard {self._name}: {exc.strerror or exc}") from None

    def write(self, text):
        try:
            return self._inner.write(text)
        except OSError as exc:
            self._refused(exc)
            return len(text)

    def flush(self) -> None:
        try:
            self._inner.flush()
        except OSError as exc:
            self._refused(exc)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def guard_streams() -> None:
    """For the ``lwm`` process: a closed standard stream (``>&-``) becomes the null device, and writes to the
    standard streams fail as `_GuardedStream` says."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 (for the whole process)
    if not isinstance(sys.stdout, _GuardedStream):
        sys.stdout = _GuardedStream(sys.stdout, "output", quiet=False)
    if not isinstance(sys.stderr, _GuardedStream):
        sys.stderr = _GuardedStream(sys.stderr, "error", quiet=True)


def one_line_notices() -> None:
    """For the ``lwm`` process: a `schemas.errors.Notice` prints as ``warning: …`` on one line (Python's default
    adds the file, line and source of the call)."""
    import warnings

    from schemas.errors import Notice

    default = warnings.formatwarning

    def formatted(message, category, filename, lineno, line=None):
        if issubclass(category, Notice):
            return f"warning: {message}\n"
        return default(message, category, filename, lineno, line)

    warnings.formatwarning = formatted


def os_error_line(exc: OSError) -> str:
    """One line for an operating-system error: what failed, on which path, and what to do for a full disk."""
    line = os_error_text(exc)
    if exc.errno == errno.ENOSPC and not isinstance(exc, StreamWriteError):
        line += " (free space and run the same command again: finished tasks are kept)"
    elif exc.errno == errno.EFBIG:
        line += " (a file is larger than a limit allows: `ulimit -f`, or the filesystem's largest file)"
    elif exc.errno == errno.EMFILE:
        line += " (raise the limit of open files, e.g. `ulimit -n 4096`, and run the same command again)"
    elif exc.errno == errno.ENFILE:
        line += " (the system's table of open files is full)"
    return line


# The clients of object stores: what they raise past fsspec (an endpoint that does not answer, no credentials)
# is about the environment, not a bug.
_STORAGE_CLIENTS = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "adlfs", "azure", "google.auth",
                    "google.api_core", "google.cloud")


# What the dynamic loader says when a library does not fit in the address space left (`ulimit -v`).
_NO_ROOM_TO_LOAD = "failed to map segment from shared object"


def error_line(exc: BaseException) -> tuple[str, int]:
    """The one line and exit status for an error that ends a command (2: input, config or environment; 1: a bug)."""
    if isinstance(exc, ConfigError):
        return str(exc), 2
    if isinstance(exc, OSError):
        return os_error_line(exc), 2
    if isinstance(exc, MemoryError) or (isinstance(exc, ImportError) and _NO_ROOM_TO_LOAD in str(exc)):
        return ("out of memory: this process may not use what the step needs (a memory limit such as "
                "`ulimit -v`, or the machine's memory); raise it, or use fewer --num-cpus"), 2
    text = " ".join(str(exc).split())[:500]
    module = type(exc).__module__
    if any(module == m or module.startswith(m + ".") for m in _STORAGE_CLIENTS):  # no endpoint, no credentials: the environment
        return f"{type(exc).__name__}: {text}", 2
    return f"internal error: {type(exc).__name__}: {text} (run with --debug for the traceback)", 1


class Terminated(KeyboardInterrupt):
    """SIGTERM in the ``lwm`` process: ends it as Ctrl-C does, through every cleanup on the way (worker pools,
    the Ray instance it started), instead of the default's instant end that leaves Ray's processes behind."""


def stop_on_sigterm() -> None:
    """For the ``lwm`` process: SIGTERM raises `Terminated` in it; a process forked from it (a worker) keeps the
    default, which ends it at once."""
    owner = os.getpid()

    def terminated(signum, frame):
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    signal.signal(signal.SIGTERM, terminated)


@contextlib.contextmanager
def signals_held():
    """A cleanup that a second Ctrl-C (or SIGTERM) must not cut short: stopping a local Ray or the worker
    processes after the first one. Cut short, the run ended with click's status 1 and left Ray's agents running.
    A signal that arrives meanwhile is held and raised when the block ends (where no error is on its way
    already); a signal the process ignores (``nohup``) stays ignored. In the main thread only, where Python
    delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum, frame):
        held.append(signum)

    before = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)
              if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if held:
        raise Terminated() if held[0] == signal.SIGTERM else KeyboardInterrupt()


def _ignore_more_signals() -> None:
    """The command is ending on a signal: another one must not turn its one line and status into click's."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def handle_errors(fn):
    """Turn every error into one line; `--debug` (on the group) re-raises for a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        debug = (ctx.find_root().params or {}).get("debug", False)
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # usage errors and exits are click's own, already one line
        except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (`Terminated`): one line, the shell's status
            if debug:
                raise
            _ignore_more_signals()
            terminated = isinstance(stop, Terminated)
            again = " (finished tasks are kept: the same command resumes)" if ctx.info_name == "run" else ""
            if str(stop):  # what the command did about it (`lwm train`: the step it saved)
                again = f" ({stop})"
            click.echo(f"lwm: {'terminated' if terminated else 'interrupted'}{again}", err=True)
            sys.exit(143 if terminated else 130)
        except Exception as exc:
            if debug:
                raise
            if isinstance(exc, BrokenPipeError) and stdout_reader_gone():  # not another pipe (a worker's, an endpoint's)
                reader_went_away()
            line, status = error_line(exc)
            click.echo(f"lwm: error: {one_line(line)}", err=True)
            sys.exit(status)

    return wrapper


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (``| head`` having its lines)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLERR)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (an in-process runner), no poll (not Unix)
        return False


def reader_went_away() -> None:
    """End quietly when the reader of our output has closed it (``lwm show … | head``), as a command killed by
    SIGPIPE does (status 141); what is still buffered goes to /dev/null rather than failing again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (an in-process runner): nothing buffered to lose
        pass
    sys.exit(141)
