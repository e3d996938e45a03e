"""The exploration notebook runs against a small run, so it never rots."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.helpers import lwm_in_process, shards_corpus

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "mask_histograms.ipynb"


def test_mask_histograms_notebook_executes(tmp_path, monkeypatch):
    shards_corpus(tmp_path / "in" / "a.jsonl", n=40)
    out = tmp_path / "run"
    done = lwm_in_process("run", "--executor", "local", "-i", str(tmp_path / "in"), "-o", str(out), "--progress", "off")
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("LWM_RUN_DIR", str(out))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                   env={**os.environ}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "== total ==" in outputs and "turns plotted" in outputs
    assert "=== retrieval" in outputs
