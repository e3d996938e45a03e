"""The dedup stage's settings, resolved once on the driver from the config and the ingest counts."""

from __future__ import annotations

import math
from typing import Any

from schemas.errors import ConfigError
from schemas.stats import Stats
from stages.decontam import is_active
from stages.dedup import lsh_params

BYTES_PER_BUCKET = 128 << 20  # what one reduce task reads and sorts, by estimated bytes (not rows)
_ROW_BYTES = 64  # a bucket row without its signature: keys, kind, band, sizes, a traj_id
_CHARS_PER_WORD = 6
EVIDENCE_BUCKETS_PER_PART = 4


def dedup_settings(cfg: dict[str, Any], ingest_stats: Stats) -> dict[str, Any]:
    """Everything the tasks need, resolved once on the driver (JSON-serializable)."""
    d = cfg["dedup"]
    if not 0 < float(d["threshold"]) <= 1:
        raise ConfigError(f"dedup.threshold must be within (0, 1], not {d['threshold']!r}")
    if int(d["shingle"]) < 1 or int(d["ngram"]) < 1 or int(d["num_perm"]) < 1:
        raise ConfigError("dedup.shingle, dedup.ngram and dedup.num_perm must be positive integers")
    try:
        bands, rows = lsh_params(float(d["threshold"]), int(d["num_perm"]), int(d.get("bands") or 0))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not (0 <= float(d["ngram_common_share"]) <= 1 and 0 < float(d["ngram_overlap"]) <= 1):
        raise ConfigError("dedup.ngram_common_share must be within [0, 1] and dedup.ngram_overlap within (0, 1]")
    if int(d["ngram_common_min_docs"]) < 1 or int(d["ngram_min_shared"]) < 1:
        raise ConfigError("dedup.ngram_common_min_docs and dedup.ngram_min_shared must be positive integers")
    decontam = is_active(cfg)
    settings = {
        "exact": bool(d["exact"]), "near": bool(d["near"]), "threshold": float(d["threshold"]),
        "num_perm": int(d["num_perm"]), "seed": int(d["seed"]), "shingle": int(d["shingle"]),
        "bands": bands, "rows": rows, "ngram": int(d["ngram"]), "decontam": decontam,
        "ngram_common_share": float(d["ngram_common_share"]),
        "ngram_common_min_docs": int(d["ngram_common_min_docs"]),
        "ngram_overlap": float(d["ngram_overlap"]),
        "ngram_min_shared": int(d["ngram_min_shared"]),
        "near_specific_share": float(d["near_specific_share"]),
        "pools": {"ratios": dict(cfg["pools"]["ratios"]), "seed": cfg["pools"]["seed"]},
    }
    n_traj = ingest_stats.get("trajectories.kept")
    # A band row carries its signature (4 bytes a permutation), so buckets are sized by bytes, not rows.
    est_rows = n_traj * (1 + bands) + (ingest_stats.get("chars.kept") / _CHARS_PER_WORD if decontam else 0)
    est_bytes = est_rows * _ROW_BYTES + n_traj * bands * 4 * int(d["num_perm"])
    settings["buckets"] = int(d.get("buckets") or max(1, math.ceil(est_bytes / BYTES_PER_BUCKET)))
    # Partitions of the decontamination evidence (by evaluation record): fewer than buckets, since the
    # evidence is a small part of the bucket rows and each reduce task writes one file per partition.
    settings["evidence_parts"] = max(1, math.ceil(settings["buckets"] / EVIDENCE_BUCKETS_PER_PART))
    return settings
