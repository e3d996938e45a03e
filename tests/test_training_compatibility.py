"""Shards that do not fit the model are found before the first step: its context, its embedding, its tokenizer."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.helpers import write_synthetic_shards  # noqa: E402
from training.cli import train as train_command  # noqa: E402

CONTEXT = 48


def _gpt2(path: str, positions: int = CONTEXT, vocab: int = 96) -> str:
    """A tiny GPT-2: learned absolute positions, so a position past `positions` has no embedding at all."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=vocab, n_embd=16, n_layer=1, n_head=2, n_positions=positions)
    transformers.GPT2LMHeadModel(config).save_pretrained(path)
    return path


def _qwen(path: str, positions: int = CONTEXT, vocab: int = 96) -> str:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=positions)
    transformers.Qwen2ForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def long_shards(tmp_path_factory):
    """Shards whose every third sample (12 turns) is far longer than the models' 48 positions."""
    root = tmp_path_factory.mktemp("long")
    return write_synthetic_shards(str(root), rows_per_file=(12, 12), row_group_rows=4, long_every=3, long_turns=12)


def _train(*args: str):
    return CliRunner().invoke(train_command, ["--max-steps", "2", "--log-every", "1", "--shuffle-buffer", "8", *args])


@pytest.mark.parametrize(("build", "field"), [(_gpt2, "n_positions"), (_qwen, "max_position_embeddings")])
def test_samples_over_the_model_context_are_refused_naming_the_row_and_the_context(build, field, long_shards, tmp_path):
    model = build(str(tmp_path / "model"))
    result = _train("--shards", long_shards, "--model", model, "--micro-batch-tokens", "512", "--pack")
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("lwm: error: ") and "Traceback" not in result.output, result.output
    assert f"context of {CONTEXT} tokens ({field})" in line and "--micro-batch-tokens 512" in line, line


@pytest.mark.parametrize("build", [_gpt2, _qwen])
def test_the_long_sample_policy_cuts_samples_to_the_model_context(build, long_shards, tmp_path):
    """Packed rows stay 512 tokens long; the samples in them are windows of at most the model's 48 positions."""
    model = build(str(tmp_path / "model"))
    result = _train("--shards", long_shards, "--model", model, "--micro-batch-tokens", "512", "--pack",
                    "--long-samples", "window")
    assert result.exit_code == 0, result.output
    assert f"long samples (over {CONTEXT} tokens): " in result.output, result.output
