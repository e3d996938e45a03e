"""Shared fixtures: the real third-party samples in ../shared/data (skipped when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED_DATA = Path(os.environ.get("LWM_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ../shared/data, links resolved (the URIs `expand_inputs` gives are: a checkout may reach the data
    through a linked folder); the test is skipped with a clear message when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real sample data not found at {SHARED_DATA} (set LWM_SHARED_DATA to its path)")
    return SHARED_DATA.resolve()


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
