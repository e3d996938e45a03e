"""Sample rows written as column-built tables: the same Parquet bytes as the row-by-row conversion."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from masking.table import default_table
from pipeline.config import resolve
from pipeline.outputs import PARQUET_OPTIONS
from schemas.shard import RL_SCHEMA, SHARD_SCHEMA, schema_for
from schemas.stats import Stats
from schemas.text import escape_surrogates
from stages.sample_rows import build_rows, rows_table, sequential_sum
from stages.tokenizer import load_tokenizer
from stages.tokenizer.segments import segment_tokenizer
from tests.helpers import make_traj


@pytest.fixture(scope="module")
def seg():
    return segment_tokenizer(load_tokenizer())


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=256, **PARQUET_OPTIONS)
    return buf.getvalue()


def reference_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """What the row-by-row writer builds (`AtomicParquetWriter.flush`) from plain Python lists."""
    rows = [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in r.items()} for r in rows]
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except UnicodeEncodeError:
        return pa.Table.from_pylist([escape_surrogates(r) for r in rows], schema=schema)


def assert_same(rows: list[dict], schema: pa.Schema) -> None:
    built, ref = rows_table(rows, schema), reference_table(rows, schema)
    assert built.schema.equals(ref.schema, check_metadata=True)
    assert built.equals(ref)
    assert parquet_bytes(built) == parquet_bytes(ref)


def test_rows_of_every_pool_give_the_same_table(seg):
    cfg = resolve({"pools": {"sft_turns": "all", "ratios": {"cpt": 0.4, "sft": 0.3, "rl": 0.15, "eval": 0.15}}})
    by_pool: dict[str, list[dict]] = {}
    for i in range(40):
        traj = make_traj(2 + i % 5, seed=i)
        traj.split_key = f"k{i}"  # spread the trajectories over the pools
        for pool, row in build_rows(traj, cfg, seg, default_table(), Stats()):
            by_pool.setdefault(pool, []).append(row)
    assert set(by_pool) == {"cpt", "sft", "rl", "eval"}, sorted(by_pool)
    assert any(isinstance(r["input_ids"], np.ndarray) for r in by_pool["sft"])  # the array path is taken
    for pool, rows in by_pool.items():
        assert_same(rows, schema_for(pool))


@pytest.mark.parametrize("keep_mode", ["weight", "turn", "token"])
@pytest.mark.parametrize("chat_format", ["chatml", "plain"])
def test_row_counts_and_weighted_sums_equal_the_python_list_arithmetic(seg, keep_mode, chat_format):
    cfg = resolve({"pools": {"sft_turns": "all", "ratios": {"cpt": 0.5, "sft": 0.5, "rl": 0.0, "eval": 0.0}},
                   "masking": {"keep_mode": keep_mode}, "render": {"chat_format": chat_format}})
    seen = set()
    for i in range(16):
        traj = make_traj(2 + i % 4, seed=100 + i)
        traj.split_key = f"s{i}"
        stats = Stats()
        expected: dict[str, float] = {}
        for pool, row in build_rows(traj, cfg, seg, default_table(), stats):
            seen.add(pool)
            weights = row["loss_weight"].tolist()
            assert row["num_loss_tokens"] == len(weights) - weights.count(0.0)
            total = 0  # Python's own left-to-right sum, as the row-by-row code computed it
            for w in weights:
                total += w
            key = f"tokens.{pool}.weighted"
            expected[key] = expected.get(key, 0.0) + float(total)
        for key, value in expected.items():
            assert stats.get(key) == value, key
    assert seen == {"cpt", "sft"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 0.05, 0.1, 0.3, 1.0, 1e-17, 2.5e8]) | st.floats(-1e6, 1e6), max_size=50))
def test_sequential_sum_adds_left_to_right_like_python(values):
    total = 0
    for v in values:
        total += v
    array = np.array(values, dtype=np.float64)
    got = sequential_sum(array)
    assert got == float(total) and str(got) == str(float(total))  # -0.0 included
    assert str(sequential_sum(array[array != 0])) == str(float(total))  # zeros may be left out


def shard_row(ids: list[int], weights: list[float], text: str) -> dict:
    return {"sample_id": text, "traj_id": text, "domain": "terminal", "pool": "cpt", "template": "v1",
            "turn_idx": 0, "total_turns": 1, "input_ids": ids, "loss_weight": weights,
            "turn_spans": [{"start": 0, "end": len(ids)}], "turn_category": ["echo"], "turn_keep": [0.05],
            "turn_stats": [{"ol": 0.1, "nov": 1 / 3, "jac": 0.0, "r": 7.25}], "num_tokens": len(ids),
            "num_loss_tokens": sum(1 for w in weights if w)}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.floats(allow_nan=False, width=64)), max_size=40),
                min_size=1, max_size=6),
       st.text(max_size=8))
def test_any_ids_and_weights_round_like_the_row_conversion(samples, text):
    rows = [shard_row([i for i, _ in s], [w for _, w in s], text) for s in samples]
    assert_same(rows, SHARD_SCHEMA)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.floats(width=64)), max_size=40),
                min_size=1, max_size=6),
       st.text(max_size=8))
def test_array_ids_and_weights_round_like_the_row_conversion(samples, text):
    """Rows as `build_rows` gives them: int32 ids and float64 weights joined and cast to float32 in one call
    (NaN, infinities and values beyond float32's range included)."""
    rows = [shard_row([i for i, _ in s], [w for _, w in s], text) for s in samples]
    for row in rows:
        row["input_ids"] = np.array(row["input_ids"], dtype=np.int32)
        row["loss_weight"] = np.array(row["loss_weight"], dtype=np.float64)
    built, ref = rows_table(rows, SHARD_SCHEMA), reference_table(rows, SHARD_SCHEMA)
    assert built.schema.equals(ref.schema, check_metadata=True)
    assert parquet_bytes(built) == parquet_bytes(ref)  # NaN included, which `Table.equals` never finds equal
    if not any(np.isnan(r["loss_weight"]).any() for r in rows):
        assert built.equals(ref)


def test_lone_surrogates_are_escaped_like_the_row_writer():
    rows = [shard_row([1, 2], [0.0, 1.0], "id\ud800"), shard_row([], [], "plain")]
    assert_same(rows, SHARD_SCHEMA)
    rl = {"sample_id": "s", "traj_id": "t", "domain": "mcp", "pool": "rl", "template": "v1", "turn_idx": 1,
          "total_turns": 2, "prompt_ids": [5, 6, 7], "reference": "out \udcff",
          "messages": [{"role": "user", "content": "x\ud83d"}], "turn_category": ["action"], "turn_keep": [1.0],
          "turn_stats": [{"ol": 0.0, "nov": 1.0, "jac": 0.0, "r": 2.0}], "num_tokens": 3, "verifier": "none"}
    assert_same([rl], RL_SCHEMA)
    assert rows_table([rl], RL_SCHEMA).column("reference")[0].as_py() == "out \\udcff"


def test_recurring_texts_are_tokenized_once_with_the_same_ids(seg):
    s = segment_tokenizer(seg.tok)
    text = "system\nYou simulate a shell. " * 20
    first = s.encode_recurring(text)
    chars = s.counter.chars
    again = s.encode_recurring(text)
    assert first == again == seg.tok.encode(text)
    assert s.counter.chars == chars  # the second call did not reach the tokenizer
    again.append(-1)  # callers get their own copy
    assert s.encode_recurring(text) == first
    for i in range(200):  # the remembered texts stay bounded
        s.encode_recurring(f"system\nprompt {i}")
    assert len(s._texts) <= 64
