"""``lwm hist --png``: the chart is written where the user said, as PNG, and a name of another format is refused
before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import lwm_in_process, terminal_notes_run

pytest.importorskip("matplotlib")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return terminal_notes_run(tmp_path_factory.mktemp("hist"))


def test_a_name_without_extension_is_written_as_given_and_said(run, tmp_path):
    chart = tmp_path / "noext"
    proc = lwm_in_process("hist", str(run), "--png", str(chart))
    assert proc.returncode == 0, proc.stderr
    assert chart.read_bytes()[:8] == PNG_SIGNATURE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noext"]  # not noext.png
    assert f"wrote {chart}\n" in proc.stderr


@pytest.mark.parametrize("name", ["h.txt", "h.svg", "h.PDF"])
def test_a_name_of_another_format_is_refused_in_one_line_before_any_work(run, tmp_path, name):
    proc = lwm_in_process("hist", str(run), "--png", str(tmp_path / name))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"lwm: error: --png {tmp_path / name}: the chart is written as PNG; give a name ending in .png (or none)"]
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []
    assert lwm_in_process("hist", str(run), "--png", str(tmp_path / "h.PNG")).returncode == 0
