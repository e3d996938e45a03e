"""pipeline/cli/run_files.py: what the export and reward commands read of a finished run."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli.run_files import finished_run, parquet_files, rl_shard_rows
from pipeline.outputs import out_fs
from schemas.errors import ConfigError


def test_a_run_without_success_marker_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not a finished run"):
        finished_run(str(tmp_path))
    (tmp_path / "_SUCCESS").write_text("")
    fs, root = finished_run(str(tmp_path))
    assert fs.exists(f"{root}/_SUCCESS")


def test_parquet_files_are_sorted_and_a_missing_folder_has_none(tmp_path):
    fs, root = out_fs(str(tmp_path))
    assert parquet_files(fs, f"{root}/shards/rl") == []
    (tmp_path / "shards" / "rl").mkdir(parents=True)
    for name in ("part-00001.parquet", "part-00000.parquet", "notes.txt"):
        (tmp_path / "shards" / "rl" / name).write_text("")
    assert [p.rsplit("/", 1)[1] for p in parquet_files(fs, f"{root}/shards/rl")] == [
        "part-00000.parquet", "part-00001.parquet"]


def test_rl_rows_carry_verifier_only_where_the_shard_has_the_column(tmp_path):
    folder = tmp_path / "shards" / "rl"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"sample_id": ["a"], "domain": ["web"], "verifier": ["exact"]}), folder / "part-00000.parquet")
    pq.write_table(pa.table({"sample_id": ["b"], "domain": ["os"]}), folder / "part-00001.parquet")
    fs, root = out_fs(str(tmp_path))
    assert rl_shard_rows(fs, root, ["sample_id"]) == [{"sample_id": "a", "verifier": "exact"}, {"sample_id": "b"}]
