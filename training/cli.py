"""The `lwm train` command (also ``python -m training`` and ``torchrun -m training``).

torch is imported only when the command runs, so the `lwm` CLI works without the ``train`` extra.
"""

from __future__ import annotations

import click

from schemas.errors import ConfigError, os_error_text


class TrainError(click.ClickException):
    """What ends `lwm train`: one line as every ``lwm`` command prints it, exit status 2 (input, config or
    environment; as `pipeline.errors` does for the other commands)."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"lwm: error: {self.format_message()}", err=True)


def worker_error_text(message: str) -> str:
    """The message of an error raised in a dataloader worker, without the worker's traceback that torch puts
    around it when it raises the error again in the training process."""
    if "\nOriginal Traceback" not in message:
        return message
    last = message.strip().splitlines()[-1]
    return last.split(": ", 1)[1] if ": " in last else last


@click.command("train")
@click.option(
    "--shards",
    "shards",
    multiple=True,
    required=True,
    help="Shard folder, glob or file (any fsspec URL); repeat for several. Needs the run's _SUCCESS marker.",
)
@click.option(
    "--model",
    default="tiny",
    show_default=True,
    help="'tiny' (built-in CPU decoder) or a Hugging Face causal-LM directory (needs transformers).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Checkpoint folder (local or mounted, not a URL); a run resumes from the newest checkpoint found there.",
)
@click.option("--max-steps", type=click.IntRange(min=1), required=True, help="Optimizer steps to reach.")
@click.option("--lr", type=float, default=3e-4, show_default=True, help="Peak learning rate (AdamW).")
@click.option("--min-lr-ratio", type=float, default=0.1, show_default=True, help="Final lr as a fraction of --lr.")
@click.option("--warmup-steps", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--schedule", type=click.Choice(["cosine", "linear", "constant"]), default="cosine", show_default=True)
@click.option("--weight-decay", type=float, default=0.0, show_default=True)
@click.option("--max-grad-norm", type=float, default=1.0, show_default=True, help="Gradient clipping; 0 disables.")
@click.option("--seed", type=int, default=0, show_default=True, help="Model init and data order.")
@click.option(
    "--grad-accum",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Micro-batches per rank per optimizer step.",
)
@click.option(
    "--micro-batch-tokens",
    type=click.IntRange(min=2),
    default=4096,
    show_default=True,
    help="Token budget of one micro-batch (packed row length with --pack).",
)
@click.option(
    "--pack/--no-pack",
    default=False,
    show_default=True,
    help="Pack samples into one row with a block-diagonal mask instead of padding.",
)
@click.option(
    "--loss-norm",
    type=click.Choice(["tokens", "weights"]),
    default="tokens",
    show_default=True,
    help="Loss denominator over the global step: count of weights > 0, or their sum.",
)
@click.option(
    "--category-weight",
    "category_weights",
    multiple=True,
    metavar="CATEGORY=WEIGHT",
    help="Replace the non-zero weights of a category's observations at load time, e.g. echo=0.",
)
@click.option(
    "--num-workers", type=click.IntRange(min=0), default=0, show_default=True, help="Dataloader workers per rank."
)
@click.option("--shuffle/--no-shuffle", default=True, show_default=True)
@click.option(
    "--shuffle-buffer",
    type=click.IntRange(min=0),
    default=512,
    show_default=True,
    help="Largest distance a sample moves from its stream position.",
)
@click.option("--log-every", type=click.IntRange(min=1), default=10, show_default=True)
@click.option(
    "--log-json",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append one JSON object per logged step (step, loss, tokens, weighted_tokens, lr, ...).",
)
@click.option(
    "--save-every",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Checkpoint every N steps (0: only at the end).",
)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option(
    "--tiny-vocab",
    type=click.IntRange(min=2),
    default=None,
    help="Embedding rows of the tiny model; a token id of the shards beyond them is refused. [default: the vocabulary "
    "size of the tokenizer the shards' manifest.json names, else the largest token id + 1]",
)
@click.option("--tiny-dim", type=click.IntRange(min=2), default=64, show_default=True)
@click.option("--tiny-layers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--tiny-heads", type=click.IntRange(min=1), default=4, show_default=True)
@click.option(
    "--long-samples",
    type=click.Choice(["refuse", "drop", "truncate-left", "window"]),
    default="refuse",
    show_default=True,
    help="Samples longer than a row: refuse the run (checked against manifest.json first), drop them, keep "
    "their last tokens, or cut them into overlapping windows that count each loss token once.",
)
@click.option(
    "--window-overlap",
    type=click.IntRange(min=1),
    default=None,
    help="Tokens shared by consecutive windows with --long-samples window [default: a quarter of the row].",
)
@click.option(
    "--empty-row-warn",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="Warn when more than this share of a step's rows has no loss token.",
)
@click.option(
    "--loss-chunk-tokens",
    type=click.IntRange(min=0),
    default=1024,
    show_default=True,
    help="Weighted positions per chunk of the output projection and loss (0: full [tokens, vocab] logits).",
)
@click.option("--fsdp/--no-fsdp", default=False, show_default=True, help="Shard the model with FSDP2 instead of DDP.")
@click.option(
    "--activation-checkpointing/--no-activation-checkpointing",
    default=False,
    show_default=True,
    help="Recompute each decoder layer in the backward pass.",
)
@click.option(
    "--precision",
    type=click.Choice(["auto", "fp32", "bf16"]),
    default="auto",
    show_default=True,
    help="Compute dtype (auto: bf16 on CUDA, fp32 on CPU); parameters stay fp32.",
)
@click.option(
    "--attention",
    type=click.Choice(["auto", "sdpa", "eager", "flash_attention_2", "flash_attention_3"]),
    default="auto",
    show_default=True,
    help="Attention of a Hugging Face model (auto: flash_attention_2 varlen on CUDA when installed, else sdpa).",
)
def train(**options: object) -> None:
    """Train a causal LM on lwmkit shards with the weighted token loss (runs under torchrun for DDP)."""
    try:
        import torch  # noqa: F401  (only to fail early with a clear message)
    except ImportError as missing:
        raise TrainError("lwm train needs torch: pip install 'lwmkit[train]'") from missing
    from training.loop import train as run_training
    from training.reweight import parse_category_weights
    from training.settings import TrainConfig

    try:
        options["category_weights"] = parse_category_weights(options["category_weights"])  # type: ignore[arg-type]
        options["shards"] = tuple(options["shards"])  # type: ignore[arg-type]
        run_training(TrainConfig(**options), echo=click.echo)  # type: ignore[arg-type]
    except ConfigError as error:
        raise TrainError(worker_error_text(str(error))) from error
    except OSError as error:  # a full disk, a folder it may not write: one line naming the path
        raise TrainError(os_error_text(error)) from error
