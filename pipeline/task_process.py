"""What a worker process (a Ray worker, `pipeline.ray_worker`; a forked worker, `pipeline.process_executor`) needs
around its tasks: a thread of its own to run them on (`on_task_thread`), the tokenizer loaded ahead of them
(`load_tokenizer_quietly`), a task's exception as bytes for the driver (`pack_error`, `unpack_error`), and the
memory release after each task (`release_memory`); and for a task's own loop, Python's cycle collector paused
(`collector_paused`)."""

from __future__ import annotations

import contextlib
import gc
import pickle
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

# A worker runs its tasks on one thread of its own, not on its main thread: measured with Arrow's jemalloc (the
# run's allocator, `pipeline.arrow_pool`), a 41 MB run's SFT shard task in a forked worker faulted in 229-266
# thousand fresh pages on the main thread (mostly the Parquet writer's buffers) and took 1.40-1.53 s, against 54-59
# thousand and 1.12-1.18 s on a second thread; two at once on two threads of one process took 1.24-1.42 s together.
_task_thread: tuple[queue.SimpleQueue, queue.SimpleQueue] | None = None


def on_task_thread(fn: Callable[[], T]) -> T:
    """``fn()`` run on this process's task thread (started on first use, one for the process's life), its result
    returned or its exception raised here. A signal (Ctrl-C, a Ray cancel) interrupts the wait as it would have
    interrupted ``fn`` on this thread; ``fn`` then goes on to its end in the background, and a later call gets a
    new task thread."""
    global _task_thread
    if _task_thread is None:
        _task_thread = (queue.SimpleQueue(), queue.SimpleQueue())
        threading.Thread(target=_serve, args=_task_thread, name="lwm-task", daemon=True).start()
    todo, done = _task_thread
    todo.put(fn)
    try:
        ok, out = done.get()
    except BaseException:
        _task_thread = None
        raise
    if not ok:
        raise out
    return out


def _serve(todo: queue.SimpleQueue, done: queue.SimpleQueue) -> None:
    while True:
        fn = todo.get()
        try:
            out: tuple[bool, Any] = (True, fn())
        except BaseException as exc:  # raised by `on_task_thread`, in the thread that asked
            out = (False, exc)
        del fn
        done.put(out)

_pause_lock = threading.Lock()
_pauses = 0  # the `collector_paused` blocks open in this process
_was_enabled = False  # whether the collector ran before the first of them


def pack_error(exc: Exception) -> bytes:
    """The exception as bytes for the driver: itself when it pickles, else a `RuntimeError` with its line."""
    exc.__traceback__ = None
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))


def load_tokenizer_quietly(spec: str | None, engine: str | None) -> None:
    """Load the run's tokenizer into this process's cache ahead of the tasks (a warm-up on a thread); an error
    is left to the task that needs the tokenizer, which meets and reports it."""
    try:
        from stages.tokenizer import load_tokenizer

        load_tokenizer(spec, engine)
    except Exception:
        pass


def unpack_error(data: bytes) -> Exception:
    """The exception `pack_error` made bytes of, on the driver."""
    return pickle.loads(data)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off for the block, as it was after it (nested and concurrent blocks: after
    the last one ends).

    Reference counting still frees every object that is not part of a cycle as soon as it is let go. A
    collection only finds cycles, and to do so it walks the live container objects made since the one
    before (every so often, all of them): where a block's objects form no cycles, it frees nothing and
    its cost grows with what the block keeps (memos, buffered rows).
    """
    global _pauses, _was_enabled
    with _pause_lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


def release_memory() -> None:
    """Hand memory freed by a finished task back to the OS.

    Ray reuses a worker process for many tasks of many stages; without this, heap freed by one task
    (Arrow buffers, Python objects) stays mapped and the worker's resident size ratchets up with
    the number of tasks it ran, so peak memory per worker would grow with the input.
    """
    import pyarrow as pa

    gc.collect()
    # What survives a full collection between tasks is the process's own (modules, the tokenizer and its
    # vocabulary); frozen, later collections skip it: a full collection over a loaded vocabulary took
    # 0.1-0.3 s, paid after every task. Frozen objects are still freed when their last reference goes.
    gc.freeze()
    pa.default_memory_pool().release_unused()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass
