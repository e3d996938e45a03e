"""The shard contract (SPEC §9): what trainers read from ``shards/<pool>/part-NNNNN.parquet``."""

from __future__ import annotations

import pyarrow as pa

SPAN_TYPE = pa.struct([("start", pa.int32()), ("end", pa.int32())])
STATS_TYPE = pa.struct([("ol", pa.float32()), ("nov", pa.float32()), ("jac", pa.float32()), ("r", pa.float32())])
MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string())])

_PROVENANCE = [
    ("sample_id", pa.string()),
    ("traj_id", pa.string()),
    ("domain", pa.string()),
    ("pool", pa.string()),
    ("template", pa.string()),
    ("turn_idx", pa.int32()),
    ("total_turns", pa.int32()),
]
# Per-turn labels and the token count, in both the weighted pools and the rl pool.
_TURN_LABELS = [
    ("turn_category", pa.list_(pa.string())),
    ("turn_keep", pa.list_(pa.float32())),
    ("turn_stats", pa.list_(STATS_TYPE)),
    ("num_tokens", pa.int32()),
]

SHARD_SCHEMA = pa.schema(
    [
        *_PROVENANCE,
        ("input_ids", pa.list_(pa.int32())),
        ("loss_weight", pa.list_(pa.float32())),
        ("turn_spans", pa.list_(SPAN_TYPE)),
        *_TURN_LABELS,
        ("num_loss_tokens", pa.int32()),
    ]
)

# The rl pool stores the prompt and the reference observation instead of weights, and the kind of
# rule verifier the reference allows (`stages.reward.verifiers`; "none" when it allows none).
RL_SCHEMA = pa.schema(
    [
        *_PROVENANCE,
        ("prompt_ids", pa.list_(pa.int32())),
        ("reference", pa.string()),
        ("messages", pa.list_(MESSAGE_TYPE)),
        *_TURN_LABELS,
        ("verifier", pa.string()),
    ]
)


def schema_for(pool: str) -> pa.Schema:
    return RL_SCHEMA if pool == "rl" else SHARD_SCHEMA
