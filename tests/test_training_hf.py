"""`lwm train --model DIR` on a tiny random-init Qwen3 built here: packing = unpacked, learning, exact resume."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.helpers import write_synthetic_shards, write_tiny_qwen  # noqa: E402
from training.checkpoint import load_checkpoint  # noqa: E402
from training.cli import train as train_command  # noqa: E402
from training.collate import pack_samples, pad_samples  # noqa: E402
from training.dataset import ShardDataset  # noqa: E402
from training.loop import TrainConfig, train  # noqa: E402
from training.models import HFCausalLM, load_hf_causal_lm  # noqa: E402
from training.step import accumulate_gradients  # noqa: E402


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return write_tiny_qwen(str(tmp_path_factory.mktemp("qwen")))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_synthetic_shards(str(tmp_path_factory.mktemp("run")), rows_per_file=(32, 32), row_group_rows=8)


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _step(model, batches, chunk=0):
    model.zero_grad(set_to_none=True)
    result = accumulate_gradients(model, batches, "tokens", loss_chunk_tokens=chunk)
    return result.loss, _grads(model)


def test_the_model_is_a_real_qwen_with_sdpa_attention(qwen_dir):
    model = load_hf_causal_lm(qwen_dir)
    assert type(model.model).__name__ == "Qwen3ForCausalLM"
    assert model.model.config._attn_implementation == "sdpa"
    assert next(model.parameters()).dtype == torch.float32


@pytest.mark.parametrize("chunk", [0, 16])
def test_packed_rows_give_the_loss_and_gradients_of_unpacked_ones(qwen_dir, shards, chunk):
    samples = [s for _, s in zip(range(6), ShardDataset(shards, shuffle=False))]
    total = sum(len(s["input_ids"]) for s in samples)
    model = load_hf_causal_lm(qwen_dir)
    packed_loss, packed_grads = _step(model, [pack_samples(samples, total + 5)], chunk)
    padded_loss, padded_grads = _step(model, [pad_samples(samples)], chunk)
    assert packed_loss > 0
    assert packed_loss == pytest.approx(padded_loss, rel=1e-5)
    assert packed_grads.keys() == padded_grads.keys() and len(packed_grads) > 10
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, padded_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    # the same row without the block-diagonal mask and per-sample positions lets samples see each other
    batch = pack_samples(samples, total + 5)
    with torch.no_grad():
        separate = model(batch.input_ids, batch.position_ids, batch.document_ids)
        leaked = model(batch.input_ids, torch.arange(total + 5)[None], torch.zeros_like(batch.input_ids))
        again = model(batch.input_ids, batch.position_ids, batch.document_ids)
    second = batch.document_ids[0] >= 1
    assert torch.equal(separate, again)
    assert (leaked[0, second] - separate[0, second]).abs().max() > 1e-3


def _assert_chunked_equals_full(model, shards):
    """The loss and every gradient of four packed samples are the same with a 7-token loss chunk and without."""
    samples = [s for _, s in zip(range(4), ShardDataset(shards, shuffle=False))]
    batch = pack_samples(samples, 200)
    full_loss, full_grads = _step(model, [batch], chunk=0)
    chunked_loss, chunked_grads = _step(model, [batch], chunk=7)
    assert chunked_loss == pytest.approx(full_loss, rel=1e-6)
    for name, grad in full_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_chunked_loss_equals_the_full_logits_loss(qwen_dir, shards):
    _assert_chunked_equals_full(load_hf_causal_lm(qwen_dir), shards)


@pytest.mark.parametrize(("config", "scaling"), [
    ("GraniteConfig", {"logits_scaling": 8.0}),  # logits divided after the projection
    ("CohereConfig", {"logit_scale": 0.0625}),  # logits multiplied after it
])
def test_models_that_scale_their_logits_get_the_same_loss_chunked_or_not(config, scaling, shards, tmp_path):
    """The chunked loss projects the hidden states itself; a model whose logits are more than that projection is
    measured as such when loaded and gets the loss of its own logits."""
    import transformers

    cfg = getattr(transformers, config)(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                                        **scaling)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(str(tmp_path / "m"))
    model = load_hf_causal_lm(str(tmp_path / "m"))
    assert not model.logits_are_projection
    _assert_chunked_equals_full(model, shards)


def test_a_plain_projection_model_keeps_the_chunked_loss(qwen_dir):
    assert load_hf_causal_lm(qwen_dir).logits_are_projection


def test_lwm_train_on_the_hf_model_learns(qwen_dir, shards, tmp_path):
    log = tmp_path / "log.jsonl"
    args = ["--shards", shards, "--model", qwen_dir, "--pack", "--micro-batch-tokens", "256", "--lr", "1e-2",
            "--warmup-steps", "3", "--max-steps", "40", "--log-every", "1", "--log-json", str(log)]
    result = CliRunner().invoke(train_command, args)
    assert result.exit_code == 0, result.output
    assert f"training {qwen_dir} on 64 samples" in result.output
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["step"] for e in entries] == list(range(1, 41))
    early = sum(e["loss"] for e in entries[:5]) / 5
    late = sum(e["loss"] for e in entries[-5:]) / 5
    assert late < 0.6 * early, (early, late)


def _run(qwen_dir, shards, out, max_steps, **extra):
    config = TrainConfig(
        shards=(shards,), max_steps=max_steps, model=qwen_dir, out=str(out), lr=3e-3, schedule="constant",
        grad_accum=2, micro_batch_tokens=128, pack=True, shuffle_buffer=8, log_every=1, **extra,
    )
    return train(config, echo=lambda _line: None)


def test_interrupted_hf_run_equals_an_uninterrupted_one(qwen_dir, shards, tmp_path):
    straight = _run(qwen_dir, shards, tmp_path / "a", 4)
    _run(qwen_dir, shards, tmp_path / "b", 2)
    resumed = _run(qwen_dir, shards, tmp_path / "b", 4)
    assert [e["step"] for e in resumed] == [3, 4]
    for a, b in zip(straight[2:], resumed, strict=True):
        assert a["tokens"] == b["tokens"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    model_a = load_checkpoint(str(tmp_path / "a")).model
    model_b = load_checkpoint(str(tmp_path / "b")).model
    assert any(name.startswith("model.model.layers.1.self_attn") for name in model_a)
    for name, tensor in model_a.items():
        torch.testing.assert_close(tensor, model_b[name], rtol=1e-5, atol=1e-7)


def test_activation_checkpointing_leaves_the_step_unchanged(qwen_dir, shards, tmp_path):
    plain = _run(qwen_dir, shards, tmp_path / "plain", 2)
    recomputed = _run(qwen_dir, shards, tmp_path / "ac", 2, activation_checkpointing=True)
    for a, b in zip(plain, recomputed):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    state_a, state_b = (load_checkpoint(str(tmp_path / n)).model for n in ("plain", "ac"))
    for name, tensor in state_a.items():
        torch.testing.assert_close(tensor, state_b[name], rtol=1e-5, atol=1e-7)


def test_wrapper_is_what_the_trainer_builds(qwen_dir):
    assert isinstance(load_hf_causal_lm(qwen_dir), HFCausalLM)


def test_bf16_compute_keeps_float32_weights_and_close_losses(qwen_dir, shards, tmp_path):
    full = _run(qwen_dir, shards, tmp_path / "fp32", 2, precision="fp32")
    half = _run(qwen_dir, shards, tmp_path / "bf16", 2, precision="bf16")
    assert [e["tokens"] for e in full] == [e["tokens"] for e in half]
    for a, b in zip(full, half):
        assert b["loss"] == pytest.approx(a["loss"], rel=3e-2)
        assert b["loss"] != a["loss"]  # the forward really ran in bf16
    state = load_checkpoint(str(tmp_path / "bf16")).model
    assert all(t.dtype == torch.float32 for t in state.values() if t.is_floating_point())


def test_flash_attention_models_get_sample_boundaries_from_position_ids_not_a_mask(qwen_dir):
    model = load_hf_causal_lm(qwen_dir)
    packed = torch.tensor([[0, 0, 0, 1, 1, -1]])
    padded = torch.tensor([[0, 0, 0, -1, -1, -1]])
    ids = torch.ones(1, 6, dtype=torch.int64)
    assert model._mask(ids, packed).shape == (1, 1, 6, 6)  # sdpa: the block-diagonal 4D mask
    model.model.config._attn_implementation = "flash_attention_2"
    assert model.uses_flash_attention
    assert model._mask(ids, packed) is None  # varlen attention reads the restarting position ids
    assert model._mask(ids, padded).tolist() == [[1, 1, 1, 0, 0, 0]]


def test_a_model_vocabulary_smaller_than_the_shards_ids_is_one_line(shards, tmp_path):
    small = write_tiny_qwen(str(tmp_path / "small"), vocab=16)
    result = CliRunner().invoke(train_command, ["--shards", shards, "--model", small, "--max-steps", "1",
                                                "--no-shuffle"])
    assert result.exit_code == 2
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"lwm: error: --model {small}: the shards hold token id "), result.output
    assert last.endswith("but the model's vocabulary has 16 entries; the shards were tokenized for another model "
                         "(the run's manifest.json names its tokenizer)")
    assert int(last.split("token id ")[1].split(",")[0]) >= 16


@pytest.mark.parametrize(("config", "says"), [
    ({}, "Unrecognized model in"),
    ({"model_type": "qwen3", "vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 1,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64}, "no file named"),
])
def test_a_model_directory_transformers_cannot_load_is_one_line(config, says, shards, tmp_path):
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(train_command, ["--shards", shards, "--model", str(broken), "--max-steps", "1"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"lwm: error: --model {broken}: transformers cannot load it: ") and says in last, last


def test_a_resumed_run_with_dropout_continues_the_uninterrupted_ones_draws(shards, tmp_path):
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, attention_dropout=0.3)
    model = str(tmp_path / "dropout")
    transformers.Qwen2ForCausalLM(config).save_pretrained(model)
    straight = _run(model, shards, tmp_path / "a", 4, attention="eager")
    _run(model, shards, tmp_path / "b", 2, attention="eager")
    resumed = _run(model, shards, tmp_path / "b", 4, attention="eager")
    assert [e["loss"] for e in resumed] == [e["loss"] for e in straight[2:]]
    model_a, model_b = load_checkpoint(str(tmp_path / "a")).model, load_checkpoint(str(tmp_path / "b")).model
    for name, tensor in model_a.items():
        assert torch.equal(tensor, model_b[name]), name
