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

import click

from training.cli import train


def exit_rank(code: int) -> None:
    """End this rank's process with `code` after flushing its output, without the interpreter's shutdown (see
    the module docstring); for a rank whose process group is destroyed and whose files are closed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _interrupt_in_one_line(callback):
    """The command's callback with Ctrl-C ending it as ``lwm train`` ends it (one line saying what was saved, exit
    130) instead of click's "Aborted!" and exit 1. (SIGTERM, without ``lwm``'s handler, ends the process as the
    signal does once the step is saved.)"""

    def run(*args, **kwargs):
        try:
            return callback(*args, **kwargs)
        except KeyboardInterrupt as stop:
            click.echo(f"lwm: interrupted{f' ({stop})' if str(stop) else ''}", err=True)
            sys.exit(130)

    return run


def main() -> None:
    train.callback = _interrupt_in_one_line(train.callback)
    try:
        train(prog_name="python -m training")
    except SystemExit as done:
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not isinstance(done.code, (int, type(None))):
            raise
        exit_rank(done.code or 0)


if __name__ == "__main__":
    main()
