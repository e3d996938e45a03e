"""The settings of a training run (`TrainConfig`, one field per `lwm train` flag) and their checks.

`check_config` refuses, with one line naming the flag, what could not train or would train wrongly,
before any shard is read or any model built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from schemas.errors import ConfigError, os_error_text
from training.dataset import DEFAULT_SHUFFLE_BUFFER
from training.long_samples import POLICIES
from training.loss import LOSS_NORMS
from training.models import ATTENTION, TINY
from training.schedule import SCHEDULES
from training.sharding import PRECISIONS


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of a run (the `lwm train` flags)."""

    shards: tuple[str, ...]
    max_steps: int
    model: str = TINY
    out: str | None = None
    lr: float = 3e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 0
    schedule: str = "cosine"
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 0
    grad_accum: int = 1
    micro_batch_tokens: int = 4096
    pack: bool = False
    loss_norm: str = "tokens"
    category_weights: dict[str, float] = field(default_factory=dict)
    num_workers: int = 0
    shuffle: bool = True
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    log_every: int = 10
    log_json: str | None = None
    save_every: int = 0
    device: str = "auto"
    tiny_vocab: int | None = None  # None: the shards' vocabulary (`training.compatibility.tiny_vocabulary`)
    tiny_dim: int = 64
    tiny_layers: int = 2
    tiny_heads: int = 4
    long_samples: str = "refuse"
    window_overlap: int | None = None
    empty_row_warn: float = 0.5
    loss_chunk_tokens: int = 1024
    fsdp: bool = False
    activation_checkpointing: bool = False
    precision: str = "auto"
    attention: str = "auto"


def check_config(config: TrainConfig) -> None:
    """Refuse settings that cannot run, with one line each."""
    if config.max_steps < 1 or config.grad_accum < 1:
        raise ConfigError("--max-steps and --grad-accum must be at least 1")
    if config.micro_batch_tokens < 2:
        raise ConfigError("--micro-batch-tokens must be at least 2")
    if config.loss_norm not in LOSS_NORMS:
        raise ConfigError(f"--loss-norm must be one of {', '.join(LOSS_NORMS)}")
    if config.schedule not in SCHEDULES:
        raise ConfigError(f"--schedule must be one of {', '.join(SCHEDULES)}")
    if config.device not in ("auto", "cpu", "cuda"):
        raise ConfigError("--device must be auto, cpu or cuda")
    if config.long_samples not in POLICIES:
        raise ConfigError(f"--long-samples must be one of {', '.join(POLICIES)}")
    if config.precision not in PRECISIONS:
        raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}")
    if config.attention not in ATTENTION:
        raise ConfigError(f"--attention must be one of {', '.join(ATTENTION)}")
    if config.long_samples == "window" and config.window_overlap is not None and not (
            1 <= config.window_overlap < config.micro_batch_tokens):
        raise ConfigError(f"--window-overlap {config.window_overlap} must lie in 1..{config.micro_batch_tokens - 1} "
                          f"tokens, under --micro-batch-tokens {config.micro_batch_tokens}: consecutive windows "
                          "would not advance")
    if not 0 <= config.empty_row_warn <= 1:
        raise ConfigError("--empty-row-warn is a share of a step's rows, between 0 and 1")
    # AdamW and the tiny model would refuse these too, but with a traceback and after the shards were read
    if not (math.isfinite(config.lr) and config.lr > 0):
        raise ConfigError(f"--lr must be a finite number above 0, not {config.lr:g}")
    if not (math.isfinite(config.weight_decay) and config.weight_decay >= 0):
        raise ConfigError(f"--weight-decay must be a finite number of at least 0, not {config.weight_decay:g}")
    if not 0 <= config.min_lr_ratio <= 1:  # above 1 the schedule would raise the rate instead of lowering it
        raise ConfigError(f"--min-lr-ratio is a share of --lr, between 0 and 1, not {config.min_lr_ratio:g}")
    if not (math.isfinite(config.max_grad_norm) and config.max_grad_norm >= 0):
        raise ConfigError(f"--max-grad-norm must be a finite number above 0 (or 0: no clipping), not "
                          f"{config.max_grad_norm:g}")
    if config.out and "://" in config.out:
        # checkpoints are written with local renames (the atomic `latest` pointer); through the local filesystem a
        # URL would become a folder named after its scheme ("s3:")
        raise ConfigError(f"--out {config.out}: checkpoints are written to a local (or mounted) folder, not to a URL; "
                          "give a local path and copy the folder to object storage afterwards")
    if config.log_json:
        # the first logged step would fail on it, with nothing of the run saved yet
        try:
            with open(config.log_json, "a", encoding="utf-8"):
                pass
        except OSError as error:
            raise ConfigError(f"--log-json {config.log_json}: cannot be written ({os_error_text(error)})") from None
    if config.model == TINY and config.tiny_dim % (2 * config.tiny_heads):
        raise ConfigError(f"--tiny-dim {config.tiny_dim} must be a multiple of twice --tiny-heads "
                          f"({2 * config.tiny_heads}): each head's rotary embedding takes pairs of dimensions")


# The optimizer settings a resumed run takes from its command, not from the checkpoint it continues: the rate and
# decay, what shapes the schedule (--max-steps sets where the cosine or linear decay ends), and what makes each step's
# update (the micro-batches it accumulates, how their loss is normalized, the clipping of its gradient).
RESUMED_WITH = (("lr", "--lr"), ("weight_decay", "--weight-decay"), ("schedule", "--schedule"),
                ("warmup_steps", "--warmup-steps"), ("min_lr_ratio", "--min-lr-ratio"), ("max_steps", "--max-steps"),
                ("grad_accum", "--grad-accum"), ("loss_norm", "--loss-norm"), ("max_grad_norm", "--max-grad-norm"))


def changed_settings(saved: dict, config: TrainConfig) -> str:
    """`` with --lr 1e-05 (was 0.001), …`` for the optimizer settings this command changes against the `saved`
    config of the checkpoint it resumes (its trainer.json), or an empty string."""
    changed = [f"{flag} {getattr(config, name):g} (was {saved[name]:g})" if isinstance(saved[name], float)
               else f"{flag} {getattr(config, name)} (was {saved[name]})"
               for name, flag in RESUMED_WITH if name in saved and saved[name] != getattr(config, name)]
    return f" with {', '.join(changed)}" if changed else ""
