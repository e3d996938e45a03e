"""The real samples in ../shared/data run through to shards; hist --png and show work on the result."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

# Trajectories each shared folder normalizes to (counted by hand from the files; see the adapter tests).
EXPECTED = {
    "openai-messages": 10,
    "swe-agent": 4,
    "mini-swe-agent": 1,
    "openhands": 2,
    "magentic-one": 3,
    "webvoyager": 1,
    "aitw-aitz": 1,
    "opencua-raw": 1,
}


def lwm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_validate_json_on_each_shared_folder(shared_data, folder):
    report = json.loads(lwm("validate", str(shared_data / folder), "--json").stdout)
    assert set(report) == {"format", "records", "trajectories", "turns", "quarantined", "reasons"}
    assert report["trajectories"] == EXPECTED[folder]
    assert report["quarantined"] == 0, report["reasons"]


@pytest.fixture(scope="module")
def shared_run(shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("shared") / "run"
    inputs = [str(shared_data / f) for f in sorted(EXPECTED)]
    args = ["run", "--executor", "local", "--progress", "off", "-o", str(out)]
    for i in inputs:
        args += ["-i", i]
    lwm(*args)
    return out


def test_shared_data_reaches_shards(shared_run):
    manifest = json.loads((shared_run / "manifest.json").read_text())
    assert manifest["counts"]["records"].get("quarantined", 0) == 0
    assert manifest["counts"]["records"]["read"] >= sum(EXPECTED.values())
    rows = sum(pq.read_metadata(shared_run / s["path"]).num_rows for s in manifest["shards"])
    assert rows == sum(s["rows"] for s in manifest["shards"]) and rows > 0
    domains = {r["domain"] for r in manifest["histogram"]["records"]}
    assert {"mcp", "swe", "android", "web", "os", "search", "terminal"} <= domains


def test_hist_png_and_show(shared_run, tmp_path):
    png = tmp_path / "hist.png"
    lwm("hist", str(shared_run), "--png", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000
    shown = lwm("show", str(shared_run), "--index", "0", "--plain").stdout
    assert "⟦w=0⟧<|im_start|>system" in shown and "observations:" in shown
    colored = lwm("show", str(shared_run), "--index", "0").stdout
    assert "\x1b[90m" in colored


def test_validate_single_screens_are_not_trajectories(shared_data):
    """The uiautomator-xml samples are single screens without actions: 21 files, each quarantined as no_actions."""
    report = json.loads(lwm("validate", str(shared_data / "uiautomator-xml"), "--json").stdout)
    assert report == {"format": "uiautomator", "quarantined": 21, "reasons": {"no_actions": 21}, "records": 21,
                      "trajectories": 0, "turns": 0}
