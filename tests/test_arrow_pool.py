"""The CLI chooses Arrow's allocator before pyarrow is imported, and leaves a user's choice alone
(pipeline.arrow_pool). Checked in fresh interpreters: Arrow reads the choice once, when pyarrow is imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.arrow_pool import POOL_VARIABLE, RUN_POOL
from tests.helpers import clean_env

PROBE = "import pipeline.cli, pyarrow as pa; print(pa.default_memory_pool().backend_name)"


def _pool_after_cli_import(value: str | None) -> str:
    env = {k: v for k, v in clean_env().items() if k != POOL_VARIABLE}
    if value is not None:
        env[POOL_VARIABLE] = value
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_the_cli_allocates_arrow_memory_with_the_run_pool():
    assert _pool_after_cli_import(None) == RUN_POOL


@pytest.mark.parametrize("chosen", ["system", "mimalloc"])
def test_a_pool_the_user_chose_is_kept(chosen):
    assert _pool_after_cli_import(chosen) == chosen
