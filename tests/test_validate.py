"""``lwm validate`` sees the input as ``lwm run`` reads it, and counts it in the run's words."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import lwm_in_process


def lwm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = lwm_in_process(*args)
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def run(src: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return lwm("run", "--executor", "local", "--progress", "off", "-i", str(src), "-o", str(out), *args)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """The whole output folder of a finished `lwm run` over a small web demo corpus."""
    root = tmp_path_factory.mktemp("finished")
    lwm("demo", "--domain", "web", "--out", str(root / "demo"), "-n", "12")
    run(root / "demo", root / "web-run")
    return root / "web-run"


def test_validate_leaves_out_a_finished_run_inside_the_input_as_run_does(finished_run, tmp_path):
    """A folder holding logs and a copy of an earlier run's output folder: `lwm run` leaves the run's layers, shards
    and markers out of its input, so validate does too, and both count the same records."""
    holder = tmp_path / "holder"
    lwm("demo", "--domain", "mcp", "--out", str(holder), "-n", "10")
    shutil.copytree(finished_run, holder / "web-run")

    checked = lwm("validate", str(holder), check=False)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr
    assert "unknown_format" not in checked.stdout and "would fail" not in checked.stderr
    note = [line for line in checked.stdout.splitlines() if line.startswith("input: left out ")]
    assert len(note) == 1 and str(holder / "web-run") in note[0], checked.stdout

    report = json.loads(lwm("validate", str(holder), "--json").stdout)
    ran = run(holder, tmp_path / "out")
    assert note[0] in ran.stderr  # the same line, the same files left out
    counts = json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]
    assert report["left_out"] > 0 and report["quarantined"] == 0
    assert report["records"] == counts["records"]["read"] == 10


def _line(text: str, step: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith(f"{step}: ")]
    return line


def test_validate_counts_records_and_trajectories_in_the_words_and_numbers_of_run(shared_data, tmp_path):
    """Chats of which about half never call a tool: validate's `ingest:` line is the run's, and its `filter:` line
    counts the same trajectories and the same ones without turns, then stops where its checks stop."""
    src = tmp_path / "chats"
    src.mkdir()
    for folder in ("sharegpt-glaive", "openai-messages-typed"):
        shutil.copytree(shared_data / folder, src / folder)
    checked = lwm("validate", str(src)).stdout
    ran = run(src, tmp_path / "out").stderr
    assert _line(checked, "ingest") == _line(ran, "ingest")
    counts = json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]
    read, no_turns = counts["trajectories"]["normalized"], counts["filtered"]["no_turns"]
    assert _line(ran, "filter").startswith(f"filter: {read} trajectories, ")
    assert _line(checked, "filter").startswith(f"filter: {read} trajectories, {no_turns} filtered (no_turns {no_turns})"
                                               f" → {read - no_turns} with turns, ")
    report = json.loads(lwm("validate", "--json", str(src)).stdout)
    assert (report["trajectories"], report["with_turns"], report["filtered"]) == (read, read - no_turns,
                                                                                  {"no_turns": no_turns})
