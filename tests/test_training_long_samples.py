"""Samples longer than a row: refused up front from the manifest, or dropped, left-truncated or windowed on request."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from schemas.errors import ConfigError  # noqa: E402
from tests.helpers import write_synthetic_shards  # noqa: E402
from training.checkpoint import load_checkpoint  # noqa: E402
from training.cli import train as train_command  # noqa: E402
from training.collate import micro_batches  # noqa: E402
from training.long_samples import LongSamplePolicy, longest_sample, window_pieces, window_starts  # noqa: E402
from training.loop import TrainConfig, train  # noqa: E402
from training.shards import resolve_shard_files  # noqa: E402

ROW = 32
TINY = ["--tiny-vocab", "64", "--tiny-dim", "32", "--tiny-layers", "1", "--max-steps", "4", "--log-every", "1"]


def _sample(weights, name="s", position=(0, 1, 0, 0)):
    n = len(weights)
    return {
        "sample_id": name,
        "input_ids": torch.arange(100, 100 + n),
        "loss_weight": torch.tensor(weights, dtype=torch.float32),
        "position": position,
    }


@pytest.fixture(scope="module")
def long_shards(tmp_path_factory):
    """Shards where every fourth sample has 12 turns (~150 tokens), far over a 32-token row."""
    root = tmp_path_factory.mktemp("long")
    return write_synthetic_shards(str(root), rows_per_file=(16, 16), row_group_rows=4, long_every=4, long_turns=12)


def _true_longest(pool):
    return max(pc.max(pq.read_table(f, columns=["num_tokens"]).column(0)).as_py() for f in resolve_shard_files([pool]))


def test_window_starts_by_hand():
    assert window_starts(10, 4, 1) == [0, 3, 6]
    assert window_starts(11, 4, 1) == [0, 3, 6, 7]  # the last window ends at the sample's end
    assert window_starts(4, 4, 2) == [0]
    assert window_starts(9, 4, 2) == [0, 2, 4, 5]


def test_windows_count_every_loss_token_exactly_once():
    generator = torch.Generator().manual_seed(3)
    weights = (torch.rand(23, generator=generator) * (torch.rand(23, generator=generator) > 0.3)).tolist()
    weights[0] = 0.0
    sample = _sample(weights)
    pieces = window_pieces(sample, row=8, overlap=3)
    assert all(len(p["input_ids"]) == 8 for p in pieces)
    seen: dict[int, float] = {}
    for piece in pieces:
        start = piece["window_start"]
        assert piece["input_ids"].tolist() == list(range(100 + start, 108 + start))
        # position 0 of a piece is never a target, so its weight must already be covered or zero
        assert float(piece["loss_weight"][0]) == 0.0
        for offset in torch.nonzero(piece["loss_weight"]).flatten().tolist():
            token = start + offset
            assert token not in seen, f"token {token} is a target in two windows"
            assert offset >= 3 or start == 0  # at least `overlap` tokens of context before a new target
            seen[token] = float(piece["loss_weight"][offset])
    expected = {i: w for i, w in enumerate(weights) if w > 0}
    assert seen == pytest.approx(expected)


def test_policies_drop_truncate_left_and_window():
    head = [0.0] * 30 + [1.0] * 10  # 40 tokens: a long prompt, the weighted part at the end
    short = _sample([0.0, 1.0, 1.0], "short", (0, 1, 0, 1))
    long = _sample(head, "long", (0, 1, 0, 0))

    dropped = LongSamplePolicy(16, "drop")
    assert [s["sample_id"] for s in dropped([long, short])] == ["short"]
    assert (dropped.counts.long, dropped.counts.dropped, dropped.counts.lost_loss_tokens) == (1, 1, 10)

    left = LongSamplePolicy(16, "truncate-left")
    (kept,) = left([long])
    assert kept["input_ids"].tolist() == list(range(124, 140))
    assert kept["loss_weight"].tolist() == [0.0] * 6 + [1.0] * 10
    assert (left.counts.truncated_left, left.counts.lost_loss_tokens) == (1, 0)

    windows = LongSamplePolicy(16, "window", overlap=4)
    pieces = list(windows([long]))
    # windows at 0, 12, 24: the first two hold only prompt tokens and are skipped
    assert [p["window_start"] for p in pieces] == [24]
    assert (windows.counts.windowed, windows.counts.pieces, windows.counts.empty_pieces) == (1, 1, 2)
    assert pieces[0]["piece"] == (0, 1)

    with pytest.raises(Exception, match="has 40 tokens, over --micro-batch-tokens 16"):
        list(LongSamplePolicy(16, "refuse")([long]))


def test_head_truncation_would_train_on_nothing_but_the_policies_keep_the_loss():
    # the android case: the weighted turns start after a prompt longer than the row
    long = _sample([0.0] * 30 + [1.0] * 10, "long")
    head_only = next(micro_batches(iter([long]), 16, pack=True))
    assert float(head_only.label_weights.sum()) == 0  # what a plain collator does
    for policy in ("truncate-left", "window"):
        batch = next(micro_batches(LongSamplePolicy(16, policy, overlap=4)(iter([long])), 16, pack=True))
        assert float(batch.label_weights.sum()) == 10


def test_longest_sample_comes_from_the_manifest_or_the_parquet_footers(long_shards, tmp_path):
    files = resolve_shard_files([long_shards])
    from_manifest = longest_sample(files)
    assert from_manifest.tokens == _true_longest(long_shards) > ROW
    assert from_manifest.source == "manifest.json"
    older = write_synthetic_shards(str(tmp_path), rows_per_file=(8,), long_every=2, long_turns=6, manifest_max_tokens=False)
    from_footer = longest_sample(resolve_shard_files([older]))
    assert from_footer.tokens == _true_longest(older)
    assert from_footer.source == "parquet statistics"


def test_cli_refuses_long_samples_in_one_actionable_line(long_shards):
    result = CliRunner().invoke(train_command, ["--shards", long_shards, "--micro-batch-tokens", str(ROW), *TINY])
    assert result.exit_code == 2
    longest = _true_longest(long_shards)
    lines = result.output.strip().splitlines()
    assert lines == [
        f"lwm: error: the longest sample has {longest} tokens (manifest.json) but a row holds --micro-batch-tokens {ROW}: "
        f"raise --micro-batch-tokens to {longest}, or choose --long-samples drop | truncate-left | window"
    ]
    # a row long enough for the longest sample trains without a word about it
    ok = CliRunner().invoke(train_command, ["--shards", long_shards, "--micro-batch-tokens", str(longest), *TINY])
    assert ok.exit_code == 0, ok.output
    assert "longest sample" not in ok.output


@pytest.mark.parametrize("policy", ["drop", "truncate-left", "window"])
def test_each_policy_trains_and_reports_what_it_touched(long_shards, tmp_path, policy):
    log = tmp_path / "log.jsonl"
    args = ["--shards", long_shards, "--micro-batch-tokens", str(ROW), "--long-samples", policy, "--no-shuffle"]
    result = CliRunner().invoke(train_command, [*args, "--pack", "--log-json", str(log), *TINY])
    assert result.exit_code == 0, result.output
    assert f"over the row of {ROW}: {policy}" in result.output
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(e["loss_tokens"] > 0 for e in entries)
    counts = entries[-1]["long_samples"]
    # without shuffling, 4 steps of one 32-token row reach the 4th sample, the first long one
    assert counts["long"] >= 1
    touched = {"drop": counts["dropped"], "truncate-left": counts["truncated_left"], "window": counts["windowed"]}
    assert touched[policy] == counts["long"] and sum(touched.values()) == counts["long"]
    if policy == "window":
        assert counts["pieces"] >= 2 * counts["windowed"]
    else:
        assert counts["lost_loss_tokens"] > 0
    assert f"long samples (over {ROW} tokens): {counts['long']} seen" in result.output


def test_warns_when_a_step_has_rows_without_a_loss_token(long_shards, tmp_path):
    log = tmp_path / "log.jsonl"
    zero_all = [f"--category-weight={c}=0" for c in ("retrieval", "echo", "boilerplate", "transform")]
    args = ["--shards", long_shards, "--micro-batch-tokens", "256", "--long-samples", "drop", "--no-pack"]
    result = CliRunner().invoke(train_command, [*args, *zero_all, "--log-json", str(log), *TINY])
    assert result.exit_code == 0, result.output
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(e["rows"] > 0 and e["empty_rows"] == e["rows"] for e in entries)
    assert f"warning: step 1: {entries[0]['rows']} of {entries[0]['rows']} rows have no loss token" in result.output
    # the default share is not crossed when every row has a weighted target
    quiet = CliRunner().invoke(train_command, [*args, "--log-json", str(tmp_path / "q.jsonl"), *TINY])
    assert quiet.exit_code == 0 and "warning" not in quiet.output


def _window_run(shards, out, max_steps):
    config = TrainConfig(
        shards=(shards,),
        max_steps=max_steps,
        out=str(out),
        lr=3e-3,
        schedule="constant",
        micro_batch_tokens=ROW,
        pack=True,
        shuffle=False,
        long_samples="window",
        window_overlap=8,
        log_every=1,
        tiny_vocab=64,
        tiny_dim=32,
        tiny_layers=1,
    )
    return train(config, echo=lambda _line: None)


def test_a_run_stopped_between_two_windows_of_a_sample_resumes_exactly(tmp_path):
    shards = write_synthetic_shards(str(tmp_path / "all-long"), rows_per_file=(6,), long_every=1, long_turns=10)
    straight = _window_run(shards, tmp_path / "a", 12)
    _window_run(shards, tmp_path / "b", 7)
    state = load_checkpoint(str(tmp_path / "b")).data_states[0]
    # every sample here is cut into 5 windows (one per step), so step 7 stops after 2 of the second's
    assert state["pieces_done"] == [[0, 1, 0, 1, 2]]
    resumed = _window_run(shards, tmp_path / "b", 12)
    assert [e["step"] for e in resumed] == list(range(8, 13))
    for a, b in zip(straight[7:], resumed):
        assert (a["tokens"], a["loss_tokens"]) == (b["tokens"], b["loss_tokens"])
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    # 12 steps began 3 samples (windows 1-5, 6-10, 11-12), each counted once, on its first window
    assert straight[-1]["long_samples"]["windowed"] == 3 and straight[-1]["long_samples"]["pieces"] == 15
    assert straight[-1]["long_samples"] == resumed[-1]["long_samples"]


def test_a_stream_where_nothing_fits_ends_with_one_line_not_a_wait_for_ever():
    def endless(lengths):
        while True:
            yield from (_sample([1.0] * n, name=f"n{n}") for n in lengths)

    policy = LongSamplePolicy(8, "drop", give_up_after=3)
    with pytest.raises(ConfigError, match=r"--long-samples drop leaves nothing to train on: none of the last 3 samples"):
        next(policy(endless([20, 30, 40])))
    # one sample in three fits: never given up on
    fits = LongSamplePolicy(8, "drop", give_up_after=3)(endless([20, 5, 30]))
    assert [len(next(fits)["input_ids"]) for _ in range(5)] == [5] * 5
    # windows without a weighted token give nothing to train on either
    empty = LongSamplePolicy(8, "window", give_up_after=2)
    with pytest.raises(ConfigError, match="--long-samples window leaves nothing to train on"):
        next(empty(iter([_sample([0.0] * 20)] * 5)))


@pytest.mark.timeout(120)
def test_cli_drop_of_every_sample_is_one_line(long_shards):
    shortest = min(pc.min(pq.read_table(f, columns=["num_tokens"]).column(0)).as_py()
                   for f in resolve_shard_files([long_shards]))
    row = shortest - 1  # every sample is longer than a row
    args = ["--shards", long_shards, "--micro-batch-tokens", str(row), "--long-samples", "drop", *TINY]
    result = CliRunner().invoke(train_command, args)
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith(
        f"lwm: error: --long-samples drop leaves nothing to train on: none of the last 65 samples gives a piece to train "
        f"on within --micro-batch-tokens {row}")


def test_cli_on_an_empty_pool_says_so(tmp_path):
    from schemas.shard import schema_for

    pool = tmp_path / "shards" / "sft"
    pool.mkdir(parents=True)
    pq.write_table(schema_for("sft").empty_table(), pool / "part-00000.parquet")
    (tmp_path / "_SUCCESS").write_text("")  # a finished run whose sft pool got no sample
    result = CliRunner().invoke(train_command, ["--shards", str(pool), *TINY])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == f"lwm: error: no samples to train on in {pool} (an empty pool?)"


def test_a_category_weight_for_no_category_of_the_shards_is_one_line(long_shards):
    args = ["--shards", long_shards, "--micro-batch-tokens", "512", "--long-samples", "drop", *TINY]
    result = CliRunner().invoke(train_command, [*args, "--category-weight", "ecoh=0"])  # a typo of echo
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "lwm: error: --category-weight ecoh: no such category in these shards; they hold boilerplate, echo, "
        "retrieval, transform")
    assert CliRunner().invoke(train_command, [*args, "--category-weight", "echo=0"]).exit_code == 0


@pytest.mark.parametrize(("workers", "stop"), [(0, 2), (2, 1), (2, 2), (2, 5)])
def test_a_run_that_drops_samples_resumes_exactly_with_dataloader_workers(tmp_path, workers, stop):
    """A dropped sample is used up like a trained one: a run stopped right after one (steps 1 and 2 here, with
    two workers) resumes with the loader's next sample, not a turn out of order."""
    shards = write_synthetic_shards(str(tmp_path / "mixed"), rows_per_file=(16, 16), row_group_rows=4, long_every=3,
                                    long_turns=12)

    def run(out, max_steps):
        config = TrainConfig(shards=(shards,), max_steps=max_steps, out=str(out), lr=3e-3, schedule="constant",
                             micro_batch_tokens=ROW, long_samples="drop", shuffle=False, num_workers=workers,
                             log_every=1, tiny_vocab=64, tiny_dim=32, tiny_layers=1)
        return train(config, echo=lambda _line: None)

    straight = run(tmp_path / "a", 12)
    assert straight[-1]["long_samples"]["dropped"] >= 3  # every third sample is too long
    run(tmp_path / "b", stop)
    resumed = run(tmp_path / "b", 12)
    assert [(e["tokens"], e["loss_tokens"]) for e in resumed] == [(e["tokens"], e["loss_tokens"])
                                                                 for e in straight[stop:]]
    for a, b in zip(straight[stop:], resumed):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


def test_environment_failures_of_lwm_train_are_one_line(long_shards, tmp_path):
    """A damaged shard, an output folder it may not write and a full disk end `lwm train` with one line naming
    the path, not a traceback."""
    import shutil

    source = Path(long_shards)
    run = next(p for p in source.parents if (p / "_SUCCESS").exists())
    damaged = tmp_path / "run"
    shutil.copytree(run, damaged)
    pool = damaged / source.relative_to(run)
    victim = sorted(pool.glob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:200])
    args = ["--micro-batch-tokens", "512", "--long-samples", "drop", *TINY]
    result = CliRunner().invoke(train_command, ["--shards", str(pool), *args])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.exception
    assert result.output.strip().splitlines()[-1].startswith(f"lwm: error: {victim}: not a readable Parquet shard")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = CliRunner().invoke(train_command, ["--shards", long_shards, "--out", str(blocker / "ckpt"), *args])
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.output.strip().splitlines()[-1].startswith("lwm: error: ") and str(blocker) in result.output


@pytest.mark.parametrize(("seed", "workers"), [(0, 0), (1, 0), (2, 0), (0, 2)])
def test_drop_trains_on_the_one_sample_that_fits_however_the_epochs_are_shuffled(tmp_path, seed, workers):
    """Five samples, one short enough for the row: reshuffled epochs put up to nine others between its turns."""
    pool = write_synthetic_shards(str(tmp_path), rows_per_file=(5,), row_group_rows=5, seed=0, max_turns=4)
    lengths = sorted(pq.read_table(f"{pool}/part-00000.parquet").column("num_tokens").to_pylist())
    assert lengths[0] < lengths[1]  # exactly one sample fits a row of lengths[0]
    result = CliRunner().invoke(train_command, ["--shards", pool, "--max-steps", "3", "--tiny-vocab", "64", "--tiny-dim",
                                                "32", "--micro-batch-tokens", str(lengths[0]), "--long-samples", "drop",
                                                "--seed", str(seed), "--shuffle-buffer", "8", "--num-workers",
                                                str(workers)])
    assert result.exit_code == 0, result.output
    assert f"long samples (over {lengths[0]} tokens): " in result.output
