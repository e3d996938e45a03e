"""The training run behind `lwm train`: distributed set-up, the step loop, checkpoints (settings: `training.settings`).

Runs as one process, or one process per rank under ``torchrun`` (DistributedDataParallel, or
FSDP2 with ``--fsdp``: gloo on CPU, nccl on GPU). Before the first step the longest sample of the
shards is compared with the row length (`training.long_samples`). Each global step draws
``grad_accum`` micro-batches per rank, computes the global loss denominator, accumulates
gradients, clips and steps AdamW and the schedule. A run given ``out`` resumes from the newest
checkpoint there: model, optimizer, schedule, the exact data position of every rank (down to the
window of a windowed sample), each rank's random state (dropout) and the step count.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from schemas.errors import ConfigError
from training.checkpoint import (
    checkpoint_lock,
    load_checkpoint,
    load_sharded_state,
    restore_rng_state,
    rng_state,
    save_checkpoint,
    sharded_state,
)
from training.collate import MicroBatch, micro_batches
from training.compatibility import (
    check_fits_model,
    context_length,
    id_past_vocabulary,
    sample_limit,
    tiny_vocabulary,
)
from training.dataset import ShardDataset
from training.interrupts import StopBetweenSteps
from training.long_samples import (
    LongSampleCounts,
    LongSamplePolicy,
    PieceTracker,
    check_row_length,
    longest_sample,
    run_manifests,
)
from training.loss import all_ranks_sum
from training.models import TINY, build_model, pick_attention, vocabulary_rows
from training.progress import StepLogger
from training.reweight import check_category_names
from training.runs import check_same_tokenizer, check_shard_listing
from training.schedule import lr_multiplier
from training.settings import TrainConfig, changed_settings, check_config
from training.sharding import compute_dtype, shard_model
from training.shards import ShardError, folder_sources
from training.step import StepResult, accumulate_gradients
from training.tiny_model import TinyConfig


@dataclass(frozen=True)
class Distributed:
    """This process's place in the run."""

    rank: int
    world_size: int
    device: torch.device


def init_distributed(device_choice: str) -> Distributed:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1) and pick the device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device_choice == "cuda" or (device_choice == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise ConfigError("--device cuda asked for, but torch sees no CUDA device")
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world_size > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if use_cuda else "gloo")
    return Distributed(rank, world_size, device)


def _gather(value: Any, dist: Distributed) -> list[Any]:
    if dist.world_size == 1:
        return [value]
    gathered: list[Any] = [None] * dist.world_size
    torch.distributed.all_gather_object(gathered, value)
    return gathered


def _check_vocabulary(batches: list[MicroBatch], rows: int, model: str) -> None:
    """A token id past the model's embedding is one line, not an IndexError deep in the forward pass (shards whose
    files hold no statistics of their ids are only checked here)."""
    top = max((int(b.input_ids.max()) for b in batches if b.input_ids.numel()), default=-1)
    if top >= rows:
        raise ConfigError(id_past_vocabulary(model, rows, top))


def _draw(batches: Iterator[MicroBatch], count: int) -> list[MicroBatch]:
    drawn = []
    for _ in range(count):
        batch = next(batches, None)
        if batch is None:
            raise ConfigError("the shards ran out of samples")  # only with a finite dataset
        drawn.append(batch)
    return drawn


def _resume(
    config: TrainConfig,
    dist: Distributed,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    dataset: Any,
    policy: LongSamplePolicy,
    trained: LongSampleCounts,
) -> tuple[int, str, dict[str, str]]:
    """The step of the checkpoint in ``out`` (0: none), everything restored but the random state (returned: the
    caller sets it once the loader has drawn its workers' seeds); and what this command changes."""
    checkpoint = load_checkpoint(config.out) if config.out else None
    if checkpoint is None:
        return 0, "", {}
    # each rank's data position is a place in its stream, which any number of dataloader workers yields alike
    saved = checkpoint.trainer.get("world_size")
    if saved != dist.world_size:
        raise ConfigError(
            f"{config.out}: the checkpoint was written by {saved} ranks; resume with the same number, not "
            f"{dist.world_size}"
        )
    if bool(checkpoint.trainer.get("sharded")) != config.fsdp:
        raise ConfigError(
            f"{config.out}: the checkpoint was written {'with' if config.fsdp is False else 'without'} --fsdp; "
            "resume the same way"
        )
    # the data position first: a position this version cannot continue is refused before any tensor is read
    data_state = checkpoint.data_states[dist.rank]
    try:
        dataset.load_state_dict(data_state)
    except ShardError as refused:
        raise ConfigError(f"--out {config.out}: {refused}") from None
    try:
        if config.fsdp:
            load_sharded_state(checkpoint.folder, model, optimizer)
        else:
            model.load_state_dict(checkpoint.model)
            optimizer.load_state_dict(checkpoint.optimizer)
    except (RuntimeError, ValueError) as mismatch:  # torch names every differing tensor, over many lines
        said = [line.strip() for line in str(mismatch).splitlines() if line.strip()]
        detail = next((line for line in said if line.startswith(("size mismatch", "Missing key", "Unexpected key"))),
                      said[0] if said else type(mismatch).__name__)
        raise ConfigError(
            f"--out {config.out}: its checkpoint is of another model ({detail.rstrip('.')}); resume with the model "
            "settings it was written with (its trainer.json), or choose another --out"
        ) from None
    scheduler.load_state_dict(checkpoint.scheduler)
    # The rate and decay of this command, not the checkpoint's: the optimizer's state restores the saved groups'
    # settings and the scheduler its peak rate, while the schedule itself (a function) is this command's.
    for group in optimizer.param_groups:
        group["weight_decay"], group["initial_lr"] = config.weight_decay, config.lr
    scheduler.base_lrs = [config.lr for _ in optimizer.param_groups]
    # the learning rate of the next step under this run's schedule, which --max-steps may have moved (the
    # optimizer's state holds the last rate of the saved one); with the same schedule, the same number
    for group, base, factor in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    policy.skip_pieces = PieceTracker.skip_map(data_state.get("pieces_done", []))
    trained.add(LongSampleCounts.from_list(data_state.get("long_sample_counts", LongSampleCounts().as_list())))
    return checkpoint.step, changed_settings(checkpoint.trainer.get("config") or {}, config), data_state.get("rng", {})


def _save(
    config: TrainConfig,
    dist: Distributed,
    step: int,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    data_state: dict[str, Any],
) -> None:
    data_states = _gather(data_state, dist)
    trainer = {
        "world_size": dist.world_size,
        "num_workers": config.num_workers,
        "sharded": config.fsdp,
        "config": asdict(config),
    }
    if config.fsdp:
        # every rank writes its own shards of the model and optimizer (torch.distributed.checkpoint)
        save_checkpoint(
            config.out, step, None, None, scheduler.state_dict(), trainer, data_states,
            sharded=sharded_state(model, optimizer), rank=dist.rank, world_size=dist.world_size,
        )
    elif dist.rank == 0:
        save_checkpoint(
            config.out, step, model.state_dict(), optimizer.state_dict(), scheduler.state_dict(), trainer, data_states
        )
    if dist.world_size > 1:
        torch.distributed.barrier()


def train(config: TrainConfig, echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run (or resume) training; returns the logged step objects of rank 0 (empty on other ranks)."""
    check_config(config)
    dist = init_distributed(config.device)
    locked = checkpoint_lock(config.out) if config.out and dist.rank == 0 else contextlib.nullcontext()
    try:
        with locked:
            logged = _train(config, dist, echo if dist.rank == 0 else (lambda _line: None))
        if dist.world_size > 1:
            # No rank tears the group down while another still waits in a collective: gloo aborts
            # the waiting process ("terminate called without an active exception") otherwise.
            torch.distributed.barrier()
        return logged
    finally:
        if dist.world_size > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _train(config: TrainConfig, dist: Distributed, echo: Callable[[str], None]) -> list[dict[str, Any]]:
    torch.manual_seed(config.seed)
    dataset = ShardDataset(
        config.shards,
        seed=config.seed,
        shuffle=config.shuffle,
        shuffle_buffer=config.shuffle_buffer,
        epochs=None,
        category_weights=config.category_weights,
        rank=dist.rank,
        world_size=dist.world_size,
    )
    if not dataset.total_rows:
        raise ConfigError(f"no samples to train on in {', '.join(config.shards)} (an empty pool?)")
    dataset.check_ranks_fed()
    files = dataset.files
    manifests = run_manifests(files)  # each run's manifest, read once for every check
    rows_of_file = dict.fromkeys(files, 0)
    for group in dataset.groups:
        rows_of_file[group.uri] += group.num_rows
    check_shard_listing(rows_of_file, folder_sources(config.shards), manifests)
    check_same_tokenizer(manifests)
    if config.category_weights:
        check_category_names(files, config.category_weights, manifests)
    if config.model == TINY and config.tiny_vocab is None:  # resolved here, so that its checkpoints record it
        config = replace(config, tiny_vocab=tiny_vocabulary(files, manifests, dataset.footer_statistics))
    tiny = TinyConfig(config.tiny_vocab, config.tiny_dim, config.tiny_layers, config.tiny_heads) \
        if config.tiny_vocab is not None else TinyConfig()  # the latter for a Hugging Face model: not built
    model = build_model(config.model, tiny, pick_attention(config.attention, dist.device)).to(dist.device)
    rows = vocabulary_rows(model)
    check_fits_model(config.model, rows, files, manifests, dataset.footer_statistics)
    context = context_length(model)
    longest = longest_sample(files, manifests, dataset.footer_statistics)
    note = check_row_length(longest, config.micro_batch_tokens, config.long_samples,
                            (context.tokens, context.field) if context else None)
    if note:
        echo(note)
    # The stream repeats for ever: a stretch of it long enough to hold every sample without one that fits ends the
    # run. Each epoch reshuffles a rank's block of k rows, so a sample recurs up to 2k - 1 samples later in the
    # rank's stream (the same stream with any number of dataloader workers).
    block = -(-dataset.total_rows // dist.world_size)
    policy = LongSamplePolicy(sample_limit(config.micro_batch_tokens, context), config.long_samples,
                              config.window_overlap, give_up_after=2 * block + 1)
    model.train()
    if config.activation_checkpointing:
        model.enable_activation_checkpointing()
    dtype = compute_dtype(config.precision, dist.device)
    if config.fsdp:
        shard_model(model, dtype, dist.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=config.weight_decay)
    schedule = functools.partial(
        lr_multiplier,
        warmup_steps=config.warmup_steps,
        max_steps=config.max_steps,
        kind=config.schedule,
        min_ratio=config.min_lr_ratio,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    trained = LongSampleCounts()  # what the long-sample policy did to the samples trained on, this rank
    step, changed, saved_rng = _resume(config, dist, model, optimizer, scheduler, dataset, policy, trained)
    if step:
        echo(f"resumed from {config.out} at step {step}{changed}")
    if step >= config.max_steps:
        echo(f"nothing to do: step {step} already reached --max-steps {config.max_steps}")
        return []
    how = "FSDP" if config.fsdp else ("DDP" if dist.world_size > 1 else "one process")
    echo(
        f"training {config.model} on {dataset.total_rows} samples, {dist.world_size} rank(s) ({how}), "
        f"device {dist.device}, compute {str(dtype or torch.float32).removeprefix('torch.')}"
    )
    wrapped = model
    if dist.world_size > 1 and not config.fsdp:
        wrapped = DistributedDataParallel(model, device_ids=[dist.device.index] if dist.device.type == "cuda" else None)
    autocast = dtype if dtype is not None and not config.fsdp else None
    loader = DataLoader(dataset, batch_size=None, num_workers=config.num_workers)
    tracker = PieceTracker()
    logger = StepLogger(config.log_every, config.log_json if dist.rank == 0 else None, echo, config.max_steps)
    logged: list[dict[str, Any]] = []
    warned = False
    with StopBetweenSteps() as stopping:
        # Loader workers (`--num-workers`) are forked here, so they inherit the noting handlers: a Ctrl-C sent to
        # the whole process group does not end them under the step the main process finishes and saves.
        batches = micro_batches(policy(iter(loader)), config.micro_batch_tokens, config.pack)
        # after the loader's iterator drew its workers' base seed, as it did once in the uninterrupted run
        restore_rng_state(saved_rng, dist.device)
        while step < config.max_steps:
            drawn = _draw(batches, config.grad_accum)
            if rows is not None:
                _check_vocabulary(drawn, rows, config.model)
            micro = [b.to(dist.device) for b in drawn]
            result: StepResult = accumulate_gradients(wrapped, micro, config.loss_norm, config.loss_chunk_tokens, autocast)
            if config.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            for batch in micro:
                # in stream order: the samples the policy skipped before each one (they are used up too: a resumed
                # run neither reads them again nor loses the loader's turn order), then the sample, once finished
                used = []
                for i, (position, piece) in enumerate(zip(batch.positions, batch.pieces)):
                    if i < len(batch.skipped) and batch.skipped[i]:
                        used += batch.skipped[i]
                    used += tracker.finished_positions([position], [piece])
                dataset.record_consumed(used)
                for counted in batch.long_counts:
                    if counted is not None:
                        trained.add(counted)
            step += 1
            # one collective for both: the counts over all ranks, and whether any rank was asked to stop (so that
            # every rank stops after the same step, and saves it together)
            *summed, stops = all_ranks_sum([*trained.as_list(), float(stopping.requested)], dist.device)
            counts = LongSampleCounts.from_list(summed)
            entry = logger.record(step, result, lr, {"long_samples": vars(counts)})
            if entry is not None:
                logged.append(entry)
            empty_share = result.empty_rows / result.rows if result.rows else 0.0
            if empty_share > config.empty_row_warn and (not warned or entry is not None):
                warned = True
                echo(
                    f"warning: step {step}: {result.empty_rows} of {result.rows} rows have no loss token "
                    f"(over --empty-row-warn {config.empty_row_warn:g}); these rows train nothing"
                )
            saved_now = step == config.max_steps or (config.save_every and step % config.save_every == 0) or stops
            if config.out and saved_now:
                data_state = {
                    **dataset.state_dict(),
                    "pieces_done": tracker.state(),
                    "long_sample_counts": trained.as_list(),
                    "rng": rng_state(dist.device),
                }
                _save(config, dist, step, model, optimizer, scheduler, data_state)
            if stops:
                stopping.stop(f"step {step} saved in {config.out}: the same command resumes" if config.out else "")
    if counts.long:
        echo(describe_counts(counts, policy.row, config.long_samples))
    return logged


def describe_counts(counts: LongSampleCounts, row: int, policy: str) -> str:
    """One line on what the long-sample policy did over the run (all ranks)."""
    done = {
        "drop": f"{counts.dropped} dropped",
        "truncate-left": f"{counts.truncated_left} cut to their last {row} tokens",
        "window": f"{counts.windowed} cut into {counts.pieces} windows ({counts.empty_pieces} windows without "
        "loss tokens skipped)",
    }.get(policy, "")
    lost = f", {counts.lost_loss_tokens} loss tokens lost" if policy in ("drop", "truncate-left") else ""
    return f"long samples (over {row} tokens): {counts.long} seen, {done}{lost}"
