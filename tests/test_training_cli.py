"""`lwm train` as a user meets it: settings it cannot train with, errors of its environment and a URL for
``--out`` are one line; runs that cannot be mixed are refused;
Ctrl-C and SIGTERM save the step reached; one run at a time trains into a checkpoint folder."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from pipeline.cli import main as lwm
from schemas.errors import ConfigError
from tests.helpers import clean_env, terminal_notes_run, write_synthetic_shards
from training.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--tiny-vocab", "64", "--tiny-dim", "32", "--micro-batch-tokens", "64", "--shuffle-buffer", "8"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_synthetic_shards(str(tmp_path_factory.mktemp("run")), rows_per_file=(24, 24), row_group_rows=8)


def _lwm_train(*args: str):
    return CliRunner().invoke(lwm, ["train", *args])


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--lr", "nan"], "--lr"),
        (["--lr", "-1"], "--lr"),
        (["--lr", "0"], "--lr"),
        (["--weight-decay", "-1"], "--weight-decay"),
        (["--min-lr-ratio", "5"], "--min-lr-ratio"),
        (["--max-grad-norm", "-1"], "--max-grad-norm"),
        (["--max-grad-norm", "nan"], "--max-grad-norm"),
        (["--tiny-dim", "6", "--tiny-heads", "4"], "--tiny-dim"),
    ],
)
def test_a_setting_that_cannot_train_is_one_line_naming_its_flag(shards, flags, named):
    result = _lwm_train("--shards", shards, "--max-steps", "2", *flags)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lwm: error: {named} "), result.output


def test_gradient_clipping_off_is_still_accepted(shards):
    result = _lwm_train("--shards", shards, "--max-steps", "1", "--max-grad-norm", "0", *TINY)
    assert result.exit_code == 0, result.output


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_object_store_that_cannot_be_reached_is_one_line():
    env = {**clean_env(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_free_port()}", "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "x", "AWS_MAX_ATTEMPTS": "1"}
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "train", "--shards", "s3://b/out/shards/cpt",
                           "--max-steps", "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lwm: error: ") and "127.0.0.1" in lines[0], proc.stderr[-2000:]


def test_an_object_storage_out_is_refused_before_anything_is_written(shards, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _lwm_train("--shards", shards, "--max-steps", "1", "--out", "s3://bucket/ck", *TINY)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("lwm: error: --out s3://bucket/ck: ")
    assert list(tmp_path.iterdir()) == []  # no folder named "s3:"


def _run(root: Path, tokenizer: dict | None = None, table: dict | None = None) -> str:
    """A run of synthetic shards under `root` whose manifest says it used `tokenizer` and the masking `table`."""
    pool = write_synthetic_shards(str(root), rows_per_file=(24, 24), row_group_rows=8)
    manifest = json.loads((root / "manifest.json").read_text())
    if tokenizer is not None:
        manifest["tokenizer"] = tokenizer
    if table is not None:
        manifest["config"] = {"masking": {"table": table}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return pool


QWEN = {"engine": "tiktoken", "name": "qwen3.6", "vocab_hash": "cb8b82adc548f042fd99ba5645902a75d6cd9899ecc4"}
OTHER = {"engine": "tokenizers", "name": "tokenizer.json", "vocab_hash": "0f1e2d3c4b5a69788796a5b4c3d2e1f00112"}


def test_a_run_whose_manifest_names_no_vocabulary_hash_is_not_compared():
    """An older manifest naming its tokenizer without a vocabulary hash says nothing comparable: no refusal."""
    from training.runs import check_same_tokenizer

    hashed = {"tokenizer": {"name": "qwen3.6", "engine": "tiktoken", "vocab_hash": "ab" * 32}}
    named = {"tokenizer": {"name": "qwen3.6", "engine": "tiktoken"}}
    check_same_tokenizer({"a": (hashed, "/runs/a"), "b": (named, "/runs/b")})
    with pytest.raises(ConfigError, match="/runs/a was tokenized with"):
        check_same_tokenizer({"a": (hashed, "/runs/a"),
                              "b": ({"tokenizer": {**hashed["tokenizer"], "vocab_hash": "cd" * 32}}, "/runs/b")})


def test_runs_of_different_tokenizers_are_not_mixed(shards, tmp_path):
    first = _run(tmp_path / "a", tokenizer=QWEN)
    second = _run(tmp_path / "b", tokenizer=OTHER)
    result = _lwm_train("--shards", first, "--shards", second, "--max-steps", "1", *TINY)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    for named in (str(tmp_path / "a"), str(tmp_path / "b"), "qwen3.6", "tokenizer.json"):
        assert named in lines[0]
    same = _run(tmp_path / "c", tokenizer=QWEN)
    assert _lwm_train("--shards", first, "--shards", same, "--max-steps", "1", *TINY).exit_code == 0


def test_a_category_weight_the_shards_do_not_hold_is_one_line_naming_those_they_hold(shards):
    """The synthetic shards hold retrieval, echo and boilerplate observations (no manifest histogram: read from
    their turn_category column): a WMAT span, or a category of the masking table they hold none of, changes
    nothing, so it is refused."""
    for name in ("world_model", "transform", "ech"):
        result = _lwm_train("--shards", shards, "--max-steps", "1", "--category-weight", f"{name}=0.5", *TINY)
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            f"lwm: error: --category-weight {name}: no such category in these shards; they hold boilerplate, echo, "
            "retrieval"], result.output


def test_the_categories_of_a_pipeline_pool_are_read_from_its_manifest(tmp_path, monkeypatch):
    """`lwm train --shards OUT/shards/cpt --category-weight world_model=0.5`: the cpt pool holds no WMAT span, as
    the manifest's histogram says without a shard being read."""
    terminal_notes_run(tmp_path)
    pool = tmp_path / "out" / "shards" / "cpt"
    held = {c for f in pool.glob("*.parquet") for cats in pq.read_table(f).column("turn_category").to_pylist()
            for c in cats}
    assert held and "world_model" not in held
    import training.reweight

    monkeypatch.setattr(training.reweight, "_categories_in_file", lambda uri: pytest.fail(f"{uri} was read"),
                        raising=False)
    for name in ("world_model", "ech"):
        result = _lwm_train("--shards", str(pool), "--max-steps", "1", "--category-weight", f"{name}=0.5")
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            f"lwm: error: --category-weight {name}: no such category in these shards; they hold "
            f"{', '.join(sorted(held))}"], result.output


def test_a_category_weight_that_only_some_runs_have_is_warned_about(shards, tmp_path):
    from masking.table import DEFAULT_TABLE_PATH, read_table_file

    table = read_table_file(DEFAULT_TABLE_PATH)
    *rules, catch_all = table["categories"]
    extended = {**table, "categories": [*rules, {**rules[0], "name": "diffs"}, catch_all]}
    first = _run(tmp_path / "a", table=table)
    second = _run(tmp_path / "b", table=extended)
    for shard in Path(second).glob("*.parquet"):  # the extended table classified some observations as diffs
        rows = pq.read_table(shard)
        renamed = [["diffs" if c == "boilerplate" else c for c in cats] for cats in rows.column("turn_category").to_pylist()]
        column = rows.schema.get_field_index("turn_category")
        pq.write_table(rows.set_column(column, rows.schema.field(column), pa.array(renamed, rows.schema.field(column).type)),
                       shard)
    with pytest.warns(UserWarning, match=r"--category-weight diffs: .*" + str(tmp_path / "a")):
        result = _lwm_train("--shards", first, "--shards", second, "--max-steps", "1", "--category-weight",
                            "diffs=0", *TINY)
    assert result.exit_code == 0, result.output
    with warnings.catch_warnings(record=True) as caught:  # a category every run has: no warning
        warnings.simplefilter("always")
        assert _lwm_train("--shards", first, "--shards", second, "--max-steps", "1", "--category-weight",
                          "echo=0", *TINY).exit_code == 0
    assert not [w for w in caught if "--category-weight" in str(w.message)]


def _start(shards: str, out: Path, log: Path, entry: tuple[str, ...] = ("pipeline.cli", "train")) -> subprocess.Popen:
    """`lwm train` (or another `entry`) into `out` that would take long, once it has logged a few steps."""
    command = [sys.executable, "-m", *entry, "--shards", shards, "--out", str(out), "--max-steps",
               "100000", "--log-every", "1", "--log-json", str(log), *TINY]
    run = subprocess.Popen(command, cwd=ROOT, env={**clean_env(), "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (log.exists() and len(log.read_text().splitlines()) >= 3):
        assert run.poll() is None, run.communicate()[1][-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return run


@pytest.mark.parametrize(("signum", "status", "word"), [(signal.SIGINT, 130, "interrupted"),
                                                         (signal.SIGTERM, 143, "terminated")])
def test_a_stopped_run_saves_its_step_and_the_same_command_resumes_from_it(shards, tmp_path, signum, status, word):
    out, log = tmp_path / "ck", tmp_path / "log.jsonl"
    run = _start(shards, out, log)
    run.send_signal(signum)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == status, stderr[-2000:]
    step = load_checkpoint(str(out)).step
    assert step >= 3 and step == len(log.read_text().splitlines())  # every step trained is in the checkpoint
    assert stderr.strip().splitlines()[-1] == f"lwm: {word} (step {step} saved in {out}: the same command resumes)"
    again = _lwm_train("--shards", shards, "--out", str(out), "--max-steps", str(step + 1), *TINY)
    assert again.exit_code == 0, again.output
    assert f"resumed from {out} at step {step}" in again.output


def test_python_m_training_ends_a_ctrl_c_in_the_same_line(shards, tmp_path):
    """`python -m training` (what torchrun starts) saved the step but ended in click's "Aborted!" and exit 1."""
    out, log = tmp_path / "ck", tmp_path / "log.jsonl"
    run = _start(shards, out, log, entry=("training",))
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 130, stderr[-2000:]
    step = load_checkpoint(str(out)).step
    assert stderr.strip().splitlines()[-1] == f"lwm: interrupted (step {step} saved in {out}: the same command resumes)"


def test_a_second_run_into_a_checkpoint_folder_in_use_is_refused(shards, tmp_path):
    out, log = tmp_path / "ck", tmp_path / "log.jsonl"
    run = _start(shards, out, log)
    try:
        second = _lwm_train("--shards", shards, "--out", str(out), "--max-steps", "2", *TINY)
        assert second.exit_code == 2, second.output
        assert second.output.strip() == f"lwm: error: {out} is in use by another lwm train; wait for it to end or " \
                                        "choose another --out"
    finally:
        os.kill(run.pid, signal.SIGINT)
        run.communicate(timeout=60)
    assert _lwm_train("--shards", shards, "--out", str(out), "--max-steps", "2", *TINY).exit_code == 0


@pytest.mark.parametrize("where", ["missing/steps.jsonl", "a-file/steps.jsonl"])
def test_a_log_file_that_cannot_be_written_is_refused_before_training(shards, tmp_path, where):
    (tmp_path / "a-file").write_text("")
    log, out = tmp_path / where, tmp_path / "ck"
    result = _lwm_train("--shards", shards, "--max-steps", "3", "--log-every", "1", "--log-json", str(log), "--out",
                        str(out), *TINY)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert result.output.startswith(f"lwm: error: --log-json {log}: cannot be written ("), result.output
    assert not out.exists()  # refused before anything was trained or written


def test_more_dataloader_workers_than_rows_train_as_no_workers_do(tmp_path):
    """The workers deal the rank's endless stream out among themselves: none is left without rows, and the run
    trains on the same samples as one without workers."""
    pool = write_synthetic_shards(str(tmp_path), rows_per_file=(2,), row_group_rows=2)

    def run(workers: str) -> list[tuple[int, float]]:
        log = tmp_path / f"steps-{workers}.jsonl"
        result = _lwm_train("--shards", pool, "--max-steps", "3", "--log-every", "1", "--log-json", str(log),
                            "--num-workers", workers, "--seed", "3", *TINY)
        assert result.exit_code == 0, result.output
        return [(e["tokens"], e["loss"]) for e in map(json.loads, log.read_text().splitlines())]

    assert run("3") == run("0")


def test_a_checkpoint_with_per_worker_data_positions_is_refused_in_one_line(shards, tmp_path):
    """Data state format 1 (a block per dataloader worker) names no position in the stream read now: resuming at
    its numbers would train on other samples than the interrupted run had left."""
    out = tmp_path / "ck"
    assert _lwm_train("--shards", shards, "--out", str(out), "--max-steps", "1", *TINY).exit_code == 0
    state = out / (out / "latest").read_text() / "data_state.json"
    old = [{"format": 1, "seed": 0, "shuffle": True, "shuffle_buffer": 8, "total_rows": 48, "num_consumers": 2,
            "epoch": 0, "progress": {"0": [0, 3]}, "next_worker": 1}]
    state.write_text(json.dumps(old))
    result = _lwm_train("--shards", shards, "--out", str(out), "--max-steps", "2", *TINY)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"lwm: error: --out {out}: the data position was saved by an older lwm train, which gave each dataloader "
        "worker rows of its own; it names no position in the stream read now, so it cannot resume at the same "
        "sample: train into a new --out"]
    assert (out / "latest").read_text() == "step-00000001" and json.loads(state.read_text()) == old


def test_a_broken_shard_met_in_a_dataloader_worker_is_one_line(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pool = write_synthetic_shards(str(tmp_path), rows_per_file=(6,), row_group_rows=3)
    part = Path(pool) / "part-00000.parquet"
    table = pq.read_table(part)
    ids = table.column("input_ids").to_pylist()
    ids[1][1] = None  # a null token id, which the loader refuses when it decodes the row
    index = table.schema.get_field_index("input_ids")
    pq.write_table(table.set_column(index, table.schema.field(index), pa.array(ids, table.schema.field(index).type)),
                   part, row_group_size=3)
    result = _lwm_train("--shards", pool, "--max-steps", "2", "--num-workers", "1", "--no-shuffle", *TINY)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == f"lwm: error: {part} row group 0 rows 0-2: column input_ids " \
                                                     "holds nulls", result.output
    assert "Traceback" not in result.output and "worker process" not in result.output


def test_flash_attention_without_its_package_is_one_line(shards, tmp_path):
    pytest.importorskip("transformers")
    import importlib.util

    from tests.helpers import write_tiny_qwen

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed here")
    model = write_tiny_qwen(str(tmp_path / "qwen"))
    result = _lwm_train("--shards", shards, "--model", model, "--attention", "flash_attention_2", "--max-steps", "1")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith("lwm: error: --attention flash_attention_2: ")
    assert "internal error" not in result.output


@pytest.mark.parametrize("overlap", ["64", "100"])
def test_a_window_overlap_of_a_whole_row_is_refused_before_any_shard_is_read(tmp_path, overlap):
    result = _lwm_train("--shards", str(tmp_path / "no-such-run"), "--max-steps", "1", "--long-samples", "window",
                        "--window-overlap", overlap, *TINY)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"lwm: error: --window-overlap {overlap} must lie in 1..63 tokens, under "
                                     "--micro-batch-tokens 64: consecutive windows would not advance")
