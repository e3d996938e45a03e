"""What a worker process (a Ray worker, `pipeline.ray_worker`; a forked worker, `pipeline.process_executor`) does
around each task: the task's exception as bytes for the driver (`pack_error`, `unpack_error`) and the memory release after it
(`release_memory`)."""

from __future__ import annotations

import pickle


def pack_error(exc: Exception) -> bytes:
    """The exception as bytes for the driver: itself when it pickles, else a `RuntimeError` with its line."""
    exc.__traceback__ = None
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))


def unpack_error(data: bytes) -> Exception:
    """The exception `pack_error` made bytes of, on the driver."""
    return pickle.loads(data)


def release_memory() -> None:
    """Hand memory freed by a finished task back to the OS.

    Ray reuses a worker process for many tasks of many stages; without this, heap freed by one task
    (Arrow buffers, Python objects) stays mapped and the worker's resident size ratchets up with
    the number of tasks it ran, so peak memory per worker would grow with the input.
    """
    import gc

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
