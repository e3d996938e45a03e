"""Hostile input folders: non-UTF-8 file names and symlinks that leave the input root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages.ingest.reading import InputUnit, expand_inputs, iter_jsonl, read_document
from stages.ingest.registry import claims_dir
from tests.helpers import lwm_in_process

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SECRET = "TOP-SECRET-OUTSIDE-FILE-7f3a"


def lwm(*args: str) -> subprocess.CompletedProcess:
    """`lwm ARGS`: a process of its own for a Ray run (it starts its own Ray), in this process otherwise."""
    if "ray" in args:
        return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, timeout=600)
    return lwm_in_process(*args)


def traj(i: int) -> dict:
    return {"traj_id": f"t{i}", "domain": "terminal", "split_key": f"task-{i}",
            "system": {"task_description": f"task {i}", "action_space": "keys"},
            "turns": [{"action": f'[{{"keystrokes": "echo {i}-{j}\\n"}}]', "observation": f"{i}-{j} out"}
                      for j in range(2)]}


def all_output_bytes(out: Path) -> bytes:
    """Every output file except raw/ (native records as read), decompressed where Parquet."""
    blob = b""
    for p in sorted(out.rglob("*")):
        if not p.is_file() or "raw" in p.relative_to(out).parts:
            continue
        if p.suffix == ".parquet":
            blob += json.dumps(pq.read_table(p).to_pylist(), default=str).encode()
        else:
            blob += p.read_bytes()
    return blob


# --- non-UTF-8 file names (9) ---------------------------------------------------------------------


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_non_utf8_file_name_is_read_and_recorded_printably(tmp_path, executor):
    src = tmp_path / "in"
    src.mkdir()
    bad_name = os.path.join(os.fsencode(src), b"caf\xe9-\xff.jsonl")
    with open(bad_name, "w") as f:
        f.write("".join(json.dumps(traj(i)) + "\n" for i in range(3)))
    (src / "good.jsonl").write_text("".join(json.dumps(traj(i)) + "\n" for i in range(3, 6)))
    out = tmp_path / "out"
    extra = ["--num-cpus", "1"] if executor == "ray" else []
    proc = lwm("run", "--executor", executor, "-i", str(src), "-o", str(out), *extra)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    table = pq.read_table(next((out / "trajectories").glob("*.parquet"))).to_pylist()
    assert sorted(r["traj_id"] for r in table) == [f"t{i}" for i in range(6)]
    uris = {r["source"]["uri"] for r in table}
    assert str(src / "caf\\xe9-\\xff.jsonl") in uris
    json.loads((out / "manifest.json").read_text())  # valid UTF-8 JSON
    if executor == "local":  # `lwm validate` reads in-process whatever the executor: checked once
        proc = lwm("validate", str(src))
        assert proc.returncode == 0 and "6 trajectories" in proc.stdout + proc.stderr


# --- symlinks leaving the input root (15) ---------------------------------------------------------


@pytest.fixture()
def outside(tmp_path) -> Path:
    secret = tmp_path / "outside" / "secret.xml"
    secret.parent.mkdir()
    secret.write_text(f'<?xml version="1.0"?><hierarchy><node text="{SECRET}" bounds="[0,0][1,1]"/></hierarchy>')
    return secret


def test_uiautomator_screen_linking_outside_is_not_read(tmp_path, outside):
    src = tmp_path / "in"
    shutil.copytree(FIXTURES / "uiautomator", src)
    screen = src / "ep-0001" / "002.xml"
    screen.unlink()
    screen.symlink_to(outside)
    err = read_document(str(screen))
    assert not isinstance(err, bytes) and err.reason == "link_outside_input"
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--max-quarantine-rate", "1")
    assert proc.returncode == 0, proc.stderr
    assert SECRET.encode() not in all_output_bytes(out)
    assert (out / "trajectories").exists()


def test_walked_links_leaving_the_root(tmp_path, outside):
    src = tmp_path / "in"
    src.mkdir()
    (src / "ok.jsonl").write_text(json.dumps(traj(1)) + "\n")
    data = tmp_path / "outside" / "data.jsonl"
    leaked = traj(2)
    leaked["turns"][0]["observation"] = SECRET
    data.write_text(json.dumps(leaked) + "\n")
    (src / "link.jsonl").symlink_to(data)  # a file link out of the root
    (src / "dirlink").symlink_to(data.parent, target_is_directory=True)  # a folder link out of the root
    inside = src / "sub"
    inside.mkdir()
    (inside / "real.jsonl").write_text(json.dumps(traj(3)) + "\n")
    (src / "alias.jsonl").symlink_to(inside / "real.jsonl")  # a link that stays inside its folder
    units = [u.uri for u in expand_inputs([str(src)], claims_dir=claims_dir)]
    assert not any("dirlink" in u for u in units)
    items = list(iter_jsonl(str(src / "link.jsonl")))
    assert [i.reason for i in items] == ["link_outside_input"]
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--format", "lwm-jsonl",
               "--max-quarantine-rate", "1")
    assert proc.returncode == 0, proc.stderr
    assert SECRET.encode() not in all_output_bytes(out)
    reasons = [r["reason"] for p in (out / "quarantine").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert "link_outside_input" in reasons
    kept = pq.read_table(next((out / "trajectories").glob("*.parquet")), columns=["traj_id"]).column("traj_id")
    assert "t1" in kept.to_pylist() and "t3" in kept.to_pylist() and "t2" not in kept.to_pylist()


def test_links_within_their_folder_are_followed(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "real.jsonl").write_text(json.dumps(traj(1)) + "\n")
    (src / "same.jsonl").symlink_to(src / "real.jsonl")
    assert [loc for loc, _ in iter_jsonl(str(src / "same.jsonl"))] == ["line 1"]
    assert InputUnit(str(src / "same.jsonl")) in expand_inputs([str(src)])
