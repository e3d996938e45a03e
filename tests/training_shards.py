"""Small synthetic shards that follow the SPEC §9 column contract, for the training tests.

Layout: ``<root>/shards/<pool>/part-NNNNN.parquet`` (zstd), ``<root>/manifest.json`` and, last,
``<root>/_SUCCESS``. Samples have learnable structure: each turn is an action of random ids
followed by an observation that counts upward from the action's last id, so a small model can
predict every observation token from the one or two tokens before it.
"""

from __future__ import annotations

import json
import posixpath

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

SYSTEM, USER, ASSISTANT, END = 1, 2, 3, 4
FIRST_CONTENT_ID = 8
CATEGORY_KEEP = (("retrieval", 1.0), ("echo", 0.05), ("boilerplate", 0.1), ("transform", 0.5))
STATS_TYPE = pa.struct([(k, pa.float32()) for k in ("ol", "nov", "jac", "r")])
SPAN_TYPE = pa.struct([("start", pa.int32()), ("end", pa.int32())])
SHARD_SCHEMA = pa.schema(
    [
        ("sample_id", pa.string()),
        ("traj_id", pa.string()),
        ("domain", pa.string()),
        ("pool", pa.string()),
        ("template", pa.string()),
        ("turn_idx", pa.int32()),
        ("total_turns", pa.int32()),
        ("input_ids", pa.list_(pa.int32())),
        ("loss_weight", pa.list_(pa.float32())),
        ("turn_spans", pa.list_(SPAN_TYPE)),
        ("turn_category", pa.list_(pa.string())),
        ("turn_keep", pa.list_(pa.float32())),
        ("turn_stats", pa.list_(STATS_TYPE)),
        ("num_tokens", pa.int32()),
        ("num_loss_tokens", pa.int32()),
    ]
)


def synthetic_sample(rng: np.random.Generator, sample_id: str, pool: str, vocab: int, turns: int) -> dict:
    """One cpt-style sample: system tokens, then per turn an action (weight 0) and a weighted observation."""
    top = vocab - 1
    ids, weights = [SYSTEM, 5, 6, 7], [0.0] * 4
    spans, categories, keeps, stats = [], [], [], []
    for turn in range(turns):
        category, keep = CATEGORY_KEEP[turn % len(CATEGORY_KEEP)]
        action = rng.integers(FIRST_CONTENT_ID, top, size=int(rng.integers(2, 6))).tolist()
        ids += [USER, *action, ASSISTANT]
        weights += [0.0] * (len(action) + 2)
        observation = [
            FIRST_CONTENT_ID + (action[-1] + 1 + k - FIRST_CONTENT_ID) % (top - FIRST_CONTENT_ID) for k in range(5)
        ]
        start = len(ids)
        ids += [*observation, END]
        weights += [keep] * (len(observation) + 1)
        spans.append({"start": start, "end": len(ids)})
        categories.append(category)
        keeps.append(keep)
        stats.append({"ol": 0.1, "nov": 0.9, "jac": 0.1, "r": 2.0})
    return {
        "sample_id": sample_id,
        "traj_id": f"traj-{sample_id}",
        "domain": "terminal",
        "pool": pool,
        "template": "v1",
        "turn_idx": 0,
        "total_turns": turns,
        "input_ids": ids,
        "loss_weight": weights,
        "turn_spans": spans,
        "turn_category": categories,
        "turn_keep": keeps,
        "turn_stats": stats,
        "num_tokens": len(ids),
        "num_loss_tokens": sum(w > 0 for w in weights),
    }


def write_synthetic_shards(
    root: str,
    *,
    rows_per_file: tuple[int, ...] = (7, 5),
    pool: str = "cpt",
    row_group_rows: int = 3,
    vocab: int = 64,
    seed: int = 0,
    max_turns: int = 3,
    success: bool = True,
    manifest_max_tokens: bool = True,
    long_every: int = 0,
    long_turns: int = 0,
) -> str:
    """Write one pool of synthetic shards under `root` (any fsspec URL); returns the pool folder.

    `manifest_max_tokens` records each shard's longest sample in the manifest, as `lwm run` does.
    With `long_every` > 0, every `long_every`-th sample has `long_turns` turns instead (a long one).
    """
    rng = np.random.default_rng(seed)
    fs, base = fsspec.core.url_to_fs(root)
    pool_dir = posixpath.join(base, "shards", pool)
    fs.makedirs(pool_dir, exist_ok=True)
    shard_list, counter = [], 0
    for file_number, rows in enumerate(rows_per_file):
        samples = []
        for _ in range(rows):
            turns = int(rng.integers(1, max_turns + 1))
            if long_every and counter % long_every == long_every - 1:
                turns = long_turns
            samples.append(synthetic_sample(rng, f"{pool}-{counter:05d}", pool, vocab, turns))
            counter += 1
        table = pa.Table.from_pylist(samples, schema=SHARD_SCHEMA)
        name = f"part-{file_number:05d}.parquet"
        with fs.open(posixpath.join(pool_dir, name), "wb") as handle:
            pq.write_table(table, handle, compression="zstd", row_group_size=row_group_rows)
        entry = {"path": f"shards/{pool}/{name}", "rows": rows}
        if manifest_max_tokens:
            entry["max_tokens"] = max(s["num_tokens"] for s in samples)
        shard_list.append(entry)
    manifest = {"samples_per_pool": {pool: counter}, "shards": shard_list}
    with fs.open(posixpath.join(base, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    if success:
        with fs.open(posixpath.join(base, "_SUCCESS"), "w") as handle:
            handle.write("")
    return pool_dir if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(pool_dir)


def write_tiny_qwen(path: str, vocab: int = 96, seed: int = 0) -> str:
    """Save a randomly initialised, tiny Qwen3 causal LM (real attention, rotary embeddings, GQA) to `path`.

    Built from a config in the test, nothing downloaded; needs transformers.
    """
    import torch
    import transformers

    config = transformers.Qwen3Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    return path
