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
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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


def check_category_names(files: Sequence[str], names: Iterable[str],
                          manifests: dict[str, tuple[dict[str, Any] | None, str]] | None = None) -> None:
    """Refuse a ``--category-weight`` naming no category of the masking tables the shards were made with, nor a
    span of the WMAT pools (a typo would otherwise change nothing, silently), and warn (a `Notice`) of one that
    the tables of only some of the runs have. Shards whose run manifest is not found are not checked. `manifests`: `training.long_samples.run_manifests` of `files`, where the caller has it."""
    from masking import load_table
    from stages.wmat import OBSERVATION, POLICY, WORLD_MODEL
    from training.long_samples import run_manifests

    spans = {WORLD_MODEL, POLICY, OBSERVATION}  # the spans of the WMAT pools (`stages.wmat`)
    per_run: dict[str, set[str]] = {}  # run root -> the categories of its masking table
    for manifest, root in (run_manifests(files) if manifests is None else manifests).values():
        if manifest is None:
            return
        table = load_table(((manifest.get("config") or {}).get("masking") or {}).get("table"))
        per_run[root] = {c.name for c in table.categories}
    known = spans.union(*per_run.values())
    unknown = sorted(set(names) - known)
    if unknown:
        raise ShardError(f"--category-weight {unknown[0]}: no such category in the masking table of these shards "
                         f"({', '.join(sorted(known))})")
    for name in sorted(set(names) - spans):
        lacking = sorted(root for root, categories in per_run.items() if name not in categories)
        if lacking:  # runs made with different masking tables: the override reaches only some of the shards
            warnings.warn(Notice(f"--category-weight {name}: the masking table of {', '.join(lacking)} has no such "
                                 "category; the shards of that run keep their weights"), stacklevel=2)
