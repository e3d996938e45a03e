"""Re-weighting turn categories at load time, from the ``turn_spans`` and ``turn_category`` columns.

Rule (replace, not multiply): inside the token span ``[start, end)`` of an observation whose
category has an override, every token whose stored weight is above zero gets the override value;
tokens stored with weight 0 stay 0, because a zero there means the token is masked for another
reason (a history turn of an sft sample, a token dropped by the ``token`` keep mode). So
``echo=0`` removes echo observations from the loss, and ``echo=1`` trains on them at full weight
instead of their keep ratio. Tokens outside every overridden span are never touched.
"""

from __future__ import annotations

import math
import posixpath
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fsspec
import numpy as np

from schemas.errors import Notice
from training.shards import ShardError


def parse_category_weights(items: Iterable[str]) -> dict[str, float]:
    """``["echo=0", "boilerplate=0.5"]`` → ``{"echo": 0.0, "boilerplate": 0.5}``."""
    weights: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or not name or not math.isfinite(number) or number < 0:
            raise ShardError(f"category weight {item!r}: expected CATEGORY=WEIGHT with a finite weight >= 0")
        weights[name] = number
    return weights


def apply_category_weights(
    weights: np.ndarray,
    spans: Sequence[Mapping[str, int]],
    categories: Sequence[str],
    overrides: Mapping[str, float],
    where: str = "",
) -> np.ndarray:
    """A copy of `weights` with the overridden categories' non-zero span weights replaced."""
    if len(spans) != len(categories):
        raise ShardError(f"{where}: {len(spans)} turn_spans but {len(categories)} turn_category values")
    result = weights.copy()
    for span, category in zip(spans, categories):
        start, end = int(span["start"]), int(span["end"])
        if not 0 <= start <= end <= len(weights):
            raise ShardError(f"{where}: turn span [{start}, {end}) outside the sample's {len(weights)} tokens")
        if category in overrides:
            piece = result[start:end]
            piece[piece > 0] = overrides[category]
    return result


def _pool_of(path: str, root: str) -> str | None:
    """The pool of a shard file at `path` of the run at `root` (``shards/<pool>/…``); None for other files."""
    parts = posixpath.relpath(path, root).split("/") if root else []
    return parts[1] if len(parts) > 2 and parts[0] == "shards" else None


def _categories_in_file(uri: str) -> set[str]:
    """The ``turn_category`` values of one shard file (that column alone is read)."""
    import pyarrow.compute as pc

    from training.shards import open_parquet

    parquet = open_parquet(uri)
    try:
        column = parquet.read(columns=["turn_category"]).column("turn_category")
    finally:
        parquet.close()
    return {str(value) for value in pc.unique(pc.list_flatten(column)).to_pylist() if value is not None}


def shard_categories(files: Sequence[str], manifests: dict[str, tuple[dict[str, Any] | None, str]]) -> dict[str, set[str]]:
    """Per run root (a folder without a run: that folder), the categories its shards among `files` hold. A pool
    of a run whose manifest has the category histogram is read from it (a record per category a sample of the
    pool trains on); other files (the WMAT pools, runs without a manifest) from their ``turn_category`` column."""
    held: dict[str, set[str]] = {}
    from_histogram: dict[tuple[str, str], set[str]] = {}
    for uri in files:
        path = fsspec.core.url_to_fs(uri)[1]
        manifest, root = manifests[posixpath.dirname(path)]
        records = ((manifest or {}).get("histogram") or {}).get("records")
        pool = _pool_of(path, root)
        if isinstance(records, list) and pool is not None:
            if (root, pool) not in from_histogram:
                from_histogram[root, pool] = {str(r["category"]) for r in records
                                              if isinstance(r, dict) and r.get("pool") == pool and "category" in r}
            found = from_histogram[root, pool]
        else:
            found = _categories_in_file(uri)
        held.setdefault(root or posixpath.dirname(path), set()).update(found)
    return held


def check_category_names(files: Sequence[str], names: Iterable[str],
                          manifests: dict[str, tuple[dict[str, Any] | None, str]] | None = None) -> None:
    """Refuse a ``--category-weight`` naming a category none of the shards holds (a typo, or a category of other
    shards: the WMAT spans of a cpt pool) in one line naming those they hold: it would otherwise change nothing,
    silently. Warn (a `Notice`) of one that the masking tables of only some of the runs have. `manifests`:
    `training.long_samples.run_manifests` of `files`, where the caller has it."""
    from masking import load_table
    from stages.wmat import OBSERVATION, POLICY, WORLD_MODEL
    from training.long_samples import run_manifests

    manifests = run_manifests(files) if manifests is None else manifests
    held = set().union(*shard_categories(files, manifests).values())
    unknown = sorted(set(names) - held)
    if unknown:
        raise ShardError(f"--category-weight {unknown[0]}: no such category in these shards; they hold "
                         f"{', '.join(sorted(held)) or 'none'}")
    per_run: dict[str, set[str]] = {}  # run root -> the categories of its masking table
    for manifest, root in manifests.values():
        if manifest is not None and root not in per_run:
            per_run[root] = {c.name for c in load_table(((manifest.get("config") or {}).get("masking") or {}).get("table")).categories}
    for name in sorted(set(names) - {WORLD_MODEL, POLICY, OBSERVATION}):  # the WMAT spans are no table's categories
        lacking = sorted(root for root, categories in per_run.items() if name not in categories)
        if lacking:  # runs made with different masking tables: the override reaches only some of the shards
            warnings.warn(Notice(f"--category-weight {name}: the masking table of {', '.join(lacking)} has no such "
                                 "category; the shards of that run keep their weights"), stacklevel=2)
