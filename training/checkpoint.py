"""Checkpoints under ``--out``: written whole to a new folder, then published by an atomic pointer.

Layout::

    out/latest                    the name of the newest complete checkpoint ("step-00000100")
    out/step-00000100/model.pt    model state dict
                      optimizer.pt, scheduler.pt
                      trainer.json  step, world size, dataloader workers, the run's settings
                      data_state.json  one `ShardDataset.state_dict()` per rank

A killed run leaves at most an unpublished ``*.tmp`` folder, which is ignored. Checkpoints are
loaded with ``weights_only=True``: tensors and plain containers, never pickled code.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

import torch

from schemas.errors import ConfigError

LATEST = "latest"
KEEP_CHECKPOINTS = 2


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint."""

    step: int
    model: dict[str, Any]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    trainer: dict[str, Any]
    data_states: list[dict[str, Any]]


def _step_name(step: int) -> str:
    return f"step-{step:08d}"


def _write_json(path: str, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=1, sort_keys=True)


def save_checkpoint(
    out: str,
    step: int,
    model: dict[str, Any],
    optimizer: dict[str, Any],
    scheduler: dict[str, Any],
    trainer: dict[str, Any],
    data_states: list[dict[str, Any]],
) -> str:
    """Write a checkpoint for `step`, point ``latest`` at it, drop the older ones; returns its folder."""
    os.makedirs(out, exist_ok=True)
    final = os.path.join(out, _step_name(step))
    staging = final + ".tmp"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    torch.save(model, os.path.join(staging, "model.pt"))
    torch.save(optimizer, os.path.join(staging, "optimizer.pt"))
    torch.save(scheduler, os.path.join(staging, "scheduler.pt"))
    _write_json(os.path.join(staging, "trainer.json"), {**trainer, "step": step})
    _write_json(os.path.join(staging, "data_state.json"), data_states)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    pointer = os.path.join(out, LATEST + ".tmp")
    with open(pointer, "w", encoding="utf-8") as handle:
        handle.write(_step_name(step))
    os.replace(pointer, os.path.join(out, LATEST))
    published = sorted(n for n in os.listdir(out) if n.startswith("step-") and not n.endswith(".tmp"))
    for old in published[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(os.path.join(out, old), ignore_errors=True)
    return final


def load_checkpoint(out: str) -> Checkpoint | None:
    """The checkpoint ``latest`` points at, or None when `out` has none."""
    pointer = os.path.join(out, LATEST)
    if not os.path.isfile(pointer):
        return None
    with open(pointer, encoding="utf-8") as handle:
        folder = os.path.join(out, handle.read().strip())
    if not os.path.isdir(folder):
        raise ConfigError(f"{pointer} names {folder}, which does not exist")

    def tensors(name: str) -> dict[str, Any]:
        return torch.load(os.path.join(folder, name), map_location="cpu", weights_only=True)

    with open(os.path.join(folder, "trainer.json"), encoding="utf-8") as handle:
        trainer = json.load(handle)
    with open(os.path.join(folder, "data_state.json"), encoding="utf-8") as handle:
        data_states = json.load(handle)
    return Checkpoint(
        int(trainer["step"]),
        tensors("model.pt"),
        tensors("optimizer.pt"),
        tensors("scheduler.pt"),
        trainer,
        data_states,
    )
