"""The weighted loss: its value by hand, its denominators, and invariance to accumulation, ranks and masked labels."""

from __future__ import annotations

import dataclasses
import datetime
import math

import pytest

torch = pytest.importorskip("torch")

from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from tests.helpers import run_ranks  # noqa: E402
from training.__main__ import exit_rank  # noqa: E402
from training.collate import pad_samples  # noqa: E402
from training.loss import local_denominator, weighted_loss_sum, weighted_loss_sum_from_hidden  # noqa: E402
from training.step import accumulate_gradients  # noqa: E402
from training.tiny_model import TinyConfig, TinyDecoder  # noqa: E402

VOCAB = 40


def _samples(count, seed):
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for number in range(count):
        n = int(torch.randint(4, 10, (1,), generator=generator))
        ids = torch.randint(1, VOCAB, (n,), generator=generator)
        # uneven weights, some zero, so "tokens" and "weights" normalisations differ
        weights = torch.rand(n, generator=generator) * (torch.rand(n, generator=generator) > 0.4)
        samples.append({"sample_id": f"s{number}", "input_ids": ids, "loss_weight": weights})
    return samples


def _model(seed=0):
    torch.manual_seed(seed)
    return TinyDecoder(TinyConfig(vocab_size=VOCAB, dim=32, layers=2, heads=4))


def _step(model, batches, loss_norm):
    model.zero_grad()
    result = accumulate_gradients(model, batches, loss_norm)
    return result, [p.grad.clone() for p in model.parameters()]


def test_weighted_loss_sum_by_hand():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]]))
    labels = torch.tensor([[0, 1, 2]])
    weights = torch.tensor([[1.0, 0.5, 0.0]])
    expected = 1.0 * -math.log(0.5) + 0.5 * -math.log(0.8)
    assert float(weighted_loss_sum(logits, labels, weights)) == pytest.approx(expected, rel=1e-6)


def test_denominators():
    weights = [torch.tensor([[0.0, 0.5, 1.0]]), torch.tensor([[0.25, 0.0]])]
    assert local_denominator(weights, "tokens") == 3
    assert local_denominator(weights, "weights") == pytest.approx(1.75)
    with pytest.raises(ValueError):
        local_denominator(weights, "mean")


@pytest.mark.parametrize("loss_norm", ["tokens", "weights"])
def test_grad_accum_4_equals_one_step_of_4n(loss_norm):
    samples = _samples(8, seed=3)
    model = _model()
    accumulated, accumulated_grads = _step(model, [pad_samples(samples[i : i + 2]) for i in range(0, 8, 2)], loss_norm)
    whole, whole_grads = _step(model, [pad_samples(samples)], loss_norm)
    assert whole.loss > 0
    assert accumulated.loss == pytest.approx(whole.loss, rel=1e-5)
    assert accumulated.denominator == pytest.approx(whole.denominator)
    for a, w in zip(accumulated_grads, whole_grads):
        torch.testing.assert_close(a, w, rtol=1e-4, atol=1e-7)
    # normalising each micro-batch by its own denominator would not match: the data can tell
    model.zero_grad()
    for batch in (pad_samples(samples[i : i + 2]) for i in range(0, 8, 2)):
        batch_sum = weighted_loss_sum(
            model(batch.input_ids, batch.position_ids, batch.document_ids), batch.labels, batch.label_weights
        )
        (batch_sum / local_denominator([batch.label_weights], loss_norm) / 4).backward()
    assert any(not torch.allclose(p.grad, w, rtol=1e-2, atol=1e-6) for p, w in zip(model.parameters(), whole_grads))


def test_zero_weight_labels_do_not_change_the_gradient():
    batch = pad_samples(_samples(4, seed=5))
    model = _model()
    _, base = _step(model, [batch], "tokens")
    zero = batch.label_weights == 0
    changed_labels = torch.where(zero, (batch.labels + 7) % VOCAB, batch.labels)
    assert int((changed_labels != batch.labels).sum()) > 0
    _, same = _step(model, [dataclasses.replace(batch, labels=changed_labels)], "tokens")
    for b, s in zip(base, same):
        assert torch.equal(b, s)
    # a weighted label does reach the gradient
    first_weighted = int(torch.nonzero(~zero.reshape(-1))[0])
    labels = batch.labels.clone().reshape(-1)
    labels[first_weighted] = (labels[first_weighted] + 1) % VOCAB
    _, different = _step(model, [dataclasses.replace(batch, labels=labels.reshape(batch.labels.shape))], "tokens")
    assert any(not torch.equal(b, d) for b, d in zip(base, different))


def _rank_worker(rank, rendezvous, result_path):
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2,
                                         timeout=datetime.timedelta(seconds=120))
    samples = _samples(8, seed=7)
    # rank 0 gets 3 samples, rank 1 gets 5: the ranks' denominators differ
    mine = samples[:3] if rank == 0 else samples[3:]
    results = {}
    for loss_norm in ("tokens", "weights"):
        model = DistributedDataParallel(_model())
        batches = [pad_samples(mine[:2]), pad_samples(mine[2:])]
        result, grads = _step(model, batches, loss_norm)
        results[loss_norm] = (result.loss, result.denominator, grads)
    if rank == 0:
        torch.save(results, result_path)
    torch.distributed.barrier()  # neither rank tears the group down while the other still communicates
    torch.distributed.destroy_process_group()
    exit_rank(0)


def test_two_gloo_ranks_equal_one_rank(tmp_path):
    result_path = tmp_path / "rank0.pt"
    run_ranks(_rank_worker, (str(result_path),), tmp_path)
    distributed = torch.load(result_path, weights_only=True)
    samples = _samples(8, seed=7)
    for loss_norm in ("tokens", "weights"):
        single, grads = _step(_model(), [pad_samples(samples)], loss_norm)
        loss, denominator, rank_grads = distributed[loss_norm]
        assert denominator == pytest.approx(single.denominator)
        assert loss == pytest.approx(single.loss, rel=1e-5)
        for r, s in zip(rank_grads, grads):
            torch.testing.assert_close(r, s, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_chunked_loss_equals_the_loss_of_the_full_logits(chunk):
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(2, 9, 8, generator=generator, requires_grad=True)
    head = torch.randn(VOCAB, 8, generator=generator, requires_grad=True)
    bias = torch.randn(VOCAB, generator=generator, requires_grad=True)
    labels = torch.randint(0, VOCAB, (2, 9), generator=generator)
    weights = torch.rand(2, 9, generator=generator) * (torch.rand(2, 9, generator=generator) > 0.3)
    full = weighted_loss_sum(torch.nn.functional.linear(hidden, head, bias), labels, weights)
    full_grads = torch.autograd.grad(full, (hidden, head, bias))
    chunked = weighted_loss_sum_from_hidden(hidden, head, bias, labels, weights, chunk)
    chunked_grads = torch.autograd.grad(chunked, (hidden, head, bias))
    assert float(full.detach()) > 0
    torch.testing.assert_close(chunked, full, rtol=1e-6, atol=1e-6)
    # float32 sums in another order: an element near zero that sums terms of about 1 differs by their rounding
    # (2.4e-7 per ulp from 2 on; 1.3e-7 seen on one CPU where another gave less), so the absolute tolerance is a
    # few ulps of the gradients' scale (up to 3 here); a chunk lost or counted twice moves them by far more.
    for c, f in zip(chunked_grads, full_grads):
        torch.testing.assert_close(c, f, rtol=1e-5, atol=1e-6)
    # no weighted target: zero, with a (zero) gradient for every input
    empty = weighted_loss_sum_from_hidden(hidden, head, bias, labels, torch.zeros(2, 9), chunk)
    assert float(empty) == 0
    assert all(float(g.abs().sum()) == 0 for g in torch.autograd.grad(empty, (hidden, head)))


@pytest.mark.slow
def test_chunked_loss_peak_memory_is_a_fraction_of_the_full_logits():
    from bench.loss_memory import run_variant

    full = run_variant(1024, 32000, 64, 0, "cpu", 1.0)
    chunked = run_variant(1024, 32000, 64, 128, "cpu", 1.0)
    logits_bytes = 1024 * 32000 * 4
    assert full["peak_bytes"] >= 2 * logits_bytes  # the logits and at least their log-softmax or gradient
    assert chunked["peak_bytes"] < 0.3 * full["peak_bytes"]
    assert chunked["loss"] == pytest.approx(full["loss"], rel=1e-5)
