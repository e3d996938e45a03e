"""End to end through the CLI: shards, manifest, histogram and their agreement (SPEC §9)."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from schemas.shard import RL_SCHEMA, SHARD_SCHEMA
from stages.tokenizer import load_tokenizer
from tests.helpers import lwm_in_process, shards_corpus


def lwm(*args: str, check: bool = True, process: bool = False) -> subprocess.CompletedProcess:
    """`lwm ARGS` in this process, or as its own process with `process`."""
    if process:
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, timeout=600)
    else:
        proc = lwm_in_process(*args)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("e2e")
    shards_corpus(base / "in" / "a.jsonl")
    outs = []
    for name in ("one", "two"):  # the second run in a process of its own: the bytes may not depend on the process
        out = base / name
        lwm("run", "--executor", "local", "-i", str(base / "in"), "-o", str(out), "--progress", "off",
            process=name == "two")
        outs.append(out)
    return outs


def _files(root: Path, sub: str) -> list[Path]:
    return sorted(p.relative_to(root) for p in (root / sub).rglob("*") if p.is_file())


def test_two_runs_are_byte_identical(runs):
    a, b = runs
    for sub in ("shards", "trajectories", "quarantine"):
        assert _files(a, sub) == _files(b, sub)
        for rel in _files(a, sub):
            assert filecmp.cmp(a / rel, b / rel, shallow=False), rel
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    assert (a / "_SUCCESS").exists()


def test_shard_columns_and_manifest_listing(runs):
    out = runs[0]
    manifest = json.loads((out / "manifest.json").read_text())
    listed = {s["path"]: s for s in manifest["shards"]}
    assert set(listed) == {str(p) for p in _files(out, "shards")}
    for rel, info in listed.items():
        table = pq.read_table(out / rel)
        pool = rel.split("/")[1]
        assert table.schema.equals(RL_SCHEMA if pool == "rl" else SHARD_SCHEMA)
        assert table.num_rows == info["rows"]
        ids = table.column("sample_id").to_pylist()
        assert ids == sorted(ids)
        assert pq.ParquetFile(out / rel).metadata.row_group(0).column(0).compression == "ZSTD"
    assert manifest["tokenizer"]["engine"] == "tiktoken" and len(manifest["tokenizer"]["vocab_hash"]) == 64
    assert set(manifest["counts"]["samples"]) <= {"cpt", "sft", "rl", "eval"}


def test_hist_json_totals_equal_manifest_and_shard_sums(runs):
    out = runs[0]
    manifest = json.loads((out / "manifest.json").read_text())
    report = json.loads(lwm("hist", str(out), "--json").stdout)
    records = manifest["histogram"]["records"]
    assert report["totals"]["turns"] == sum(r["turns"] for r in records)
    assert report["totals"]["tokens"] == sum(r["tokens"] for r in records)
    assert abs(report["totals"]["weighted_tokens"] - sum(r["weighted"] for r in records)) < 0.05
    # the same totals straight from the shards
    turns = tokens = 0
    weighted = 0.0
    for p in sorted((out / "shards").rglob("*.parquet")):
        for row in pq.read_table(p).to_pylist():
            if row["pool"] == "rl":
                turns += 1
                continue
            spans = row["turn_spans"] if row["pool"] == "cpt" else row["turn_spans"][-1:]
            for s in spans:
                turns += 1
                tokens += s["end"] - s["start"]
                weighted += sum(row["loss_weight"][s["start"]:s["end"]])
            assert row["num_loss_tokens"] == sum(1 for w in row["loss_weight"] if w > 0)
            assert row["num_tokens"] == len(row["input_ids"]) == len(row["loss_weight"])
    assert report["totals"]["turns"] == turns and report["totals"]["tokens"] == tokens
    assert abs(report["totals"]["weighted_tokens"] - weighted) < 0.05
    by = json.loads(lwm("hist", str(out), "--json", "--by", "domain,pool").stdout)
    assert any(k.startswith("mcp/") for k in by["groups"])
    assert json.loads(lwm("hist", str(out), "--json", "--by", "template").stdout)["groups"]


def test_decoded_rows_put_observations_under_weights(runs):
    out = runs[0]
    tok = load_tokenizer()
    trajs = {}
    for p in (out / "trajectories").glob("*.parquet"):
        for row in pq.read_table(p).to_pylist():
            trajs[row["traj_id"]] = row
    checked = 0
    for p in sorted((out / "shards" / "cpt").glob("*.parquet")):
        for row in pq.read_table(p).to_pylist()[:40]:
            traj = trajs[row["traj_id"]]
            ids, w = row["input_ids"], row["loss_weight"]
            for k, span in enumerate(row["turn_spans"]):
                obs = traj["turns"][k]["observation"]
                text = tok.decode(ids[span["start"]:span["end"]])
                assert text.endswith(obs + "<|im_end|>")
                assert all(abs(x - row["turn_keep"][k]) < 1e-6 for x in w[span["start"]:span["end"]])
            zero = tok.decode([i for i, x in zip(ids, w) if x == 0])
            for turn in traj["turns"]:
                assert turn["action"] in zero
            checked += 1
    assert checked >= 20


def test_masked_categories_reach_the_weights(runs):
    out = runs[0]
    keeps = {}
    for p in sorted((out / "shards" / "cpt").glob("*.parquet")):
        for row in pq.read_table(p).to_pylist():
            for cat, keep in zip(row["turn_category"], row["turn_keep"]):
                keeps[cat] = keep
    assert keeps.get("echo") == pytest.approx(0.05) or keeps.get("boilerplate") == pytest.approx(0.10)
    assert keeps.get("retrieval") == 1.0


def test_config_errors_are_one_clear_line(tmp_path):
    shards_corpus(tmp_path / "in" / "a.jsonl", n=8)
    bad = tmp_path / "bad.toml"
    bad.write_text('[masking.table]\nshort_chars = 64\n[[masking.table.categories]]\nname = "echo"\nwhen = "ol >= banana"\nkeep = 0.1\n')
    cases = [
        ("--config", str(bad)),
        ("--tokenizer", str(tmp_path / "missing" / "tokenizer.json")),
    ]
    for extra in cases:
        proc = lwm("run", "--executor", "local", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "o"), *extra,
                   check=False)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert lines[-1].startswith("lwm: error: ") and "Traceback" not in proc.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = lwm("run", "--executor", "local", "-i", str(tmp_path / "in"), "-o", str(blocker / "out"), check=False)
    assert proc.returncode == 2 and "not writable" in proc.stderr.strip().splitlines()[-1]


def test_rl_pool_has_one_sample_per_trajectory_and_counts_the_cap_and_the_context_limit(runs, tmp_path):
    out = runs[0]
    manifest = json.loads((out / "manifest.json").read_text())
    rl_rows = [r for p in (out / "shards" / "rl").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    n_rl = manifest["counts"]["pools"]["rl"]["trajectories"]
    assert len(rl_rows) == n_rl > 0
    assert len({r["traj_id"] for r in rl_rows}) == n_rl
    assert all(r["reference"] and r["messages"][-1]["role"] == "user" for r in rl_rows)
    cfg = tmp_path / "cap.toml"
    cfg.write_text("[pools]\nrl_prompt_cap = 50\n")
    capped = tmp_path / "capped"
    lwm("run", "--executor", "local", "-i", str(out.parent / "in"), "-o", str(capped), "--config", str(cfg),
        "--progress", "off")
    m2 = json.loads((capped / "manifest.json").read_text())
    assert m2["counts"]["filtered"]["rl_prompt_cap"] == n_rl
    assert m2["counts"]["samples"].get("rl", 0) == 0
    # a context limit below the rl cap bounds rl prompts too: they are dropped whole, never truncated
    cfg.write_text("[pools]\ncontext_limit = 50\n")
    short = tmp_path / "short"
    lwm("run", "--executor", "local", "-i", str(out.parent / "in"), "-o", str(short), "--config", str(cfg),
        "--progress", "off")
    m3 = json.loads((short / "manifest.json").read_text())
    assert m3["counts"].get("samples", {}).get("rl", 0) == 0
    assert m3["counts"]["filtered"]["sample_over_context_limit"] >= n_rl
    assert "rl_prompt_cap" not in m3["counts"]["filtered"]


def test_going_back_to_an_earlier_shard_layout_writes_its_files_again(runs, tmp_path):
    from tests.helpers import assert_same_outputs

    src = runs[0].parent / "in"
    small, default = tmp_path / "small.toml", tmp_path / "default.toml"
    small.write_text("[shards]\nmax_rows = 10\n")
    default.write_text("")
    args = ["run", "--executor", "local", "-i", str(src), "--progress", "off"]
    again = tmp_path / "again"
    for cfg in (small, default, small):  # layout A, then B (fewer files: A's others are removed), then A again
        lwm(*args, "-o", str(again), "--config", str(cfg))
    fresh = tmp_path / "fresh"
    lwm(*args, "-o", str(fresh), "--config", str(small))
    manifest = json.loads((again / "manifest.json").read_text())
    assert len(manifest["shards"]) > len(json.loads((runs[0] / "manifest.json").read_text())["shards"])
    assert all((again / s["path"]).is_file() for s in manifest["shards"])
    assert_same_outputs(again, fresh)


def test_success_needs_every_listed_shard_where_the_driver_looks(runs, tmp_path):
    """Workers on other machines of a cluster write a local --out to their own disks: the driver then misses the
    shards. A shard the manifest lists that is not there, or not at its recorded size, stops the run before
    _SUCCESS; the run's own outputs pass."""
    import fsspec

    from pipeline.run import check_shards_visible
    from schemas.errors import ConfigError

    out = runs[0]
    manifest = json.loads((out / "manifest.json").read_text())
    fs = fsspec.filesystem("file")
    check_shards_visible(fs, str(out), str(out), manifest)
    listed = [s for s in manifest["shards"] if s["rows"]]
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(out, copy)
    (copy / listed[0]["path"]).unlink()
    with pytest.raises(ConfigError, match=r"1 of the \d+ shard files the workers wrote are not in .* as this machine"):
        check_shards_visible(fs, str(copy), str(copy), manifest)
    shutil.copy(out / listed[0]["path"], copy / listed[0]["path"])
    with open(copy / listed[1]["path"], "ab") as f:
        f.write(b"x")
    with pytest.raises(ConfigError, match="no _SUCCESS was written"):
        check_shards_visible(fs, str(copy), str(copy), manifest)
