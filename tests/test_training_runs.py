"""What the runs behind a training set must agree on: the shard files their manifests list, one tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from pipeline.cli import main as lwm
from tests.helpers import write_synthetic_shards

TINY = ["--max-steps", "1", "--tiny-vocab", "64", "--tiny-dim", "32", "--micro-batch-tokens", "64",
        "--shuffle-buffer", "8"]


def _pool(root: Path) -> Path:
    return Path(write_synthetic_shards(str(root), rows_per_file=(8, 8, 8), row_group_rows=4))


def _train(*sources: Path | str):
    args = [part for source in sources for part in ("--shards", str(source))]
    return CliRunner().invoke(lwm, ["train", *args, *TINY])


def _refusal(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lwm: error: --shards: "), result.output
    return lines[0]


def test_the_shards_the_manifest_lists_train(tmp_path):
    pool = _pool(tmp_path)
    assert _train(pool).exit_code == 0


def test_a_missing_shard_file_is_refused_naming_it(tmp_path):
    pool = _pool(tmp_path)
    (pool / "part-00001.parquet").unlink()
    line = _refusal(_train(pool))
    assert "missing: shards/cpt/part-00001.parquet" in line and str(tmp_path / "manifest.json") in line


def test_a_copied_shard_file_is_refused_naming_it(tmp_path):
    pool = _pool(tmp_path)
    shutil.copy(pool / "part-00000.parquet", pool / "part-00000-copy.parquet")
    assert "not listed: shards/cpt/part-00000-copy.parquet" in _refusal(_train(pool))


def test_stale_shards_in_a_nested_folder_are_refused_naming_them(tmp_path):
    pool = _pool(tmp_path)
    older = _pool(tmp_path / "older")
    (pool / "old").mkdir()
    shutil.copy(older / "part-00002.parquet", pool / "old" / "part-00002.parquet")
    assert "not listed: shards/cpt/old/part-00002.parquet" in _refusal(_train(pool))


def test_a_shard_with_other_rows_than_its_entry_is_refused(tmp_path):
    pool = _pool(tmp_path)
    shutil.copy(_pool(tmp_path / "other") / "part-00000.parquet", pool / "part-00000.parquet")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["shards"][0]["rows"] = 9
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert "shards/cpt/part-00000.parquet (8 rows, the manifest says 9)" in _refusal(_train(pool))


def test_a_glob_picks_some_listed_shards_and_a_folder_without_manifest_is_not_compared(tmp_path):
    pool = _pool(tmp_path)
    (pool / "part-00001.parquet").unlink()
    assert _train(str(pool / "part-0000[02].parquet")).exit_code == 0
    (tmp_path / "manifest.json").unlink()
    shutil.copy(pool / "part-00000.parquet", pool / "part-00000-copy.parquet")
    assert _train(pool).exit_code == 0
