"""Weighted shards joined from trajectory pieces: the rows `build_rows` gives whole, in their trajectory's bucket."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pipeline.shard_pieces as shard_pieces
import pipeline.shard_task as shard_task
from masking.table import default_table
from pipeline.config import resolve
from pipeline.outputs import out_fs, read_ipc
from pipeline.sample_task import PIECES_SCHEMA, SampleWriter, part_schema
from pipeline.shard_task import run_shard_task
from schemas.shard import schema_for
from schemas.stats import Stats
from stages.pieces import Piece
from stages.sample_rows import build_rows, rows_table, trajectory_bucket
from stages.tokenizer import load_tokenizer
from stages.tokenizer.segments import segment_tokenizer
from tests.helpers import make_traj

BUCKETS = {"cpt": 2, "sft": 3, "rl": 2, "eval": 2}


@pytest.fixture(scope="module")
def seg():
    return segment_tokenizer(load_tokenizer())


def _sample_parts(out, seg, chat_format: str = "chatml", keep_mode: str = "weight") -> dict[str, list[dict]]:
    """Two sample tasks' parts of 36 trajectories of every pool (all-turn SFT) under `out`; the rows `build_rows`
    gives for them whole, by pool."""
    cfg = resolve({"pools": {"sft_turns": "all", "ratios": {"cpt": 0.3, "sft": 0.4, "rl": 0.1, "eval": 0.2}},
                   "render": {"chat_format": chat_format}, "masking": {"keep_mode": keep_mode}})
    fs, root = out_fs(str(out))
    expected: dict[str, list[dict]] = {}
    writers = [SampleWriter(fs, root, f"task{k}", BUCKETS) for k in range(2)]
    for i in range(36):
        traj = make_traj(1 + i % 7, seed=300 + i)
        traj.split_key = f"p{i}"
        for pool, row in build_rows(traj, cfg, seg, default_table(), Stats()):
            expected.setdefault(pool, []).append(row)
        writers[i % 2].write(traj.traj_id, list(build_rows(traj, cfg, seg, default_table(), Stats(), joined=False)))
    for w in writers:
        w.close()
    assert set(expected) == {"cpt", "sft", "rl", "eval"}, sorted(expected)
    return expected


def _shards(out, **extra) -> dict[str, pa.Table]:
    tables = {}
    for pool, n in BUCKETS.items():
        for b in range(n):
            run_shard_task({"task_id": f"{pool}-{b}", "out": str(out), "pool": pool, "bucket": b, "spec_hash": "x",
                            **extra})
            tables[f"{pool}/{b}"] = pq.read_table(out / "shards" / pool / f"part-{b:05d}.parquet")
    return tables


def _plain(rows: list[dict], schema: pa.Schema) -> pa.Table:
    rows = [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in r.items()} for r in rows]
    return pa.Table.from_pylist(sorted(rows, key=lambda r: r["sample_id"]), schema=schema)


@pytest.mark.parametrize(("chat_format", "keep_mode"), [("chatml", "weight"), ("chatml", "token"), ("plain", "turn")])
def test_shards_joined_from_pieces_hold_the_whole_rows_in_their_trajectorys_bucket(tmp_path, seg, chat_format,
                                                                                    keep_mode):
    expected = _sample_parts(tmp_path, seg, chat_format, keep_mode)
    shards = _shards(tmp_path)
    for pool, rows in expected.items():
        got = pa.concat_tables([shards[f"{pool}/{b}"] for b in range(BUCKETS[pool])])
        assert got.num_rows == len(rows)
        assert got.sort_by("sample_id").equals(_plain(rows, schema_for(pool))), pool
        for b in range(BUCKETS[pool]):
            shard = shards[f"{pool}/{b}"]
            ids = shard.column("sample_id").to_pylist()
            assert ids == sorted(ids)
            if pool != "rl":  # every sample of a trajectory is in its trajectory's bucket
                assert {trajectory_bucket(t, BUCKETS[pool]) for t in shard.column("traj_id").to_pylist()} <= {b}
    assert sum(len(set(shards[f"sft/{b}"].column("traj_id").to_pylist())) > 0 for b in range(3)) >= 2


def test_a_turn_sample_is_three_ranges_of_its_trajectorys_pieces_whatever_its_history(tmp_path, seg):
    """System prompt, history, target: the pieces are laid out so the history turns are one run."""
    expected = _sample_parts(tmp_path, seg)
    fs, root = out_fs(str(tmp_path))
    seen = 0
    pieces_tokens = 0
    for b in range(BUCKETS["sft"]):
        for k in range(2):
            path = f"{root}/_work/samples/sft/b{b:05d}/task{k}.arrow"
            if fs.exists(path):
                rows = read_ipc(fs, path, part_schema("sft"))
                for ranges, turn in zip(rows.column("ranges").to_pylist(), rows.column("turn_idx").to_pylist()):
                    assert len(ranges) == (2 if turn == 1 else 6), (turn, ranges)
                    seen += 1
                pieces_tokens += pa.compute.sum(pa.compute.list_value_length(
                    read_ipc(fs, path.replace(".arrow", ".pieces.arrow"), PIECES_SCHEMA).column("input_ids"))).as_py()
    assert seen == len(expected["sft"])
    assert pieces_tokens < sum(r["num_tokens"] for r in expected["sft"])  # each piece once, not once per sample


def test_pieces_beyond_their_bound_are_read_from_a_local_file_into_the_same_shard(tmp_path, seg, monkeypatch):
    _sample_parts(tmp_path / "held", seg)
    shutil.copytree(tmp_path / "held", tmp_path / "mapped")
    held = _shards(tmp_path / "held")
    spilled = []
    real = shard_pieces.Pieces._spill

    def recording(self):
        spilled.append(True)
        return real(self)

    monkeypatch.setattr(shard_pieces.Pieces, "_spill", recording)
    local = tmp_path / "tmp"
    local.mkdir()
    monkeypatch.setattr(shard_pieces.tempfile, "tempdir", str(local))
    _shards(tmp_path / "mapped", pieces_bytes=20_000)
    assert len(spilled) == sum(BUCKETS[p] for p in ("cpt", "sft", "eval"))  # every weighted bucket went to a file
    assert list(local.iterdir()) == []  # and the files are gone
    for name in held:
        pool, b = name.split("/")
        rel = f"shards/{pool}/part-{int(b):05d}.parquet"
        assert (tmp_path / "mapped" / rel).read_bytes() == (tmp_path / "held" / rel).read_bytes(), rel


def test_a_sample_whose_pieces_are_missing_fails_its_shard_with_its_trajectory_named(tmp_path, seg):
    _sample_parts(tmp_path, seg)
    (tmp_path / "_work" / "samples" / "sft" / "b00001" / "task1.pieces.arrow").unlink()
    with pytest.raises(ValueError, match="no pieces of trajectory"):
        run_shard_task({"task_id": "sft-1", "out": str(tmp_path), "pool": "sft", "bucket": 1, "spec_hash": "x"})


def test_a_sample_task_holds_a_bounded_amount_of_rows_whatever_the_number_of_buckets(tmp_path, monkeypatch):
    """Rows and pieces wait per file for a batch of 256, but never more than `_PENDING_BYTES` for all files together
    (a larger run has more buckets): the fullest file is written out first. Every row reaches its bucket."""
    import pipeline.sample_task as sample_task

    monkeypatch.setattr(sample_task, "_PENDING_BYTES", 200_000)
    fs, root = out_fs(str(tmp_path))
    buckets = {"sft": 9, "cpt": 1}
    writer = SampleWriter(fs, root, "task0", buckets)
    rng = np.random.default_rng(21)
    held, joined = [], {}
    for i in range(200):
        pool = "cpt" if i % 10 == 0 else "sft"
        shared = Piece(rng.integers(0, 9000, 300, dtype=np.int32), np.zeros(300), history=True)
        rows = []
        for t in range(1, 4):
            own = Piece(rng.integers(0, 9000, 40 * t, dtype=np.int32), np.full(40 * t, 0.5))
            sid = f"{i:04d}{t:02d}" + "0" * 18
            rows.append((pool, {"sample_id": sid, "traj_id": f"t{i}", "domain": "mcp", "pool": pool,
                                "template": "chatml", "turn_idx": t, "total_turns": 3, "pieces": [shared, own],
                                "turn_spans": [{"start": 300, "end": 300 + 40 * t}], "turn_category": ["tool"],
                                "turn_keep": [1.0], "turn_stats": [{"ol": 0.5, "nov": 0.1, "jac": 0.2, "r": 1.0}],
                                "num_tokens": 300 + 40 * t, "num_loss_tokens": 40 * t}))
            joined[(pool, sid)] = np.concatenate([shared.ids, own.ids]).tolist()
        writer.write(f"t{i}", rows)
        held.append(writer.held)
        assert writer.held == sum(writer.pending_bytes.values())
    assert max(held) <= 200_000 and max(held) > 100_000  # bounded, and the bound was reached
    writer.close()
    back = {}
    for pool, n in buckets.items():
        for b in range(n):
            path = f"{root}/_work/samples/{pool}/b{b:05d}/task0.arrow"
            if fs.exists(path):
                rows = read_ipc(fs, path, part_schema(pool))
                keys = rows.column("pieces_key").to_pylist()
                assert all(trajectory_bucket(k, n) == b for k in keys)
                pieces = read_ipc(fs, path.replace(".arrow", ".pieces.arrow"), PIECES_SCHEMA)
                flat = dict(zip(pieces.column("key").to_pylist(), pieces.column("input_ids").to_pylist()))
                for sid, key, ranges in zip(rows.column("sample_id").to_pylist(), keys,
                                            rows.column("ranges").to_pylist()):
                    back[(pool, sid)] = [x for a, e in zip(ranges[::2], ranges[1::2]) for x in flat[key][a:e]]
    assert back == joined


def test_a_part_of_sample_rows_is_a_shard_row_without_its_tokens():
    part = part_schema("sft")
    shard = schema_for("sft")
    assert [f.name for f in part][:-2] == [f.name for f in shard if f.name not in ("input_ids", "loss_weight")]
    assert part_schema("rl").equals(schema_for("rl"))
    assert rows_table([], part).num_rows == 0
    assert shard_task.PIECES_BYTES == shard_pieces.PIECES_BYTES


def test_pieces_that_do_not_line_up_fail_and_leave_no_local_file(tmp_path, monkeypatch):
    from pipeline.outputs import AtomicIpcWriter

    fs, root = out_fs(str(tmp_path))
    good = {"key": "a", "input_ids": list(range(5000)), "loss_weight": [0.5] * 5000}
    bad = {"key": "b", "input_ids": [1, 2, 3], "loss_weight": [1.0]}
    for name, row in (("p0", good), ("p1", bad)):
        with AtomicIpcWriter(fs, f"{root}/{name}.pieces.arrow", PIECES_SCHEMA) as w:
            w.write_table(pa.Table.from_pylist([row], schema=PIECES_SCHEMA))
    local = tmp_path / "tmp"
    local.mkdir()
    monkeypatch.setattr(shard_pieces.tempfile, "tempdir", str(local))
    paths = [f"{root}/p0.pieces.arrow", f"{root}/p1.pieces.arrow"]
    with pytest.raises(ValueError, match="ids and weights differ in length"):
        shard_pieces.Pieces(fs, paths, limit=1000)
    assert list(local.iterdir()) == []
    with shard_pieces.Pieces(fs, paths[:1], limit=1000) as pieces:  # spilled: ranges read back from the file
        assert pieces.spilled and list(local.iterdir())
        ids, weights = np.zeros(10, np.int32), np.zeros(10, np.float32)
        assert pieces.where == {"a": (0, 0)}
        pieces.copy(0, 4990, 5000, ids, weights, 0)
        assert ids.tolist() == list(range(4990, 5000)) and weights.tolist() == [0.5] * 10
        with pytest.raises(ValueError, match="beyond the 5000 values"):
            pieces.copy(0, 4995, 5005, ids, weights, 0)
    assert list(local.iterdir()) == []
