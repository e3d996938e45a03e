"""`lwm run --dry-run` prints the resolved config as TOML that `--config` reads back to the same config."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.config import resolve
from pipeline.config_toml import dumps

ROOT = Path(__file__).resolve().parent.parent


def _table() -> dict:
    with open(ROOT / "masking" / "default_table.toml", "rb") as f:
        return tomllib.load(f)


CASES = {
    "defaults": {},
    "flags and options": {"run": {"input": ["a b.jsonl", "s3://bucket/x"], "out": "out", "format": "openai-messages"},
                          "ingest": {"options": {"orphans": "skip", "messages_column": "TRAJECTORY"}},
                          "pools": {"sft_turns": "all", "ratios": {"cpt": 0.5, "sft": 0.5, "rl": 0.0, "eval": 0.0}},
                          "dedup": {"decontaminate": ["bench.jsonl"], "threshold": 0.75}},
    "masking table": {"masking": {"table": _table(), "keep_mode": "token"}},
    "characters beyond U+FFFF and DEL": {"run": {"input": ["logs/😀 run.jsonl", "del\x7f.jsonl"], "out": "o_😀"},
                                         "ingest": {"options": {"messages_path": "note\U0001F600.x\x7fy"}}},
    "model stages": {"llm": {"endpoint": "http://127.0.0.1:9/v1", "model": "m \"quoted\" é", "max_requests": 10}},
}


@pytest.mark.parametrize("override", CASES.values(), ids=CASES.keys())
def test_the_toml_reads_back_to_the_same_config(override):
    cfg = resolve(overrides=override)
    text = dumps(cfg)
    assert resolve(tomllib.loads(text)) == cfg


def test_a_key_beyond_u_ffff_or_with_del_is_quoted_and_reads_back():
    """Option names are checked against the formats before a config is resolved, so an odd key is written here
    into a resolved config directly: the TOML writer must quote it as it quotes such values."""
    cfg = resolve()
    cfg["ingest"]["options"]["note\U0001F600\x7f"] = "x\x7fy"
    assert tomllib.loads(dumps(cfg))["ingest"]["options"] == cfg["ingest"]["options"]


def test_dry_run_prints_it_and_the_model_stage_keys_as_comments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()  # a dry run checks that the inputs exist (and reads none)
    result = CliRunner().invoke(main, ["run", "-i", "in", "-o", "out", "--sft-turns", "3", "--dry-run"])
    assert result.exit_code == 0, result.output
    printed = tmp_path / "dry.toml"
    printed.write_text(result.output)
    assert "# [llm]\n# endpoint = \"\"\n" in result.output  # what --llm-endpoint and a [llm] table would set
    again = CliRunner().invoke(main, ["run", "--config", str(printed), "--dry-run"])
    assert again.exit_code == 0 and again.output == result.output
