"""Checkpoints under ``--out``: written whole to a new folder, then published by an atomic pointer.

Layout::

    out/latest                    the name of the newest complete checkpoint ("step-00000100")
    out/step-00000100/model.pt    model state dict
                      optimizer.pt, scheduler.pt
                      trainer.json  step, world size, dataloader workers, the run's settings
                      data_state.json  one `ShardDataset.state_dict()` per rank
                      sharded/      with --fsdp, instead of model.pt and optimizer.pt: every
                                    rank's shards (torch.distributed.checkpoint)
    out/_lock                     while a run trains into the folder (`checkpoint_lock`)

A killed run leaves at most an unpublished ``*.tmp`` folder, which is ignored. A write that fails
(a full disk) removes the folder it was staging and ends with an OSError naming the file, and
``latest`` still names the last whole checkpoint: every file is flushed to the disk before the
renames that publish it. Checkpoints are loaded with ``weights_only=True``: tensors and plain
containers, never pickled code.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import torch

from schemas.errors import ConfigError
from schemas.locks import folder_lock

LATEST = "latest"
LOCK = "_lock"
KEEP_CHECKPOINTS = 2


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint."""

    step: int
    model: dict[str, Any] | None  # None for a sharded checkpoint: see `load_sharded_state`
    optimizer: dict[str, Any] | None
    scheduler: dict[str, Any]
    trainer: dict[str, Any]
    data_states: list[dict[str, Any]]
    folder: str = ""


SHARDED = "sharded"


def _step_name(step: int) -> str:
    return f"step-{step:08d}"


def _os_error_of(failure: BaseException) -> OSError | None:
    """The operating-system error behind `failure`: itself, or one in its chain (torch's archive writer turns the
    OSError of the file object it writes to into a RuntimeError, and a full disk may surface first when the file
    is flushed on closing, with torch's error as its context)."""
    seen: set[int] = set()
    current: BaseException | None = failure
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError) and current.errno is not None:
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _write_file(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Write a new file through `write`, flushed to the disk before it is published by a rename: a full disk (or any
    failed write) is an OSError naming `path`, whatever layer noticed it."""
    try:
        with open(path, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
    except (OSError, RuntimeError) as failure:
        cause = _os_error_of(failure)
        if cause is None:
            raise  # not an error of the file: torch's own
        raise OSError(cause.errno, cause.strerror, path) from None


def _save(obj: Any, path: str) -> None:
    _write_file(path, lambda handle: torch.save(obj, handle))


def _write_json(path: str, value: Any) -> None:
    _write_file(path, lambda handle: handle.write(json.dumps(value, indent=1, sort_keys=True).encode()))


def save_checkpoint(
    out: str,
    step: int,
    model: dict[str, Any] | None,
    optimizer: dict[str, Any] | None,
    scheduler: dict[str, Any],
    trainer: dict[str, Any],
    data_states: list[dict[str, Any]],
    sharded: dict[str, Any] | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> str:
    """Write a checkpoint for `step`, point ``latest`` at it, drop the older ones; returns its folder.

    Whole checkpoints are written by rank 0 alone. A `sharded` state (see `sharded_state`) is
    written by every rank at once, each its own shards; all ranks call this function then.
    """
    final = os.path.join(out, _step_name(step))
    staging = final + ".tmp"
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
    if sharded is not None:
        import torch.distributed.checkpoint as dcp

        if world_size > 1:
            torch.distributed.barrier()  # the staging folder exists before any rank writes into it
        dcp.save(sharded, checkpoint_id=os.path.join(staging, SHARDED))
        if world_size > 1:
            torch.distributed.barrier()
        if rank != 0:
            return final
    pointer = os.path.join(out, LATEST + ".tmp")
    try:
        if sharded is None:
            _save(model, os.path.join(staging, "model.pt"))
            _save(optimizer, os.path.join(staging, "optimizer.pt"))
        _save(scheduler, os.path.join(staging, "scheduler.pt"))
        _write_json(os.path.join(staging, "trainer.json"), {**trainer, "step": step})
        _write_json(os.path.join(staging, "data_state.json"), data_states)
        # the pointer's bytes too before anything is renamed: after that, only renames, which take no space
        _write_file(pointer, lambda handle: handle.write(_step_name(step).encode()))
    except BaseException:
        # a full disk: the half-written checkpoint gives its space back, and ``latest`` still names the last whole one
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(pointer)
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    os.replace(pointer, os.path.join(out, LATEST))
    published = sorted(n for n in os.listdir(out) if n.startswith("step-") and not n.endswith(".tmp"))
    for old in published[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(os.path.join(out, old), ignore_errors=True)
    return final


@contextlib.contextmanager
def checkpoint_lock(out: str) -> Iterator[None]:
    """One run at a time in a checkpoint folder (`schemas.locks.folder_lock` on ``out/_lock``): two runs would
    otherwise publish and prune each other's checkpoints; the second is one line at once instead."""
    os.makedirs(out, exist_ok=True)
    busy = f"{out} is in use by another lwm train; wait for it to end or choose another --out"
    with folder_lock(os.path.join(out, LOCK), busy):
        yield


def sharded_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """This rank's shards of the model and optimizer state, as torch.distributed.checkpoint saves them."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def load_sharded_state(folder: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load the sharded model and optimizer state of the checkpoint in `folder` into this rank's shards."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    path = os.path.join(folder, SHARDED)
    if not os.path.isdir(path):
        raise ConfigError(f"{folder}: no {SHARDED}/ folder; this checkpoint was not written with --fsdp")
    state = sharded_state(model, optimizer)
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def load_checkpoint(out: str) -> Checkpoint | None:
    """The checkpoint ``latest`` points at, or None when `out` has none."""
    pointer = os.path.join(out, LATEST)
    if not os.path.isfile(pointer):
        return None
    with open(pointer, encoding="utf-8") as handle:
        folder = os.path.join(out, handle.read().strip())
    if not os.path.isdir(folder):
        raise ConfigError(f"{pointer} names {folder}, which does not exist")

    def tensors(name: str) -> dict[str, Any] | None:
        path = os.path.join(folder, name)
        if not os.path.isfile(path) and os.path.isdir(os.path.join(folder, SHARDED)):
            return None
        return torch.load(path, map_location="cpu", weights_only=True)

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
        folder,
    )


def rng_state(device: torch.device) -> dict[str, str]:
    """This process's torch random state (CPU, and the device's on CUDA) as text for ``data_state.json``: dropout
    draws from it, so a resumed run continues the uninterrupted one's draws instead of replaying the first ones."""
    state = {"cpu": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()}
    if device.type == "cuda":
        state["cuda"] = base64.b64encode(torch.cuda.get_rng_state(device).numpy().tobytes()).decode()
    return state


def restore_rng_state(state: dict[str, str], device: torch.device) -> None:
    """Set the random state `rng_state` returned (a checkpoint without one leaves it as it is)."""

    def tensor(text: str) -> torch.Tensor:
        return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)

    if "cpu" in state:
        torch.set_rng_state(tensor(state["cpu"]))
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(tensor(state["cuda"]), device)
