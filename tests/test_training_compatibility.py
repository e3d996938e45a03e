"""Shards that do not fit the model are found before the first step: its context, its embedding, its tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
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


def _name_tokenizer(pool: str, tokenizer: dict) -> None:
    manifest_path = Path(pool).parent.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "tokenizer": tokenizer}))


def _qwen_vocabulary() -> dict:
    from stages.tokenizer.engines import load_tokenizer

    return load_tokenizer("qwen3.6").describe()


def test_a_token_id_past_the_embedding_is_refused_before_the_first_step(tmp_path):
    """The out-of-range id sits in the last file: the first step, in file order, would not meet it."""
    pool = write_synthetic_shards(str(tmp_path / "run"), rows_per_file=(12, 1), row_group_rows=4)
    last = Path(pool) / "part-00001.parquet"
    table = pq.read_table(last)
    shifted = pa.array([[i + 100 for i in ids] for ids in table.column("input_ids").to_pylist()], pa.list_(pa.int32()))
    pq.write_table(table.set_column(table.schema.get_field_index("input_ids"), "input_ids", shifted), last)
    model = _qwen(str(tmp_path / "model"), positions=4096)
    result = _train("--shards", pool, "--model", model, "--micro-batch-tokens", "64", "--no-shuffle",
                    "--max-steps", "1")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith(f"lwm: error: --model {model}: the shards hold token id ")
    assert "step 1" not in result.output


def _with_tokenizer(model: str, backend, folder: Path) -> str:
    """A copy of `model` in `folder` with `backend` as its tokenizer.json."""
    shutil.copytree(model, folder)
    backend.save(str(folder / "tokenizer.json"))
    return str(folder)


def _word_level():
    import tokenizers

    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "the": 1, "fox": 2}, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return backend


@pytest.fixture(scope="module")
def qwen_vocabulary_model(tmp_path_factory):
    """A model with an embedding row for every id of the built-in vocabulary (and no tokenizer.json yet)."""
    return _qwen(str(tmp_path_factory.mktemp("big") / "model"), positions=4096, vocab=248320)


def test_a_model_whose_tokenizer_encodes_otherwise_is_refused(qwen_vocabulary_model, tmp_path):
    pool = write_synthetic_shards(str(tmp_path / "run"), rows_per_file=(8,), row_group_rows=4)
    _name_tokenizer(pool, _qwen_vocabulary())
    model = _with_tokenizer(qwen_vocabulary_model, _word_level(), tmp_path / "words")
    result = _train("--shards", pool, "--model", model, "--micro-batch-tokens", "64")
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"lwm: error: --model {model}: its tokenizer.json encodes text differently from qwen3.6")


def test_the_same_vocabulary_under_another_engine_trains(qwen_vocabulary_model, tmp_path):
    """The model's tokenizer.json is the built-in vocabulary converted for `tokenizers`: another hash, same ids."""
    from stages.tokenizer.convert import convert_rank_vocabulary
    from stages.tokenizer.vocab import default_vocabulary

    pool = write_synthetic_shards(str(tmp_path / "run"), rows_per_file=(8,), row_group_rows=4)
    _name_tokenizer(pool, _qwen_vocabulary())
    model = _with_tokenizer(qwen_vocabulary_model, convert_rank_vocabulary(default_vocabulary()), tmp_path / "qwen")
    result = _train("--shards", pool, "--model", model, "--micro-batch-tokens", "64", "--max-steps", "1")
    assert result.exit_code == 0, result.output


def test_a_model_with_fewer_rows_than_the_shards_vocabulary_is_refused(tmp_path):
    pool = write_synthetic_shards(str(tmp_path / "run"), rows_per_file=(8,), row_group_rows=4)
    _name_tokenizer(pool, _qwen_vocabulary())
    model = _qwen(str(tmp_path / "model"), positions=4096)
    result = _train("--shards", pool, "--model", model, "--micro-batch-tokens", "64")
    assert result.exit_code == 2, result.output
    assert "whose ids go up to 248076, but the model's vocabulary has 96 entries" in result.output


def test_a_tokenizer_file_of_another_hash_is_refused_where_it_cannot_be_loaded(tmp_path):
    pool = write_synthetic_shards(str(tmp_path / "run"), rows_per_file=(8,), row_group_rows=4)
    _name_tokenizer(pool, {"engine": "tokenizers", "name": "/elsewhere/tokenizer.json", "vocab_hash": "ab" * 32})
    model = _with_tokenizer(_qwen(str(tmp_path / "model"), positions=4096), _word_level(), tmp_path / "words")
    result = _train("--shards", pool, "--model", model, "--micro-batch-tokens", "64")
    assert result.exit_code == 2, result.output
    assert "encodes text differently from /elsewhere/tokenizer.json" in result.output


def test_each_shard_footer_is_read_once_before_the_first_step(tmp_path, monkeypatch):
    """The dataset's row groups, the largest token id and the longest sample (no max_tokens in this manifest) all
    come from the same footers; each was read three times before."""
    import pyarrow.parquet.core as parquet_core

    from training.loop import TrainConfig, train

    pool = write_synthetic_shards(str(tmp_path / "run"), rows_per_file=(6, 6), manifest_max_tokens=False)
    model = _qwen(str(tmp_path / "model"), positions=4096)
    opened: list[str] = []

    class CountingParquetFile(pq.ParquetFile):
        def __init__(self, source, *args, **kwargs):
            opened.append(str(getattr(source, "path", source)))
            super().__init__(source, *args, **kwargs)

    class FirstStep(Exception):
        pass

    def no_loader(*args, **kwargs):
        raise FirstStep  # every check is done once the loader is built

    monkeypatch.setattr(pq, "ParquetFile", CountingParquetFile)
    monkeypatch.setattr(parquet_core, "ParquetFile", CountingParquetFile)
    monkeypatch.setattr("training.loop.DataLoader", no_loader)
    said: list[str] = []
    with pytest.raises(FirstStep):
        train(TrainConfig(shards=(pool,), max_steps=1, model=model, micro_batch_tokens=4096), echo=said.append)
    assert sorted(opened) == [f"{pool}/part-00000.parquet", f"{pool}/part-00001.parquet"]
    assert not any("longest sample is unknown" in line for line in said)  # the footers did name it


def test_a_column_without_statistics_leaves_the_other_columns_maximum(tmp_path):
    """One read per footer serves both checks; each still falls back on its own column's statistics only."""
    from training.compatibility import largest_token_id
    from training.long_samples import longest_sample
    from training.shards import FooterStatistics, resolve_shard_files

    pool = write_synthetic_shards(str(tmp_path / "run"), rows_per_file=(6,), manifest_max_tokens=False)
    [part] = resolve_shard_files([pool])
    table = pq.read_table(part)
    tokens = max(table.column("num_tokens").to_pylist())
    top = max(max(ids) for ids in table.column("input_ids").to_pylist())
    for kept, expected in (("num_tokens", (None, tokens)), ("input_ids.list.element", (top, None))):
        pq.write_table(table, part, write_statistics=[kept])
        statistics = FooterStatistics()
        found = largest_token_id([part], statistics), longest_sample([part], statistics=statistics)
        assert (found[0], found[1] and found[1].tokens) == expected


@pytest.fixture(scope="module")
def small_vocabulary_run(tmp_path_factory) -> tuple[Path, int]:
    """A pipeline run tokenized with a byte-level BPE of about 300 ids: its cpt pool, and that tokenizer's size."""
    from stages.tokenizer import load_tokenizer
    from tests.helpers import lwm_in_process, write_small_tokenizer

    base = tmp_path_factory.mktemp("small")
    trajs = [{"traj_id": f"t{i}", "domain": "terminal", "split_key": f"task-{i}",
              "system": {"task_description": f"read the notes of task {i}", "action_space": "keys"},
              "turns": [{"action": f'[{{"keystrokes": "cat notes-{i}-{j}.txt\\n"}}]',
                         "observation": f"line {j} of the notes of task {i}"} for j in range(3)]} for i in range(12)]
    (base / "in").mkdir()
    (base / "in" / "a.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trajs))
    tokenizer = write_small_tokenizer(base / "tokenizer.json", [json.dumps(t) for t in trajs], 300)
    proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "-i", str(base / "in"), "-o",
                          str(base / "out"), "--tokenizer", str(tokenizer))
    assert proc.returncode == 0, proc.stderr
    return base / "out" / "shards" / "cpt", load_tokenizer(str(tokenizer)).vocab_size


def test_the_tiny_model_embeds_the_vocabulary_of_the_shards_tokenizer(small_vocabulary_run, tmp_path):
    pool, size = small_vocabulary_run
    result = _train("--shards", str(pool), "--out", str(tmp_path / "ck"), "--max-steps", "1", "--tiny-dim", "16",
                    "--tiny-layers", "1", "--tiny-heads", "2", "--micro-batch-tokens", "256",
                    "--long-samples", "truncate-left")
    assert result.exit_code == 0, result.output
    from training.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(str(tmp_path / "ck"))
    assert checkpoint.trainer["config"]["tiny_vocab"] == size < 400
    assert tuple(checkpoint.model["embed.weight"].shape) == (size, 16)


def test_a_tiny_vocabulary_below_the_shards_tokenizer_is_refused_in_one_line(small_vocabulary_run):
    """The pipeline's shards hold no statistics of their ids: the tokenizer that wrote them bounds them."""
    pool, size = small_vocabulary_run
    manifest = json.loads((pool.parent.parent / "manifest.json").read_text())
    name, vocab = manifest["tokenizer"]["name"], manifest["tokenizer"]["vocab_hash"][:12]
    result = _train("--shards", str(pool), "--tiny-vocab", str(size - 1), "--micro-batch-tokens", "256",
                    "--long-samples", "truncate-left")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"lwm: error: --tiny-vocab {size - 1}: the shards of {pool.parent.parent} were tokenized with {name} "
        f"(vocabulary {vocab}), whose ids go up to {size - 1}; give --tiny-vocab {size} or more, or leave it out (the "
        "size of that tokenizer)"]


@pytest.mark.parametrize("statistics", [True, False])
def test_token_ids_past_a_tiny_vocabulary_are_refused_never_folded(tmp_path, statistics):
    """With the ids' Parquet statistics before the first step; without them (and no tokenizer named) at the step
    that meets such an id."""
    pool = write_synthetic_shards(str(tmp_path / "run"), rows_per_file=(8,), row_group_rows=4)
    [part] = Path(pool).glob("*.parquet")
    table = pq.read_table(part)
    pq.write_table(table, part, row_group_size=4, write_statistics=statistics)
    top = max(max(ids) for ids in table.column("input_ids").to_pylist())
    result = _train("--shards", pool, "--tiny-vocab", "32", "--tiny-dim", "16", "--tiny-layers", "1", "--tiny-heads",
                    "2", "--micro-batch-tokens", "64", "--no-shuffle", "--max-steps", "1")
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("lwm: error: --tiny-vocab 32: the shards hold token id "), result.output
    assert int(line.split("token id ")[1].split(",")[0]) >= 32 and top >= 32
    assert line.endswith("or more, or leave it out (the size of the shards' tokenizer)")
    assert ("step 1" in result.output) is False
