"""Parquet writing and the shard sort: same decoded rows as pyarrow's own paths, smaller and faster files."""

from __future__ import annotations

import errno
import hashlib
import io
import itertools
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline.outputs import (
    AtomicIpcWriter,
    AtomicParquetWriter,
    dictionary_columns,
    out_fs,
    read_ipc,
    statistics_columns,
)
from pipeline.shard_task import run_shard_task, sort_table, sort_tables, take_rows
from schemas.shard import RL_SCHEMA, SHARD_SCHEMA
from schemas.trajectory import TRAJECTORY_SCHEMA


def _shard_rows(n: int, seed: int, history: int = 3000) -> list[dict]:
    """Rows shaped like all-turn SFT samples: each one repeats a shared history, then adds its own turn."""
    rng = random.Random(seed)
    base = [rng.randrange(150_000) for _ in range(history)]
    rows = []
    for i in range(n):
        turn = [rng.randrange(150_000) for _ in range(rng.randrange(0, 60))]
        ids = base[: rng.randrange(history)] + turn
        weights = [0.0] * (len(ids) - len(turn)) + [1.0] * len(turn)
        rows.append({
            "sample_id": f"{rng.getrandbits(64):016x}", "traj_id": f"t{i % 7}", "domain": "mcp", "pool": "sft",
            "template": "chatml", "turn_idx": i % 5, "total_turns": 5, "input_ids": ids,
            "loss_weight": weights,
            "turn_spans": [{"start": 0, "end": len(ids)}], "turn_category": [rng.choice(("tool", "text"))],
            "turn_keep": [1.0], "turn_stats": [{"ol": 0.5, "nov": 0.1, "jac": 0.2, "r": 1.0}],
            "num_tokens": len(ids), "num_loss_tokens": len(turn),
        })
    return rows


def _rl_rows(n: int, seed: int, longest: int = 400) -> list[dict]:
    """Rows shaped like rl samples: a prompt of up to `longest` ids, a reference and its messages."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(9000) for _ in range(rng.randrange(longest))] for _ in range(n)]
    return [{"sample_id": f"{rng.getrandbits(40):010x}", "traj_id": f"t{i}", "pool": "rl",
             "prompt_ids": prompt, "reference": "r" * (i % 50),
             "messages": [{"role": "user", "content": "m" * rng.randrange(300)}], "turn_keep": [0.5],
             "num_tokens": len(prompt)} for i, prompt in enumerate(prompts)]


def _encodings(path) -> dict[str, tuple]:
    meta = pq.ParquetFile(path).metadata.row_group(0)
    return {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}


def test_dictionary_columns_are_the_string_leaves():
    assert dictionary_columns(SHARD_SCHEMA) == ["sample_id", "traj_id", "domain", "pool", "template",
                                                "turn_category.list.element"]
    rl = dictionary_columns(RL_SCHEMA)
    assert "messages.list.element.role" in rl and "messages.list.element.content" in rl
    assert "prompt_ids.list.element" not in rl and "turn_keep.list.element" not in rl
    assert "turns.list.element.observation" in dictionary_columns(TRAJECTORY_SCHEMA)
    schema = pa.schema([("m", pa.map_(pa.string(), pa.int64())), ("d", pa.dictionary(pa.int32(), pa.string())),
                        ("n", pa.large_list(pa.float64()))])
    assert dictionary_columns(schema) == ["m.key_value.key", "d"]


def test_shard_files_keep_dictionaries_off_numbers_and_read_back_equal(tmp_path):
    rows = _shard_rows(600, seed=3)
    table = pa.Table.from_pylist(rows, schema=SHARD_SCHEMA)
    fs, root = out_fs(str(tmp_path))
    with AtomicParquetWriter(fs, f"{root}/s.parquet", SHARD_SCHEMA, rows_per_group=512) as w:
        w.write_table(table)
    enc = _encodings(tmp_path / "s.parquet")
    assert "RLE_DICTIONARY" in enc["sample_id"] and "RLE_DICTIONARY" in enc["turn_category.list.element"]
    for col in ("input_ids.list.element", "loss_weight.list.element", "turn_spans.list.element.start", "num_tokens"):
        assert "RLE_DICTIONARY" not in enc[col], col
    back = pq.read_table(tmp_path / "s.parquet")
    assert back.schema.equals(SHARD_SCHEMA) and back.equals(table)
    # smaller than pyarrow's defaults (a dictionary on every column, 1 MiB pages) on such rows
    default = io.BytesIO()
    pq.write_table(table, default, row_group_size=512, compression="zstd", compression_level=3)
    assert (tmp_path / "s.parquet").stat().st_size < len(default.getvalue())


def test_statistics_only_on_top_level_columns_that_are_not_nested(tmp_path):
    assert statistics_columns(SHARD_SCHEMA) == ["sample_id", "traj_id", "domain", "pool", "template", "turn_idx",
                                                "total_turns", "num_tokens", "num_loss_tokens"]
    assert statistics_columns(TRAJECTORY_SCHEMA) == ["traj_id", "domain", "split_key", "meta"]
    rows = _shard_rows(600, seed=4)
    fs, root = out_fs(str(tmp_path))
    with AtomicParquetWriter(fs, f"{root}/s.parquet", SHARD_SCHEMA, rows_per_group=512) as w:
        w.write_table(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA))
    meta = pq.ParquetFile(tmp_path / "s.parquet").metadata
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        stats = {group.column(i).path_in_schema: group.column(i).statistics for i in range(group.num_columns)}
        first, last = 512 * g, min(512 * g + 512, len(rows))
        # the trainer reads the longest sample from these (`training.long_samples`)
        assert stats["num_tokens"].max == max(r["num_tokens"] for r in rows[first:last])
        assert stats["sample_id"].min == min(r["sample_id"] for r in rows[first:last])
        for leaf in ("input_ids.list.element", "loss_weight.list.element", "turn_stats.list.element.ol"):
            assert stats[leaf] is None or not stats[leaf].has_min_max, leaf


def _chunked(rows: list[dict], schema: pa.Schema, cuts: list[int]) -> pa.Table:
    full = pa.Table.from_pylist(rows, schema=schema)
    pieces, start = [], 0
    for cut in [*cuts, len(rows)]:
        pieces.append(full.slice(start, cut - start))  # slices: list offsets that do not start at 0
        start = cut
    return pa.concat_tables(pieces)


@pytest.mark.parametrize("seed", range(4))
def test_sort_table_equals_sort_by(seed):
    rng = random.Random(seed)
    rows = _shard_rows(rng.randrange(1, 120), seed=seed)
    for r in rows[:: max(1, len(rows) // 5)]:
        r["input_ids"], r["loss_weight"] = [], []  # empty lists among the rows
    rows[-1]["sample_id"] = rows[0]["sample_id"]  # a tie keeps input order like sort_by
    cuts = sorted(rng.sample(range(len(rows)), min(3, len(rows) - 1))) if len(rows) > 1 else []
    table = _chunked(rows, SHARD_SCHEMA, [c for c in cuts if c > 0])
    got, want = sort_table(table, "sample_id"), table.sort_by([("sample_id", "ascending")])
    assert got.schema.equals(SHARD_SCHEMA)
    assert got.equals(want)
    assert got.column("sample_id").to_pylist() == sorted(r["sample_id"] for r in rows)


def test_sort_tables_consumes_its_parts_and_equals_their_sorted_concatenation():
    rows = _shard_rows(90, seed=3)
    full = pa.Table.from_pylist(rows, schema=SHARD_SCHEMA)
    parts = [full.slice(0, 40), full.slice(40, 0), full.slice(40, 50)]  # an empty part among them
    want = pa.concat_tables(parts).sort_by([("sample_id", "ascending")])
    got = sort_tables(parts, "sample_id")
    assert parts == []  # handed over: the caller keeps no reference to the unsorted rows
    assert got.equals(want) and all(c.num_chunks == 1 for c in got.columns)
    empty = [SHARD_SCHEMA.empty_table(), SHARD_SCHEMA.empty_table()]
    assert sort_tables(empty, "sample_id").num_rows == 0 and empty == []


@pytest.mark.parametrize("seed", range(3))
def test_take_rows_equals_arrows_take_for_any_selection(seed):
    """The spill step's gather (rows grouped by slice) against Arrow's own take: repeats, any order, none."""
    rng = random.Random(seed)
    rows = _shard_rows(rng.randrange(20, 80), seed=seed + 20)
    rows[3]["input_ids"], rows[3]["loss_weight"] = [], []
    table = _chunked(rows, SHARD_SCHEMA, [7, 15])
    for picked in ([rng.randrange(len(rows)) for _ in range(rng.randrange(1, 2 * len(rows)))], []):
        got = take_rows(list(table.columns), table.schema, np.array(picked, dtype=np.int64))
        assert got.equals(table.take(pa.array(picked, type=pa.int64()))), picked
        assert got.num_rows == len(picked)


def test_take_rows_gathers_out_of_any_chunks_as_arrows_take_of_their_concatenation():
    """Rows gathered out of the chunks themselves: a chunk cut out of another (offsets that do not start at 0),
    an empty chunk, a chunk whose lists are all empty, a chunk of one row."""
    rows = _shard_rows(40, seed=31)
    for r in rows[20:30]:
        r["input_ids"], r["loss_weight"] = [], []
    full = pa.Table.from_pylist(rows, schema=SHARD_SCHEMA)
    pieces = [full.slice(3, 17), full.slice(0, 0), full.slice(20, 10), full.slice(39, 1), full.slice(30, 9), full.slice(0, 3)]
    table = pa.concat_tables(pieces)
    assert table.column("input_ids").num_chunks == len(pieces)
    rng = random.Random(5)
    picked = [rng.randrange(table.num_rows) for _ in range(60)]
    got = take_rows(list(table.columns), table.schema, np.array(picked, dtype=np.int64))
    assert got.equals(table.take(pa.array(picked, type=pa.int64())))
    assert all(c.num_chunks == 1 for c in got.columns)
    only_empty = pa.concat_tables([full.slice(20, 4), full.slice(24, 6)])
    got = take_rows(list(only_empty.columns), only_empty.schema, np.array([5, 0, 9], dtype=np.int64))
    assert got.equals(only_empty.take(pa.array([5, 0, 9])))


def test_sort_table_with_null_lists_and_the_rl_schema():
    rows = _shard_rows(30, seed=9)
    rows[4]["input_ids"] = None
    rows[7]["loss_weight"] = [1.0, None]
    rows[7]["input_ids"] = [1, 2]
    table = _chunked(rows, SHARD_SCHEMA, [10, 20])
    assert sort_table(table, "sample_id").equals(table.sort_by([("sample_id", "ascending")]))
    rl = pa.Table.from_pylist([{"sample_id": f"{i * 7919 % 31:04d}", "prompt_ids": list(range(i)),
                                "messages": [{"role": "user", "content": str(i)}], "turn_keep": [0.5]}
                               for i in range(31)], schema=RL_SCHEMA)
    rl = pa.concat_tables([rl.slice(0, 11), rl.slice(11)])
    assert sort_table(rl, "sample_id").equals(rl.sort_by([("sample_id", "ascending")]))


def test_ipc_parts_read_back_equal_and_an_aborted_one_leaves_nothing(tmp_path):
    table = pa.Table.from_pylist(_shard_rows(300, seed=5), schema=SHARD_SCHEMA)
    fs, root = out_fs(str(tmp_path))
    w = AtomicIpcWriter(fs, f"{root}/a/part.arrow", SHARD_SCHEMA, rows_per_batch=128)
    w.write_table(table.slice(0, 100))
    w.write_table(table.slice(100))
    assert not (tmp_path / "a" / "part.arrow").exists()  # only the temporary file until close
    w.close()
    back = read_ipc(fs, f"{root}/a/part.arrow", SHARD_SCHEMA)
    assert back.equals(table) and [b.num_rows for b in back.to_batches()] == [100, 128, 72]
    with pytest.raises(ValueError, match="is not the expected"):
        read_ipc(fs, f"{root}/a/part.arrow", RL_SCHEMA)
    empty = AtomicIpcWriter(fs, f"{root}/a/empty.arrow", SHARD_SCHEMA)
    empty.close()
    assert read_ipc(fs, f"{root}/a/empty.arrow", SHARD_SCHEMA).num_rows == 0
    aborted = AtomicIpcWriter(fs, f"{root}/a/aborted.arrow", SHARD_SCHEMA)
    aborted.write_table(table)
    aborted.abort()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["empty.arrow", "part.arrow"]


def test_shard_task_gathers_arrow_parts_and_parquet_parts_of_earlier_versions(tmp_path):
    """An rl bucket resumed across the upgrade finds Parquet sample parts next to Arrow ones: both count."""
    rows = _rl_rows(90, seed=9)
    fs, root = out_fs(str(tmp_path))
    bucket = f"{root}/_work/samples/rl/b00000"
    with AtomicParquetWriter(fs, f"{bucket}/old.parquet", RL_SCHEMA) as w:
        w.write_table(pa.Table.from_pylist(rows[:40], schema=RL_SCHEMA))
    new = AtomicIpcWriter(fs, f"{bucket}/new.arrow", RL_SCHEMA)
    new.write_table(pa.Table.from_pylist(rows[40:], schema=RL_SCHEMA))
    new.close()
    result = run_shard_task({"task_id": "rl-0", "out": str(tmp_path), "pool": "rl", "bucket": 0, "spec_hash": "x"})
    assert result["rows"] == 90
    shard = pq.read_table(tmp_path / "shards" / "rl" / "part-00000.parquet")
    expected = pa.Table.from_pylist(sorted(rows, key=lambda r: r["sample_id"]), schema=RL_SCHEMA)
    assert shard.equals(expected)


def test_an_ipc_part_that_fails_to_close_is_aborted_without_hiding_the_error(tmp_path):
    """A full disk met while closing: the abort that follows must not raise a second error of its own
    (the file the failed close already shut) in place of the first, and must leave no file behind."""
    fs, root = out_fs(str(tmp_path))
    w = AtomicIpcWriter(fs, f"{root}/p.arrow", SHARD_SCHEMA)
    w.write_table(pa.Table.from_pylist(_shard_rows(20, seed=2), schema=SHARD_SCHEMA))
    real_write = w._file.write

    def full(data):
        real_write(data)
        w._file.close()
        raise OSError(errno.ENOSPC, "No space left on device")

    w._file.write = full
    with pytest.raises(OSError) as caught:
        try:
            w.close()
        except BaseException:
            w.abort()
            raise
    assert caught.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def _bucket_of_parts(tmp_path, pool: str, schema: pa.Schema, rows: list[dict], cuts: list[int]) -> None:
    """Write `rows` as sample parts of bucket 0 of `pool`: Arrow parts cut at `cuts`, the first one Parquet
    (a part of an earlier version)."""
    fs, root = out_fs(str(tmp_path))
    bucket = f"{root}/_work/samples/{pool}/b00000"
    bounds = [0, *cuts, len(rows)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        table = pa.Table.from_pylist(rows[a:b], schema=schema)
        if i == 0:
            with AtomicParquetWriter(fs, f"{bucket}/p{i:02d}.parquet", schema) as w:
                w.write_table(table)
        else:
            with AtomicIpcWriter(fs, f"{bucket}/p{i:02d}.arrow", schema, rows_per_batch=100) as w:
                w.write_table(table)


def test_a_bucket_over_sort_bytes_is_written_in_slices_into_the_same_file(tmp_path, monkeypatch):
    """An rl shard task sorts at most `sort_bytes` of rows at a time (plus one row group): a full bucket does not
    set a worker's peak memory. The file is byte for byte the one a whole-bucket sort writes, with ties,
    a row count that is not a multiple of the row group size and a Parquet part among the parts. (A weighted
    pool's bucket holds no tokens in its rows: `tests/test_shard_pieces.py`.)"""
    import pipeline.shard_task as shard_task

    pool, rows, schema = "rl", _rl_rows(1700, seed=4), RL_SCHEMA
    rows[900]["sample_id"] = rows[5]["sample_id"]  # a tie, in two parts: part order decides, as in one sort
    _bucket_of_parts(tmp_path / "whole", pool, schema, rows, [300, 301, 1000])
    _bucket_of_parts(tmp_path / "sliced", pool, schema, rows, [300, 301, 1000])
    task = {"task_id": f"{pool}-0", "pool": pool, "bucket": 0, "spec_hash": "x"}
    whole = run_shard_task({**task, "out": str(tmp_path / "whole")})

    sorted_bytes = []
    real_sort = shard_task.sort_tables

    def recording_sort(tables, key):
        sorted_bytes.append(sum(t.nbytes for t in tables))
        return real_sort(tables, key)

    monkeypatch.setattr(shard_task, "sort_tables", recording_sort)
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(shard_task.tempfile, "tempdir", str(spill))
    monkeypatch.setattr(shard_task, "_ROUTE_BYTES", 150_000)  # parts are routed to the slices in several groups
    limit = 250_000
    sliced = run_shard_task({**task, "out": str(tmp_path / "sliced"), "sort_bytes": limit})
    assert list(spill.iterdir()) == []  # the slices' local files are gone
    name = f"shards/{pool}/part-00000.parquet"
    assert (tmp_path / "sliced" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert sliced["shard"] | {"path": None} == whole["shard"] | {"path": None} and sliced["rows"] == 1700
    group = max(sum(t.nbytes for t in [pa.Table.from_pylist(rows[i:i + 512], schema=schema)])
                for i in range(0, 1700, 512))
    assert len(sorted_bytes) > 3 and max(sorted_bytes) <= limit + group, sorted_bytes
    back = pq.ParquetFile(tmp_path / "sliced" / name)
    assert [back.metadata.row_group(i).num_rows for i in range(back.num_row_groups)] == [512, 512, 512, 164]
    assert back.read().column("sample_id").to_pylist() == sorted(r["sample_id"] for r in rows)


def test_an_empty_bucket_and_one_under_sort_bytes_are_sorted_whole(tmp_path, monkeypatch):
    import pipeline.shard_task as shard_task

    calls = []
    real_sort = shard_task.sort_tables
    monkeypatch.setattr(shard_task, "sort_tables", lambda tables, key: calls.append(len(tables)) or real_sort(tables, key))
    rows = _rl_rows(200, seed=12, longest=50)
    _bucket_of_parts(tmp_path, "rl", RL_SCHEMA, rows, [70, 150])
    result = run_shard_task({"task_id": "s", "out": str(tmp_path), "pool": "rl", "bucket": 0, "spec_hash": "x"})
    assert calls == [1] and result["rows"] == 200
    assert result["shard"]["max_tokens"] == max(r["num_tokens"] for r in rows)
    empty = run_shard_task({"task_id": "e", "out": str(tmp_path), "pool": "eval", "bucket": 3, "spec_hash": "x"})
    assert empty["rows"] == 0 and empty["shard"]["max_tokens"] == 0
    assert pq.read_table(tmp_path / "shards" / "eval" / "part-00003.parquet").num_rows == 0


def test_a_shards_digest_is_of_its_bytes_hashed_as_they_were_written(tmp_path, monkeypatch):
    """The manifest's sha256 of a shard is that of the file's bytes, and the shard task does not read the file
    back to hash it (on object storage, a second transfer of the whole shard)."""
    from fsspec.implementations.local import LocalFileSystem

    rows = _rl_rows(300, seed=5, longest=50)
    _bucket_of_parts(tmp_path, "rl", RL_SCHEMA, rows, [100, 220])
    opened = []
    real_open = LocalFileSystem._open

    def recording_open(self, path, mode="rb", **kwargs):
        opened.append((str(path), mode))
        return real_open(self, path, mode, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "_open", recording_open)
    result = run_shard_task({"task_id": "s", "out": str(tmp_path), "pool": "rl", "bucket": 0, "spec_hash": "x"})
    shard = tmp_path / "shards" / "rl" / "part-00000.parquet"
    assert result["shard"]["sha256"] == hashlib.sha256(shard.read_bytes()).hexdigest()
    assert result["shard"]["bytes"] == shard.stat().st_size
    assert [p for p, mode in opened if "/shards/" in p and "r" in mode] == []
    assert pq.read_table(shard).column("sample_id").to_pylist() == sorted(r["sample_id"] for r in rows)
    fs, root = out_fs(str(tmp_path))
    with AtomicParquetWriter(fs, f"{root}/plain.parquet", SHARD_SCHEMA) as plain:
        plain.write_table(pa.Table.from_pylist(rows[:3], schema=SHARD_SCHEMA))
    with pytest.raises(ValueError, match="without digest"):
        plain.sha256()


@pytest.mark.parametrize("pool", ["sft", "rl"])
def test_a_row_size_is_the_same_without_its_token_lists(tmp_path, pool):
    """The first read of a bucket too large to sort whole skips the token lists (nearly all of its bytes): the
    row sizes that cut it into slices come out the same, to the last bit, and for an Arrow part the same as
    from the lists' own values (4 bytes a token)."""
    from pipeline.shard_task import _part_batches, _row_bytes, token_lists
    from schemas.shard import schema_for

    schema = schema_for(pool)
    rng = random.Random(8)
    if pool == "rl":
        rows = [{"sample_id": f"{i:08x}", "prompt_ids": [rng.randrange(9000) for _ in range(n)], "pool": "rl",
                 "messages": [{"role": "user", "content": "m" * rng.randrange(90)}], "turn_keep": [0.25] * (i % 3),
                 "num_tokens": n} for i, n in enumerate([0, 1, 7, 300, 0, 52] * 20)]
    else:
        rows = _shard_rows(120, seed=13, history=200)
        rows[3]["input_ids"], rows[3]["loss_weight"], rows[3]["num_tokens"] = [], [], 0
    assert token_lists(schema) == (("prompt_ids",) if pool == "rl" else ("input_ids", "loss_weight"))
    _bucket_of_parts(tmp_path, pool, schema, rows, [50])  # a Parquet part, then an Arrow one
    fs, root = out_fs(str(tmp_path))
    for path in sorted(fs.find(f"{root}/_work/samples/{pool}/b00000")):
        full = list(_part_batches(fs, path, schema))
        lean = list(_part_batches(fs, path, schema, token_lists(schema)))
        assert [b.num_rows for b in lean] == [b.num_rows for b in full]
        for a, b in zip(full, lean):
            assert not set(token_lists(schema)) & set(b.schema.names)
            assert b.column("sample_id").equals(a.column("sample_id"))
            assert _row_bytes(b, schema).tolist() == _row_bytes(a, schema).tolist()
            if path.endswith(".arrow"):
                tokens = a.column("num_tokens").to_numpy()
                for name in token_lists(schema):
                    lengths = pc.list_value_length(a.column(name)).to_numpy()
                    assert lengths.tolist() == tokens.tolist()
                    assert a.column(name).values.nbytes == 4 * lengths.sum()


def test_the_first_read_decodes_token_lists_only_while_the_bucket_may_be_sorted_whole(tmp_path, monkeypatch):
    import pipeline.shard_task as shard_task

    rows = _rl_rows(600, seed=14)
    _bucket_of_parts(tmp_path, "rl", RL_SCHEMA, rows, [100, 200, 300, 400, 500])
    reads = []
    real = shard_task._part_batches

    def recording(fs, path, schema, skip=()):
        reads.append((path.rsplit("/", 1)[1], skip))
        return real(fs, path, schema, skip)

    monkeypatch.setattr(shard_task, "_part_batches", recording)
    one = sum(pa.Table.from_pylist(rows[i:i + 100], schema=RL_SCHEMA).nbytes for i in (0, 100))
    result = run_shard_task({"task_id": "s", "out": str(tmp_path), "pool": "rl", "bucket": 0, "spec_hash": "x",
                             "sort_bytes": one})
    first = reads[:6]
    assert [name for name, _ in first] == ["p00.parquet", *[f"p{i:02d}.arrow" for i in range(1, 6)]]
    lean = [skip for _, skip in first]
    assert lean[:2] == [(), ()] and lean[3:] == [("prompt_ids",)] * 3, lean
    assert all(skip == () for _, skip in reads[6:])  # the spill reads every part whole
    shard = pq.read_table(tmp_path / "shards" / "rl" / "part-00000.parquet")
    assert result["rows"] == 600 and shard.column("sample_id").to_pylist() == sorted(r["sample_id"] for r in rows)
