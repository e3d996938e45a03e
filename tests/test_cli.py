"""The ``lwm`` group itself: ``lwm --version``."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_version_prints_the_installed_package_version():
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "--version"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"lwm {importlib.metadata.version('lwmkit')}\n"
