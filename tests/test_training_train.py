"""`lwm train` end to end: torchrun with two gloo ranks, learning, exact resume, clear errors, lazy torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from tests.helpers import write_synthetic_shards  # noqa: E402
from training.checkpoint import load_checkpoint  # noqa: E402
from training.cli import train as train_command  # noqa: E402
from training.loop import TrainConfig, train  # noqa: E402
from training.schedule import lr_multiplier  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TINY_RUN = ["--tiny-vocab", "64", "--tiny-dim", "64", "--tiny-layers", "2", "--micro-batch-tokens", "256"]


@pytest.fixture(scope="module")
def train_shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The shard folder the end-to-end runs train on (synthetic, with learnable observations)."""
    return write_synthetic_shards(str(tmp_path_factory.mktemp("run")), rows_per_file=(48, 48), row_group_rows=8)


def _read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _torchrun(args: list[str]) -> subprocess.CompletedProcess:
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "training", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_torchrun_two_ranks_learns_and_resumes(train_shards, tmp_path):
    out, first_log, second_log = tmp_path / "ckpt", tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    common = ["--shards", train_shards, "--out", str(out), "--pack", "--lr", "1e-2", "--warmup-steps", "5", *TINY_RUN]
    # 30 steps: the mean loss of the last ten is about 0.36 of the first ten's (half is asserted); with the
    # optimizer step left out it stays at about 0.97 of it
    first = _torchrun([*common, "--max-steps", "30", "--log-every", "1", "--log-json", str(first_log)])
    assert first.returncode == 0, first.stderr[-3000:]
    log = _read_log(first_log)
    assert [e["step"] for e in log] == list(range(1, 31))
    assert all(e["tokens"] > 0 and 0 < e["weighted_tokens"] <= e["tokens"] for e in log)
    early = sum(e["loss"] for e in log[:10]) / 10
    late = sum(e["loss"] for e in log[-10:]) / 10
    assert late < 0.5 * early, (early, late)
    assert (out / "latest").read_text() == "step-00000030"
    assert "weighted tok/s" in first.stdout

    second = _torchrun([*common, "--max-steps", "34", "--log-every", "2", "--log-json", str(second_log)])
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout and "at step 30" in second.stdout
    assert [e["step"] for e in _read_log(second_log)] == [32, 34]
    checkpoint = load_checkpoint(str(out))
    assert checkpoint.step == 34
    assert len(checkpoint.data_states) == 2


def _in_process(shards: str, out: Path, max_steps: int, log: Path, workers: int = 0) -> list[dict]:
    config = TrainConfig(
        shards=(shards,),
        max_steps=max_steps,
        out=str(out),
        lr=3e-3,
        schedule="constant",
        grad_accum=2,
        micro_batch_tokens=64,
        shuffle_buffer=8,
        log_every=1,
        log_json=str(log),
        tiny_vocab=64,
        tiny_dim=32,
        num_workers=workers,
    )
    return train(config, echo=lambda _line: None)


def test_interrupted_run_equals_an_uninterrupted_one(train_shards, tmp_path):
    straight = _in_process(train_shards, tmp_path / "a", 12, tmp_path / "a.jsonl")
    _in_process(train_shards, tmp_path / "b", 6, tmp_path / "b.jsonl")
    resumed = _in_process(train_shards, tmp_path / "b", 12, tmp_path / "b.jsonl")
    assert [e["step"] for e in resumed] == list(range(7, 13))
    for a, b in zip(straight[6:], resumed):
        assert a["tokens"] == b["tokens"]  # the same samples, in the same micro-batches
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    model_a = load_checkpoint(str(tmp_path / "a")).model
    model_b = load_checkpoint(str(tmp_path / "b")).model
    for name, tensor in model_a.items():
        torch.testing.assert_close(tensor, model_b[name], rtol=1e-5, atol=1e-7)


def test_a_run_resumed_with_another_number_of_dataloader_workers_equals_an_uninterrupted_one(train_shards, tmp_path):
    straight = _in_process(train_shards, tmp_path / "a", 8, tmp_path / "a.jsonl", workers=0)
    _in_process(train_shards, tmp_path / "b", 4, tmp_path / "b.jsonl", workers=2)
    resumed = _in_process(train_shards, tmp_path / "b", 8, tmp_path / "b.jsonl", workers=1)
    assert [e["step"] for e in resumed] == [5, 6, 7, 8]
    assert [e["tokens"] for e in resumed] == [e["tokens"] for e in straight[4:]]
    assert [e["loss"] for e in resumed] == pytest.approx([e["loss"] for e in straight[4:]], rel=1e-5)


def test_cli_refuses_unfinished_shards_in_one_line(tmp_path):
    pool = write_synthetic_shards(str(tmp_path), success=False)
    result = CliRunner().invoke(train_command, ["--shards", pool, "--max-steps", "1"])
    assert result.exit_code == 2
    assert "no _SUCCESS marker" in result.output
    assert "Traceback" not in result.output


def test_cli_refuses_a_whole_run_folder_and_names_its_pools(train_shards):
    run = str(Path(train_shards).parent.parent)  # the folder of manifest.json, shards/ and the work files
    result = CliRunner().invoke(train_command, ["--shards", run, "--max-steps", "1"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"lwm: error: {run} is a whole run (its work files, every pool, eval included); give the pool to train on: "
        f"{train_shards}"]


def test_cli_refuses_a_model_folder_without_config(train_shards, tmp_path):
    result = CliRunner().invoke(
        train_command, ["--shards", train_shards, "--max-steps", "1", "--model", str(tmp_path / "x")]
    )
    assert result.exit_code == 2
    assert "not a Hugging Face model directory" in result.output


def test_cli_explains_a_missing_transformers(train_shards, tmp_path):
    if _has_transformers():
        pytest.skip("transformers is installed here")
    (tmp_path / "config.json").write_text("{}")
    result = CliRunner().invoke(train_command, ["--shards", train_shards, "--max-steps", "1", "--model", str(tmp_path)])
    assert result.exit_code == 2
    assert "needs the transformers package" in result.output


def _has_transformers() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


def test_package_and_command_import_without_torch():
    # torch made unimportable in a fresh interpreter: `import training` and the command object still load
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import training, training.cli\n"
        "from click.testing import CliRunner\n"
        "r = CliRunner().invoke(training.cli.train, ['--shards', 'x', '--max-steps', '1'])\n"
        "print(r.exit_code, r.output.strip())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2 lwm: error: lwm train needs torch: pip install 'lwmkit[train]'"


def test_schedule_warmup_then_cosine_or_linear():
    assert [lr_multiplier(s, 4, 20, "cosine", 0.1) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_multiplier(12, 4, 20, "cosine", 0.1) == pytest.approx(0.55)
    assert lr_multiplier(20, 4, 20, "cosine", 0.1) == pytest.approx(0.1)
    assert lr_multiplier(30, 4, 20, "cosine", 0.1) == pytest.approx(0.1)
    assert lr_multiplier(12, 4, 20, "linear", 0.0) == pytest.approx(0.5)
    assert lr_multiplier(12, 0, 20, "constant", 0.0) == 1.0


def test_resuming_with_more_steps_follows_the_new_schedule_from_the_first_step(train_shards, tmp_path):
    def run(out: Path, max_steps: int) -> list[dict]:
        config = TrainConfig(shards=(train_shards,), max_steps=max_steps, out=str(out), lr=1e-3, schedule="cosine",
                             warmup_steps=1, micro_batch_tokens=64, shuffle_buffer=8, log_every=1, tiny_vocab=64,
                             tiny_dim=32)
        return train(config, echo=lambda _line: None)

    straight = run(tmp_path / "a", 6)
    run(tmp_path / "b", 4)  # a run asked for 4 steps, then extended to 6
    extended = run(tmp_path / "b", 6)
    assert [e["step"] for e in extended] == [5, 6]
    assert [e["lr"] for e in extended] == [e["lr"] for e in straight[4:]]
    assert extended[0]["lr"] > 0.1 * straight[0]["lr"]  # not the saved schedule's last, near-zero rate


def test_resuming_with_a_new_rate_and_weight_decay_trains_with_them_and_says_so(train_shards, tmp_path):
    """The step after a loss spike, resumed with a lower --lr: the old peak rate and decay would come back."""
    def run(max_steps: int, **changed) -> tuple[list[dict], list[str]]:
        said: list[str] = []
        config = TrainConfig(shards=(train_shards,), max_steps=max_steps, out=str(tmp_path / "ck"), micro_batch_tokens=64,
                             shuffle_buffer=8, log_every=1, tiny_vocab=64, tiny_dim=32, **changed)
        return train(config, echo=said.append), said

    run(2, lr=1e-3)
    logged, said = run(4, lr=1e-5, schedule="constant", weight_decay=0.5)
    assert [e["lr"] for e in logged] == [pytest.approx(1e-5)] * 2
    groups = load_checkpoint(str(tmp_path / "ck")).optimizer["param_groups"]
    assert {g["weight_decay"] for g in groups} == {0.5} and {g["initial_lr"] for g in groups} == {1e-5}
    assert any(line.startswith(f"resumed from {tmp_path / 'ck'} at step 2 with --lr 1e-05 (was 0.001), "
                               "--weight-decay 0.5 (was 0), --schedule constant (was cosine)") for line in said), said


def test_resuming_with_another_max_steps_or_step_update_says_so(train_shards, tmp_path):
    """--max-steps moves the end of the cosine schedule, so the rate of every step after the resume changes."""
    args = ["--shards", train_shards, "--out", str(tmp_path / "ck"), "--tiny-vocab", "64", "--tiny-dim", "16",
            "--tiny-layers", "1", "--tiny-heads", "2", "--micro-batch-tokens", "64", "--shuffle-buffer", "8"]
    assert CliRunner().invoke(train_command, [*args, "--max-steps", "1"]).exit_code == 0
    result = CliRunner().invoke(train_command, [*args, "--max-steps", "2"])
    assert result.exit_code == 0, result.output
    assert f"resumed from {tmp_path / 'ck'} at step 1 with --max-steps 2 (was 1)\n" in result.output, result.output
    # the step's update is this command's too: the micro-batches it accumulates, the loss norm, the clipping
    result = CliRunner().invoke(train_command, [*args, "--max-steps", "3", "--grad-accum", "2", "--loss-norm",
                                                "weights", "--max-grad-norm", "0.5"])
    assert result.exit_code == 0, result.output
    assert (f"resumed from {tmp_path / 'ck'} at step 2 with --max-steps 3 (was 2), --grad-accum 2 (was 1), "
            "--loss-norm weights (was tokens), --max-grad-norm 0.5 (was 1)\n") in result.output, result.output


def test_resuming_into_a_checkpoint_of_another_model_shape_is_one_line(train_shards, tmp_path):
    args = ["--shards", train_shards, "--out", str(tmp_path / "ck"), "--tiny-vocab", "64", "--micro-batch-tokens", "64",
            "--shuffle-buffer", "8"]
    assert CliRunner().invoke(train_command, [*args, "--max-steps", "1", "--tiny-dim", "32"]).exit_code == 0
    result = CliRunner().invoke(train_command, [*args, "--max-steps", "2", "--tiny-dim", "64"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith(f"lwm: error: --out {tmp_path / 'ck'}: its checkpoint is of another model (size "
                                "mismatch for "), result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
