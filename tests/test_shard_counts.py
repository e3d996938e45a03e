"""How many shard files a pool gets: bounded rows and bytes per file, and an even number where more than one."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from pipeline.config import resolve
from pipeline.run import run_pipeline
from pipeline.samples_stage import bucket_counts
from schemas.shard import schema_for
from schemas.stats import Stats
from tests.helpers import corpus_config, write_corpus


def _stats(trajectories: int, turns: int, chars: int) -> Stats:
    return Stats({"trajectories.kept": trajectories, "turns.kept": turns, "chars.kept": chars})


@pytest.mark.parametrize(("trajectories", "max_rows", "files"), [
    (100, 1000, 1),  # one file stays one
    (2000, 1000, 2),
    (2500, 1000, 4),  # three by rows: four
    (4500, 1000, 6),  # five by rows: six
    (6000, 1000, 6),
])
def test_a_pool_of_more_than_one_file_gets_an_even_number_of_files(trajectories, max_rows, files):
    cfg = resolve({"pools": {"ratios": {"cpt": 0.0, "sft": 1.0, "rl": 0.0, "eval": 0.0}, "sft_turns": 1},
                   "shards": {"max_rows": max_rows}})
    counts = bucket_counts(cfg, _stats(trajectories, 4 * trajectories, 100 * trajectories))
    assert counts["sft"] == files
    assert counts["sft"] * max_rows >= trajectories  # still no more than max_rows rows a file on average


def test_a_count_set_by_bytes_is_made_even_too():
    cfg = resolve({"pools": {"ratios": {"cpt": 1.0, "sft": 0.0, "rl": 0.0, "eval": 0.0}},
                   "shards": {"target_bytes": 1_000_000, "max_rows": 10**9}})
    # about 2.1 MB of cpt tokens by the estimate: three files by bytes
    counts = bucket_counts(cfg, _stats(100, 400, 1_500_000))
    assert counts["cpt"] == 4


def test_a_run_writes_the_even_number_of_files_each_under_max_rows(tmp_path):
    inputs = [str(write_corpus(tmp_path / "in", files=4, per_file=40))]
    cfg = corpus_config(inputs, tmp_path / "out")
    cfg["pools"]["ratios"] = {"cpt": 1.0, "sft": 0.0, "rl": 0.0, "eval": 0.0}
    cfg["shards"]["max_rows"] = 60  # 160 trajectories (one row each): three files by rows
    run_pipeline(cfg, echo=lambda _m: None)
    files = sorted((tmp_path / "out" / "shards" / "cpt").glob("part-*.parquet"))
    rows = [pq.ParquetFile(f).metadata.num_rows for f in files]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert len(files) == manifest["buckets"]["cpt"] == 4
    assert max(rows) <= 60 and min(rows) > 0
    assert sum(rows) == manifest["counts"]["samples"]["cpt"] > 150
    # a pool at ratio 0 gets no samples, but its one file (README): no rows, the pool's columns, listed
    listed = {e["path"]: e["rows"] for e in manifest["shards"]}
    for pool in ("sft", "rl", "eval"):
        [empty] = (tmp_path / "out" / "shards" / pool).glob("*.parquet")
        assert pq.ParquetFile(empty).metadata.num_rows == 0 and listed[f"shards/{pool}/{empty.name}"] == 0
        assert pq.read_schema(empty).names == schema_for(pool).names
