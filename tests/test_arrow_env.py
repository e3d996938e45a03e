"""A run converts with pyarrow without importing pandas, and pandas still works afterwards (pipeline.arrow_env).

pyarrow imports pandas, where it is installed, at its first conversion of Python objects, to learn
whether pandas is there; a run never hands it a pandas object, so each process of a run skips that
import (about 0.3 s and 33 MB here). Checked in fresh interpreters, since this test process has
imported pandas long ago.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env

pytest.importorskip("pandas")

RUN_THEN_USE_PANDAS = """
import json, sys
from pathlib import Path
from pipeline.run import run_pipeline
from tests.helpers import corpus_config, write_corpus

root = Path(sys.argv[1])
manifest = run_pipeline(corpus_config([str(write_corpus(root / "in", files=2, per_file=25))], root / "out"),
                        echo=lambda m: None)
seen = {"samples": sum(manifest["counts"]["samples"].values()), "after_run": "pandas" in sys.modules}

import pandas as pd
import pyarrow as pa

df = pa.table({"a": [1, 2], "b": ["x", "y"]}).to_pandas()
seen["to_pandas"] = [list(df.columns), df.shape[0], type(df).__module__.split(".")[0]]
seen["from_pandas"] = pa.Table.from_pandas(pd.DataFrame({"x": [1.5, 2.5]}), preserve_index=False).column("x").to_pylist()
seen["series"] = pa.array(pd.Series([3, 4], dtype="int16")).type.bit_width
print(json.dumps(seen))
"""


def test_a_run_never_imports_pandas_and_pandas_works_after_it(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-c", RUN_THEN_USE_PANDAS, str(tmp_path)], env=clean_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["samples"] > 0
    assert seen["after_run"] is False
    assert seen["to_pandas"] == [["a", "b"], 2, "pandas"]
    assert seen["from_pandas"] == [1.5, 2.5]
    assert seen["series"] == 16  # a pandas Series is still seen as one (its dtype kept), once pandas is in use


def test_the_probe_changes_nothing_where_pandas_is_already_imported():
    code = ("import sys, pandas as pd, pyarrow as pa\n"
            "from pipeline.arrow_env import skip_pandas_probe\n"
            "skip_pandas_probe()\n"
            "print(pa.array(pd.Series([1, 2], dtype='int8')).type, 'pandas' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["int8", "True"]
