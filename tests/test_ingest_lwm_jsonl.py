"""lwm-jsonl: records carry their own domain and source kind; a run's --domain and --source-kind replace them, as
they set those of every other format."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers import lwm_in_process


def _sources(out: Path) -> set[tuple[str, str]]:
    """(domain, source kind) of every trajectory of a run's trajectories layer."""
    found = set()
    for part in (out / "trajectories").glob("*.parquet"):
        for row in pq.read_table(part, columns=["domain", "source"]).to_pylist():
            found.add((row["domain"], row["source"]["kind"]))
    return found


def _run(src: Path, out: Path, *args: str) -> set[tuple[str, str]]:
    proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "-i", str(src), "-o", str(out), *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return _sources(out)


@pytest.fixture(scope="module")
def web_demo(tmp_path_factory) -> Path:
    """Demo web trajectories in lwm-jsonl, which record their own source kind: sandbox."""
    root = tmp_path_factory.mktemp("web") / "demo"
    assert lwm_in_process("demo", "--domain", "web", "--out", str(root), "-n", "12").returncode == 0
    assert {json.loads(line)["source"]["kind"] for line in (root / "web.jsonl").read_text().splitlines()} == {"sandbox"}
    return root


def test_records_keep_their_own_kind_and_domain_when_the_run_sets_none(web_demo, tmp_path):
    assert _run(web_demo, tmp_path / "out") == {("web", "sandbox")}


@pytest.mark.parametrize("setting", [["--source-kind", "internal"], ["--opt", "source_kind=internal"], "config"])
def test_a_source_kind_given_to_the_run_replaces_the_records_own(setting, web_demo, tmp_path):
    if setting == "config":
        config = tmp_path / "run.toml"
        config.write_text('[run]\nsource_kind = "internal"\n')
        setting = ["--config", str(config)]
    assert _run(web_demo, tmp_path / "out", *setting) == {("web", "internal")}


def test_source_kind_and_domain_are_set_alike_for_lwm_jsonl_and_another_format(web_demo, shared_data, tmp_path):
    """-d and --source-kind both replace what the records say, for the schema's own records as for WebVoyager's."""
    assert _run(web_demo, tmp_path / "a", "-d", "search", "--source-kind", "internal") == {("search", "internal")}
    assert _run(shared_data / "webvoyager", tmp_path / "b", "--source-kind", "internal") == {("web", "internal")}
