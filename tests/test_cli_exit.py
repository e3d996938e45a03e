"""How ``lwm`` ends: a run that ended well skips the interpreter's shutdown (`pipeline.cli.entry`), everything else
ends as usual, and nothing printed or written is lost either way."""

from __future__ import annotations

import io
import subprocess
import sys
import types
from pathlib import Path

import pytest

import pipeline.cli as cli
from pipeline.cli import common
from tests.helpers import ROOT, clean_env, write_corpus

MARK = "interpreter shutdown ran"


@pytest.fixture()
def exits(monkeypatch):
    """`os._exit` recorded instead of taken; the command's own flag reset."""
    taken: list[int] = []
    monkeypatch.setattr(cli.os, "_exit", taken.append)
    monkeypatch.setattr(common, "_finished_cleanly", False)
    return taken


def _command(code: int | None, clean: bool):
    def main() -> None:
        if clean:
            common.done_cleanly()
        raise SystemExit(code)

    return main


class _Stream(io.StringIO):
    """Output that notes whether it was flushed before the process ended."""

    def __init__(self, exits: list[int]) -> None:
        super().__init__()
        self.exits, self.flushed_before_exit = exits, False

    def flush(self) -> None:
        self.flushed_before_exit = not self.exits


def test_a_command_that_finished_cleanly_with_status_0_ends_without_the_shutdown(monkeypatch, exits):
    monkeypatch.setattr(cli, "main", _command(0, clean=True))
    out, err = _Stream(exits), _Stream(exits)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    cli.entry()
    assert exits == [0]
    assert out.flushed_before_exit and err.flushed_before_exit  # print()'s buffered output is not lost


@pytest.mark.parametrize("code, clean", [(0, False), (2, True), (1, False), ("error text", True)])
def test_every_other_ending_is_the_ordinary_one(monkeypatch, exits, code, clean):
    monkeypatch.setattr(cli, "main", _command(code, clean))
    with pytest.raises(SystemExit) as raised:
        cli.entry()
    assert raised.value.code == code and exits == []


def test_an_open_ray_connection_keeps_the_ordinary_shutdown(monkeypatch, exits):
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setattr(cli, "main", _command(0, clean=True))
    with pytest.raises(SystemExit):
        cli.entry()
    assert exits == []


@pytest.fixture(scope="module")
def marked_env(tmp_path_factory) -> dict[str, str]:
    """The test environment plus a ``sitecustomize`` that prints `MARK` from an atexit handler: it shows on
    stderr exactly when the interpreter's shutdown ran."""
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(
        "import atexit, sys\n"
        f"atexit.register(lambda: print({MARK!r}, file=sys.stderr, flush=True))\n")
    env = clean_env()
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    return env


def _lwm(env: dict[str, str], *args: str, ordinary: bool = False) -> subprocess.CompletedProcess:
    """``python -m pipeline.cli`` (`entry`), or with `ordinary` the click group itself (`main`), which always ends
    with the interpreter's shutdown."""
    how = ["-c", "from pipeline.cli import main; main()"] if ordinary else ["-m", "pipeline.cli"]
    return subprocess.run([sys.executable, *how, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)


def test_a_run_ends_without_the_shutdown_and_loses_nothing(tmp_path: Path, marked_env):
    src = write_corpus(tmp_path / "in", files=3, per_file=10)
    runs = {}
    for ordinary in (False, True):
        out = tmp_path / f"out-{ordinary}"
        runs[ordinary] = _lwm(marked_env, "run", "-i", str(src), "-o", str(out), "--executor", "processes",
                              "--num-cpus", "2", "--max-quarantine-rate", "1", "--progress", "off",
                              ordinary=ordinary)
        assert runs[ordinary].returncode == 0, runs[ordinary].stderr[-3000:]
        assert (out / "_SUCCESS").exists()
    fast, usual = runs[False], runs[True]
    assert MARK not in fast.stderr and MARK in usual.stderr
    # nothing printed is lost: the same output as a run that ends with the ordinary shutdown
    assert fast.stdout == usual.stdout and "== pool" in fast.stdout
    assert fast.stderr.replace("out-False", "out-True") + MARK + "\n" == usual.stderr
    assert fast.stderr.rstrip().endswith(f"outputs: {tmp_path / 'out-False'}")
    for shard in (tmp_path / "out-True" / "shards").rglob("*.parquet"):
        assert (tmp_path / "out-False" / shard.relative_to(tmp_path / "out-True")).read_bytes() == shard.read_bytes()


def test_a_failed_run_and_other_commands_end_as_usual(tmp_path: Path, marked_env):
    failed = _lwm(marked_env, "run", "-i", str(tmp_path / "missing"), "-o", str(tmp_path / "out"))
    assert failed.returncode == 2 and MARK in failed.stderr
    listed = _lwm(marked_env, "formats")
    assert listed.returncode == 0 and MARK in listed.stderr


def test_formats_lists_the_options_every_format_takes():
    """--opt domain, source_kind and max_record_bytes are accepted by every format (and named by the error for a
    wrong option) but were listed nowhere."""
    from pipeline.cli.formats import COMMON_OPTION_HELP
    from stages.ingest.registry import COMMON_OPTIONS
    from tests.helpers import lwm_in_process

    assert set(COMMON_OPTION_HELP) == COMMON_OPTIONS
    listed = lwm_in_process("formats").stdout.split("every format also takes:\n", 1)[1]
    assert [line.split()[1].split("=")[0] for line in listed.splitlines()] == list(COMMON_OPTION_HELP)
