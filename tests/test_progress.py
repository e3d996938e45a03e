"""Progress display (pipeline/progress.py) and the per-stage statistics of a run."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import threading
from pathlib import Path

import pytest

from pipeline.progress import Progress
from pipeline.run import run_pipeline
from tests.helpers import LWM, clean_env, corpus_config, write_corpus


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_mode_rewrites_one_line_and_ends_it_once():
    out = io.StringIO()
    p = Progress("ingest", 3, mode="bar", stream=out, every=0.0)
    for _ in range(3):
        p.update(rows=10, nbytes=1_000_000)
    p.finish()
    text = out.getvalue()
    draws = text.split("\r")[1:]
    assert text.startswith("\r") and all(d.startswith("\x1b[K[ingest] ") for d in draws)
    assert draws[0].startswith("\x1b[K[ingest] 1/3 tasks  10 rows  1.0 MB")
    assert draws[-1].startswith("\x1b[K[ingest] 3/3 tasks  30 rows  3.0 MB")
    assert text.count("\n") == 1 and text.endswith("\n")  # one line on the terminal, ended once


def test_lines_mode_prints_plain_lines_at_most_every_interval():
    out = io.StringIO()
    p = Progress("samples", 3, mode="lines", stream=out, every=3600)
    for _ in range(3):
        p.update(rows=1000, nbytes=2_000_000)
    p.finish()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [line.split("  ")[0] for line in lines] == ["[samples] 1/3 tasks", "[samples] 3/3 tasks"]
    assert "3,000 rows  6.0 MB" in lines[-1]


@pytest.mark.parametrize(("stream", "mode"), [(FakeTerminal(), "bar"), (io.StringIO(), "lines")])
def test_auto_mode_follows_the_stream(stream, mode):
    assert Progress("x", 1, stream=stream).mode == mode


def test_off_mode_writes_nothing():
    out = io.StringIO()
    p = Progress("shards", 2, mode="off", stream=out)
    p.update()
    p.update()
    assert p.finish() >= 0 and out.getvalue() == ""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "in", files=4, per_file=20)


def test_a_run_reports_stage_counts_and_keeps_timings_out_of_the_manifest(corpus, tmp_path, capsys):
    cfg = corpus_config([str(corpus)], tmp_path / "out")
    cfg["executor"]["progress"] = "lines"
    manifest = run_pipeline(cfg, echo=lambda m: None)
    err = capsys.readouterr().err
    timings = json.loads((tmp_path / "out" / "_timings.json").read_text())
    for stage in ("ingest", "samples", "shards"):
        t = timings[stage]
        assert set(t) == {"tasks", "skipped", "ran", "seconds"}
        assert t["ran"] == t["tasks"] > 0 and t["skipped"] == 0 and t["seconds"] >= 0
        assert f"[{stage}] {t['tasks']}/{t['tasks']} tasks" in err
    assert timings["ingest"]["tasks"] == 2  # four small files, grouped two by two
    assert "\r" not in err
    counts = manifest["counts"]
    assert counts["records"]["read"] == 4 * 20 + 2  # plus one malformed line and one 1-turn trajectory
    assert counts["records"]["quarantined"] == 1
    assert counts["trajectories"]["kept"] == 4 * 20  # the 1-turn trajectory is filtered
    assert counts["filtered"]["min_turns"] == 1
    text = (tmp_path / "out" / "manifest.json").read_text()
    assert "seconds" not in text and "timing" not in text


def test_the_command_line_draws_a_live_line_on_a_terminal(corpus, tmp_path):
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc = subprocess.run([LWM, "run", "--executor", "local", "--input", str(corpus), "--out", str(tmp_path / "o")],
                          stdout=subprocess.DEVNULL, stderr=slave, env=clean_env(), timeout=120)
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    text = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, text[-2000:]
    assert "\r\x1b[K[ingest] " in text and "\r\x1b[K[shards] " in text
