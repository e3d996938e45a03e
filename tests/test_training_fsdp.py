"""`--fsdp` (FSDP2): two gloo ranks on CPU step like one process, and a sharded checkpoint resumes exactly."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.helpers import run_ranks, write_synthetic_shards, write_tiny_qwen  # noqa: E402
from training.__main__ import exit_rank  # noqa: E402
from training.checkpoint import load_checkpoint  # noqa: E402
from training.collate import pad_samples  # noqa: E402
from training.models import load_hf_causal_lm  # noqa: E402
from training.sharding import shard_model  # noqa: E402
from training.step import accumulate_gradients  # noqa: E402
from training.tiny_model import TinyConfig, TinyDecoder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 96


def _samples(count, seed):
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for number in range(count):
        n = int(torch.randint(5, 14, (1,), generator=generator))
        ids = torch.randint(1, VOCAB, (n,), generator=generator)
        weights = torch.rand(n, generator=generator) * (torch.rand(n, generator=generator) > 0.4)
        samples.append({"sample_id": f"s{number}", "input_ids": ids, "loss_weight": weights})
    return samples


def _models(qwen_dir):
    torch.manual_seed(0)
    return {"tiny": TinyDecoder(TinyConfig(vocab_size=VOCAB, dim=32, layers=2, heads=4)), "qwen": load_hf_causal_lm(qwen_dir)}


def _full(tensor):
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _rank_worker(rank, rendezvous, qwen_dir, result_path):
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2,
                                         timeout=datetime.timedelta(seconds=120))
    samples = _samples(10, seed=11)
    mine = samples[:4] if rank == 0 else samples[4:]  # unequal shares: the ranks' denominators differ
    results = {}
    for name, model in _models(qwen_dir).items():
        shard_model(model, None, torch.device("cpu"))
        assert all(hasattr(p, "full_tensor") for p in model.parameters())  # really sharded
        result = accumulate_gradients(model, [pad_samples(mine[:2]), pad_samples(mine[2:])], "tokens", 8)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
        grads = {n: _full(p.grad) for n, p in model.named_parameters()}
        results[name] = (result.loss, result.denominator, float(_full(norm)), grads)
    if rank == 0:
        torch.save(results, result_path)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    exit_rank(0)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return write_tiny_qwen(str(tmp_path_factory.mktemp("qwen")), vocab=VOCAB)


def test_two_fsdp_gloo_ranks_equal_one_process(qwen_dir, tmp_path):
    result_path = tmp_path / "rank0.pt"
    run_ranks(_rank_worker, (qwen_dir, str(result_path)), tmp_path)
    sharded = torch.load(result_path, weights_only=True)
    samples = _samples(10, seed=11)
    for name, model in _models(qwen_dir).items():
        result = accumulate_gradients(model, [pad_samples(samples[:5]), pad_samples(samples[5:])], "tokens", 8)
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9))
        loss, denominator, sharded_norm, grads = sharded[name]
        assert denominator == result.denominator
        assert loss == pytest.approx(result.loss, rel=1e-5), name
        assert sharded_norm == pytest.approx(norm, rel=1e-4), name
        for parameter_name, parameter in model.named_parameters():
            torch.testing.assert_close(grads[parameter_name], parameter.grad, rtol=1e-4, atol=1e-7, msg=parameter_name)


def _torchrun(args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node", "2", "-m", "training"]
    return subprocess.run([*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _full_state(folder):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    target = Path(folder) / "full.pt"
    dcp_to_torch_save(str(Path(folder) / "sharded"), str(target))
    return torch.load(target, weights_only=True)["model"]


@pytest.mark.slow
def test_torchrun_fsdp_sharded_checkpoint_resumes_exactly(qwen_dir, tmp_path):
    shards = write_synthetic_shards(str(tmp_path / "run"), rows_per_file=(24, 24), row_group_rows=6)
    common = ["--shards", shards, "--model", qwen_dir, "--fsdp", "--pack", "--micro-batch-tokens", "128",
              "--grad-accum", "2", "--lr", "3e-3", "--schedule", "constant", "--log-every", "1"]
    # One straight run to step 6 that also saves at step 3 (both checkpoints are kept): its step-3
    # checkpoint, alone in a new folder, is where the interrupted run resumes from.
    straight = _torchrun([*common, "--out", str(tmp_path / "a"), "--max-steps", "6", "--save-every", "3",
                          "--log-json", str(tmp_path / "a.jsonl")])
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "2 rank(s) (FSDP)" in straight.stdout
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["latest", "step-00000003", "step-00000006"]
    shutil.copytree(tmp_path / "a" / "step-00000003", tmp_path / "b" / "step-00000003")
    (tmp_path / "b" / "latest").write_text("step-00000003")
    checkpoint = load_checkpoint(str(tmp_path / "b"))
    assert checkpoint.step == 3
    assert checkpoint.model is None and checkpoint.trainer["sharded"]
    assert sorted(p.name for p in Path(checkpoint.folder, "sharded").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    second = _torchrun([*common, "--out", str(tmp_path / "b"), "--max-steps", "6", "--log-json", str(tmp_path / "b.jsonl")])
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout and "at step 3" in second.stdout
    log_a = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    log_b = [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log_a] == [1, 2, 3, 4, 5, 6]
    assert [e["step"] for e in log_b] == [4, 5, 6]
    for a, b in zip(log_a[3:], log_b):
        assert a["tokens"] == b["tokens"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    state_a = _full_state(load_checkpoint(str(tmp_path / "a")).folder)
    state_b = _full_state(load_checkpoint(str(tmp_path / "b")).folder)
    assert len(state_a) > 10
    for name, tensor in state_a.items():
        torch.testing.assert_close(tensor, state_b[name], rtol=1e-5, atol=1e-7, msg=name)
    # a sharded checkpoint is not resumed without --fsdp
    refused = _torchrun([a for a in common if a != "--fsdp"] + ["--out", str(tmp_path / "b"), "--max-steps", "7"])
    assert refused.returncode != 0 and "resume the same way" in refused.stderr + refused.stdout
