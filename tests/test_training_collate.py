"""Collation: padding, packing, the shifted targets, the block-diagonal mask; packing leaves the loss unchanged."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from training.collate import block_causal_mask, micro_batches, pack_samples, pad_samples  # noqa: E402
from training.loss import weighted_loss_sum  # noqa: E402
from training.models import HFCausalLM  # noqa: E402
from training.step import model_logits  # noqa: E402
from training.tiny_model import TinyConfig, TinyDecoder  # noqa: E402


def _sample(ids, weights, name="s"):
    return {
        "sample_id": name,
        "input_ids": torch.tensor(ids, dtype=torch.int64),
        "loss_weight": torch.tensor(weights, dtype=torch.float32),
        "position": name,
    }


A = _sample([10, 11, 12], [0, 1, 0.5], "a")
B = _sample([20, 21, 22, 23], [1, 0, 1, 1], "b")


def test_padding_shifts_targets_within_each_sample():
    batch = pad_samples([A, B])
    assert batch.input_ids.tolist() == [[10, 11, 12, 0], [20, 21, 22, 23]]
    assert batch.labels.tolist() == [[11, 12, 0, 0], [21, 22, 23, 0]]
    assert batch.label_weights.tolist() == [[1, 0.5, 0, 0], [0, 1, 1, 0]]
    assert batch.document_ids.tolist() == [[0, 0, 0, -1], [0, 0, 0, 0]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 0], [0, 1, 2, 3]]
    assert batch.num_tokens == 7
    assert batch.positions == ["a", "b"]


def test_packing_restarts_positions_and_never_targets_across_samples():
    batch = pack_samples([A, B], length=10)
    assert batch.input_ids.tolist() == [[10, 11, 12, 20, 21, 22, 23, 0, 0, 0]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 0, 1, 2, 3, 0, 0, 0]]
    assert batch.document_ids.tolist() == [[0, 0, 0, 1, 1, 1, 1, -1, -1, -1]]
    # position 2 (last of a) must not be asked to predict b's first token (weight 1 in b)
    assert batch.labels.tolist() == [[11, 12, 0, 21, 22, 23, 0, 0, 0, 0]]
    assert batch.label_weights.tolist() == [[1, 0.5, 0, 0, 1, 1, 0, 0, 0, 0]]


def test_block_causal_mask_by_hand():
    mask = block_causal_mask(torch.tensor([[0, 0, 1, 1, -1]]))[0, 0].int().tolist()
    assert mask == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 1, 1, 0],
        [0, 0, 0, 0, 1],
    ]


def test_micro_batches_keep_order_budget_and_cut_long_samples():
    long = _sample(list(range(1, 14)), [1.0] * 13, "long")
    stream = [A, B, A, long, B]
    packed = list(micro_batches(iter(stream), micro_batch_tokens=8, pack=True))
    assert [b.positions for b in packed] == [["a", "b"], ["a"], ["long"], ["b"]]
    assert all(b.input_ids.shape == (1, 8) for b in packed)
    assert [b.truncated for b in packed] == [0, 0, 1, 0]
    padded = list(micro_batches(iter(stream), micro_batch_tokens=8, pack=False))
    # rows × longest ≤ 8: [a, b] is 2 × 4
    assert [b.positions for b in padded] == [["a", "b"], ["a"], ["long"], ["b"]]
    assert all(b.input_ids.numel() <= 8 for b in padded)


def _loss_and_grads(model, batch):
    model.zero_grad()
    loss = weighted_loss_sum(model_logits(model, batch), batch.labels, batch.label_weights)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def _random_samples(count, vocab, seed):
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for number in range(count):
        n = int(torch.randint(3, 12, (1,), generator=generator))
        ids = torch.randint(1, vocab, (n,), generator=generator).tolist()
        weights = (torch.rand(n, generator=generator) * (torch.rand(n, generator=generator) > 0.3)).tolist()
        samples.append(_sample(ids, weights, f"s{number}"))
    return samples


def test_packed_batch_has_the_loss_and_gradients_of_the_unpacked_one():
    torch.manual_seed(0)
    model = TinyDecoder(TinyConfig(vocab_size=50, dim=32, layers=2, heads=4))
    samples = _random_samples(5, vocab=50, seed=1)
    total = sum(len(s["input_ids"]) for s in samples)
    packed_loss, packed_grads = _loss_and_grads(model, pack_samples(samples, length=total + 3))
    padded_loss, padded_grads = _loss_and_grads(model, pad_samples(samples))
    assert packed_loss > 0
    torch.testing.assert_close(packed_loss, padded_loss, rtol=1e-5, atol=1e-6)
    for packed, padded in zip(packed_grads, padded_grads):
        torch.testing.assert_close(packed, padded, rtol=1e-4, atol=1e-6)
    # without the block-diagonal mask and restarting positions, the packed loss is different
    batch = pack_samples(samples, length=total + 3)
    crossing = model(batch.input_ids)  # plain causal mask, positions 0..L-1
    leaked = weighted_loss_sum(crossing, batch.labels, batch.label_weights).detach()
    assert not torch.isclose(leaked, padded_loss, rtol=1e-3)


class _FakeHuggingFaceModel(torch.nn.Module):
    """Stands in for a transformers causal LM: reads a 2D padding mask or a 4D additive mask."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, position_ids, attention_mask, use_cache):
        if attention_mask.dim() == 2:
            document_ids = torch.where(attention_mask.bool(), 0, -1)
            logits = self.inner(input_ids, position_ids=position_ids, document_ids=document_ids)
        else:
            logits = self.inner(input_ids, position_ids=position_ids, attention_mask=attention_mask == 0)
        return types.SimpleNamespace(logits=logits)


def test_hugging_face_wrapper_passes_masks_that_keep_packing_exact():
    torch.manual_seed(0)
    model = HFCausalLM(_FakeHuggingFaceModel(TinyDecoder(TinyConfig(vocab_size=50, dim=32, layers=1, heads=2))))
    samples = _random_samples(3, vocab=50, seed=4)
    total = sum(len(s["input_ids"]) for s in samples)
    packed_loss, _ = _loss_and_grads(model, pack_samples(samples, length=total + 2))
    padded_loss, _ = _loss_and_grads(model, pad_samples(samples))
    assert packed_loss > 0
    torch.testing.assert_close(packed_loss, padded_loss, rtol=1e-5, atol=1e-6)
