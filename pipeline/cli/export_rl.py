"""``lwm export verl`` and ``lwm export trl``: the rl pool of a finished run as RL datasets.

Both write ``OUT_DIR/train.parquet`` (and ``OUT_DIR/val.parquet`` with ``--val-fraction``; without it, a
``val.parquet`` an earlier export left is removed), one row per rl sample in sample-id order. The split is a stable hash of each sample's task (the trajectory's
``split_key``, by which the pools are disjoint too), so every turn of a task lands on one side: a val row
never shares its history with a train row.

verl (the columns its ``RLHFDataset`` reads and its reward manager passes to ``compute_score``)::

    data_source   "lwmkit/<domain>"
    prompt        the rendered chat: [{"role": "system", …}, {"role": "user", …}, {"role": "assistant", …}, …, {"role": "user", …}]
    ability       "world_model"
    reward_model  {"style": "rule", "ground_truth": <reference observation>}
    extra_info    {"index", "split", "sample_id", "traj_id", "domain", "template", "turn_idx",
                   "total_turns", "verifier", "current_prompt", "history": [{"prompt", "observation"}]}

``style`` is ``rule`` because the score comes from a reward function (`stages.reward.frameworks.
compute_score`, which calls the judge itself), not from a reward model verl serves. ``history`` and
``current_prompt`` repeat the prompt's turns for the judge, since verl's ``compute_score`` never sees
the prompt.

TRL (GRPO; conversational prompt plus the columns `stages.reward.frameworks.trl_reward` reads)::

    prompt        the same chat messages
    reference     the reference observation
    domain, verifier, sample_id, traj_id, turn_idx, total_turns
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any

import click
import pyarrow as pa

from pipeline.cli.export import export_group
from pipeline.cli.run_files import finished_run, rl_shard_rows, split_keys
from pipeline.errors import handle_errors
from pipeline.object_stores import check_bucket
from pipeline.outputs import AtomicParquetWriter, out_fs
from schemas.errors import ConfigError
from stages.reward.core import split_prompt
from stages.reward.verifiers import verifier_kind

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
HISTORY = pa.list_(pa.struct([("prompt", pa.string()), ("observation", pa.string())]))

VERL_SCHEMA = pa.schema([
    ("data_source", pa.string()),
    ("prompt", MESSAGES),
    ("ability", pa.string()),
    ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
    ("extra_info", pa.struct([
        ("index", pa.int64()),
        ("split", pa.string()),
        ("sample_id", pa.string()),
        ("traj_id", pa.string()),
        ("domain", pa.string()),
        ("template", pa.string()),
        ("turn_idx", pa.int32()),
        ("total_turns", pa.int32()),
        ("verifier", pa.string()),
        ("current_prompt", pa.string()),
        ("history", HISTORY),
    ])),
])

TRL_SCHEMA = pa.schema([
    ("prompt", MESSAGES),
    ("reference", pa.string()),
    ("domain", pa.string()),
    ("verifier", pa.string()),
    ("sample_id", pa.string()),
    ("traj_id", pa.string()),
    ("turn_idx", pa.int32()),
    ("total_turns", pa.int32()),
])

_COLUMNS = ["sample_id", "traj_id", "domain", "template", "turn_idx", "total_turns", "messages", "reference"]


def rl_samples(run_dir: str) -> list[dict[str, Any]]:
    """Every row of a finished run's rl shards (the columns the exports need, and ``split_key``), by sample id."""
    fs, root = finished_run(run_dir)
    rows = rl_shard_rows(fs, root, _COLUMNS)
    tasks = split_keys(fs, root, {row["traj_id"] for row in rows})
    for row in rows:
        if "verifier" not in row:  # shards written before the column existed
            row["verifier"] = verifier_kind(row["domain"], row["reference"])
        row["split_key"] = tasks.get(row["traj_id"]) or row["traj_id"]  # a trajectory left out of the layer: its own task
    if not rows:
        raise ConfigError(f"{run_dir}: the rl pool is empty (pools.ratios.rl, rl_prompt_cap?)")
    return sorted(rows, key=lambda r: r["sample_id"])


def split_of(split_key: str, val_fraction: float) -> str:
    """``val`` for a stable `val_fraction` share of tasks (split keys), else ``train``."""
    bucket = int(hashlib.sha256(split_key.encode()).hexdigest()[:8], 16) / 0x100000000
    return "val" if bucket < val_fraction else "train"


def verl_row(sample: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """One verl RL dataset row."""
    history, current = split_prompt(sample["messages"])
    return {
        "data_source": f"lwmkit/{sample['domain']}",
        "prompt": sample["messages"],
        "ability": "world_model",
        "reward_model": {"style": "rule", "ground_truth": sample["reference"]},
        "extra_info": {
            "index": index, "split": split, "sample_id": sample["sample_id"], "traj_id": sample["traj_id"],
            "domain": sample["domain"], "template": sample["template"], "turn_idx": sample["turn_idx"],
            "total_turns": sample["total_turns"], "verifier": sample["verifier"], "current_prompt": current,
            "history": [{"prompt": p, "observation": o} for p, o in history],
        },
    }


def trl_row(sample: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """One TRL GRPO dataset row."""
    return {"prompt": sample["messages"], "reference": sample["reference"],
            **{k: sample[k] for k in ("domain", "verifier", "sample_id", "traj_id", "turn_idx", "total_turns")}}


FORMATS = {"verl": (VERL_SCHEMA, verl_row), "trl": (TRL_SCHEMA, trl_row)}


def write_rl_dataset(run_dir: str, out_dir: str, fmt: str, val_fraction: float = 0.0) -> tuple[dict[str, int], int, str]:
    """Write the rl pool of `run_dir` for `fmt` (verl | trl) under `out_dir`; (rows per split, tasks, the path of a
    ``val.parquet`` an earlier export left there and this one removed, or "").

    The export owns both files: without a val split, an older ``val.parquet`` would hold rows that are now in
    train, and a trainer still pointed at it would validate on training data.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError(f"--val-fraction must be in [0, 1), not {val_fraction}")
    if not out_dir.strip():  # it would name the folder lwm runs in, and the export would land there
        raise ConfigError(f"the output folder name is empty ({out_dir!r}); give the folder to write train.parquet into")
    schema, make_row = FORMATS[fmt]
    samples = rl_samples(run_dir)
    fs, root = out_fs(out_dir)
    check_bucket(fs, root, out_dir)
    splits = ["train", "val"] if val_fraction > 0 else ["train"]
    writers = {s: AtomicParquetWriter(fs, posixpath.join(root, f"{s}.parquet"), schema, rows_per_group=512) for s in splits}
    counts = dict.fromkeys(splits, 0)
    try:
        for sample in samples:
            split = split_of(sample["split_key"], val_fraction)
            writers[split].write_row(make_row(sample, counts[split], split))
            counts[split] += 1
        for w in writers.values():
            w.close()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    stale = posixpath.join(root, "val.parquet")
    if "val" in splits or not fs.isfile(stale):
        stale = ""
    else:
        fs.rm(stale)
    return counts, len({sample["split_key"] for sample in samples}), stale


def _export_command(fmt: str, help_text: str) -> click.Command:
    """``lwm export <fmt> RUN_DIR OUT_DIR [--val-fraction F]``: the same command for every format of `FORMATS`."""

    @export_group.command(fmt, help=help_text)
    @click.argument("run_dir")
    @click.argument("out_dir")
    @click.option("--val-fraction", type=float, default=0.0, show_default=True,
                  help="Share of tasks in val.parquet (every turn of a task on one side).")
    @handle_errors
    def export_cmd(run_dir: str, out_dir: str, val_fraction: float) -> None:
        counts, tasks, stale = write_rl_dataset(run_dir, out_dir, fmt, val_fraction)
        parts = ", ".join(f"{n} {s}" for s, n in counts.items())
        click.echo(f"wrote {fmt} RL dataset to {out_dir}: {parts} rows", err=True)
        if stale:
            click.echo(f"removed the val.parquet an earlier export left in {out_dir}: its rows are in this train.parquet "
                       "(--val-fraction writes a new one)", err=True)
        for split in (s for s, n in counts.items() if not n):  # the split is by a hash of each task
            click.echo(f"warning: {split}.parquet has no rows: the {tasks} tasks of {sum(counts.values())} rl samples "
                       f"are too few for --val-fraction {val_fraction:g}", err=True)

    return export_cmd


verl_cmd = _export_command("verl", """Write the rl pool of RUN_DIR as a verl RL dataset (OUT_DIR/train.parquet).

    \b
    Train with the world-model reward:
      reward.custom_reward_function.path=<lwmkit>/stages/reward/frameworks.py
      reward.custom_reward_function.name=compute_score
    """)
trl_cmd = _export_command("trl", """Write the rl pool of RUN_DIR as a TRL GRPO dataset (OUT_DIR/train.parquet).

    \b
    Train with the world-model reward:
      GRPOTrainer(..., reward_funcs=[stages.reward.frameworks.trl_reward])
    """)
