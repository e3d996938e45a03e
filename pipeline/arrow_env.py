"""pyarrow without the pandas import it does not need.

pyarrow decides once per process whether pandas is installed, at its first conversion of Python
objects (``pa.array``, ``Table.from_pylist``, even ``Schema.empty_table``), by importing it. Where
pandas is installed that import costs about 0.3 s and 33 MB (measured after the CLI's own imports) in
every process that converts anything: the CLI and each Ray worker, although no task of a run uses pandas.
"""

from __future__ import annotations

import sys

import pyarrow as pa

_checked = False


def skip_pandas_probe() -> None:
    """Let pyarrow's first check find no pandas, without importing it; idempotent.

    Nothing changes where pandas is already imported. pandas stays importable: an ``import pandas``
    anywhere works as usual, and pyarrow imports it itself when a call needs it (``to_pandas``,
    ``Table.from_pandas``); only pyarrow's quiet checks (is this object a pandas one?) answer no
    until then, and no task of a run hands pyarrow a pandas object.
    """
    global _checked
    if _checked:
        return
    _checked = True
    if "pandas" in sys.modules:
        return
    blocker = _NoPandas()
    sys.meta_path.insert(0, blocker)
    try:
        pa.array([0])  # pyarrow's check: no pandas, and it does not try again on its own
    finally:
        sys.meta_path.remove(blocker)


class _NoPandas:
    """An import finder under which ``import pandas`` raises ImportError, as where it is not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
