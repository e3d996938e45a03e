"""``python -m training …`` and ``torchrun --nproc_per_node N -m training …`` run `lwm train`.

A rank of a multi-process run ends with ``os._exit`` once the command has finished (its checkpoint written,
the process group destroyed), after flushing its output, instead of a normal interpreter shutdown. The gloo
backend's worker threads release a finished collective's work object a moment after the collective returns,
and that work holds tensors with Python objects (``all_gather_object``'s buffers, and through a barrier's
list of earlier work, anything before it); releasing them takes the GIL. When that release lands after the
interpreter has begun to shut down, the thread cannot take the GIL, is made to exit inside a C++ destructor,
and the process aborts ("terminate called without an active exception", SIGABRT) although every step and the
checkpoint are done. With torch 2.13 on CPU, 4 of 63 two-rank runs of the end-to-end test's commands aborted
that way (a core dump: ``~AsyncBarrierWork`` -> ``~AsyncAllgatherWork`` -> ``decref_pyobject`` ->
``PyThread_exit_thread`` during ``Py_FinalizeEx``); with this exit, none of 140. Nothing of the run is lost by
skipping the shutdown: the trainer closes every file it writes (checkpoints, the JSON step log) as it goes.
"""

import os
import sys

from training.cli import train


def exit_rank(code: int) -> None:
    """End this rank's process with `code` after flushing its output, without the interpreter's shutdown (see
    the module docstring); for a rank whose process group is destroyed and whose files are closed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    try:
        train(prog_name="python -m training")
    except SystemExit as done:
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not isinstance(done.code, (int, type(None))):
            raise
        exit_rank(done.code or 0)


if __name__ == "__main__":
    main()
