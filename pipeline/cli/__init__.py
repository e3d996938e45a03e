"""The ``lwm`` command line: run, validate, formats, demo, hist, show, export, reward, check-format, train.

One module per command, each listed once in `COMMANDS` and imported when it is used; what several commands share is in
`pipeline.cli.common` (options, JSONL input) and `pipeline.cli.run_files` (reading a finished run).
Errors are one clear line (file, line, what was expected) and exit status 2
(`pipeline.errors.handle_errors`); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import sys

from pipeline.arrow_pool import choose_memory_pool, one_blas_thread

choose_memory_pool()  # before anything imports pyarrow: Arrow reads it once, at that import
if "train" not in sys.argv[1:3]:  # `lwm train`, `lwm --debug train`
    one_blas_thread()  # before anything imports numpy

import copy  # noqa: E402
import importlib  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402

import click  # noqa: E402

from pipeline.cli.common import finished_cleanly  # noqa: E402
from pipeline.errors import guard_streams, handle_errors, one_line_notices, stop_on_sigterm  # noqa: E402


class LazyCommands(click.Group):
    """A group whose commands are imported when one is looked up (`COMMANDS`), not when ``lwm`` starts.

    A command then starts without the other commands' modules: ``lwm formats`` took 0.38 s with all of them
    imported and 0.22 s without, ``lwm validate`` 0.36 s and 0.29 s (``lwm run`` needs most of them anyway: about
    15 ms less). Listing the commands (``lwm --help``) imports them all, for their help lines.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        if name not in self.commands:
            mod_name, attr, *extra = COMMANDS[name]
            cmd = getattr(importlib.import_module(mod_name), attr)
            for more in extra:  # modules that add subcommands to the group
                importlib.import_module(more)
            if name in OUTSIDE_PIPELINE:
                cmd = copy.copy(cmd)
                cmd.callback = handle_errors(cmd.callback)
            self.add_command(cmd, name=name)
        return self.commands[name]


@click.group(cls=LazyCommands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="lwmkit", prog_name="lwm", message="%(prog)s %(version)s")
def main(debug: bool) -> None:
    """lwmkit: raw agent logs → weighted token-loss shards for language world models."""


# Every command: its name → (module, attribute, modules that add subcommands to it). A listed module that is
# missing is an error when its command is used, not skipped.
COMMANDS: dict[str, tuple[str, ...]] = {
    "run": ("pipeline.cli.run", "run_cmd"),
    "validate": ("pipeline.cli.validate", "validate_cmd"),
    "formats": ("pipeline.cli.formats", "formats_cmd"),
    "demo": ("pipeline.cli.demo", "demo_cmd"),
    "hist": ("pipeline.cli.hist", "hist_cmd"),
    "show": ("pipeline.cli.show", "show_cmd"),
    "export": ("pipeline.cli.export", "export_group", "pipeline.cli.export_rl"),  # export_rl: `export verl`, `trl`
    "reward": ("pipeline.cli.reward", "reward_cmd"),
    "check-format": ("pipeline.cli.check_format", "check_format_cmd"),
    "train": ("training.cli", "train"),
}

# Commands defined below `pipeline` in the layers (`training` may not import it), which therefore cannot wear
# `handle_errors` themselves: the group gives it to them here, so that an unexpected error, Ctrl-C and SIGTERM end
# them as they end every other command (one line; exit 2, 130 or 143), and ``--debug`` shows the traceback.
OUTSIDE_PIPELINE = frozenset({"train"})


def entry() -> None:
    """``lwm`` and ``python -m pipeline.cli``: `main`, and after a command that called `common.done_cleanly` (``lwm run``)
    and exits with status 0, the end of the process without the interpreter's shutdown.

    That shutdown frees every object of every module one by one: with the tokenizer loaded, 0.14 s of a run's
    process (0.07 s without it), which is an eighth of a 1 MB run (1.19 s → 1.04 s measured). Nothing is left to
    it once a run has returned: output is flushed here, logging's handlers are flushed and closed, the run closed
    its files, its worker pools and the Ray instance it started. A Ray connection still open (never the case
    after `lwm run`) keeps the ordinary shutdown. Commands run in-process (click's test runner, `main`) are
    not affected.
    """
    guard_streams()
    stop_on_sigterm()
    one_line_notices()
    try:
        main()
    except SystemExit as done:
        ray = sys.modules.get("ray")
        if not (finished_cleanly() and done.code in (0, None)) or (ray is not None and ray.is_initialized()):
            raise
        logging.shutdown()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:  # the reader of the summary went away (`| head`): as SIGPIPE would end it
            os._exit(141)
        except OSError as exc:  # what the run printed last could not be written: say so where possible
            print(f"lwm: error: {exc.strerror or exc}", file=sys.stderr)
            os._exit(2)
        os._exit(0)


if __name__ == "__main__":
    entry()
