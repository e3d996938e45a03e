"""The android demo corpus: shape, determinism, native ≡ lwm-jsonl, and masking variety."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from masking import load_table, score_turn
from pipeline.demo.android import generate_android, write_android_demo
from schemas.errors import InvalidRecord
from schemas.trajectory import Trajectory
from stages.ingest import registry
from stages.ingest.reading import InputUnit, expand_inputs

OPTS = {"domain": None, "source_kind": "sandbox"}


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return generate_android(0, 240)


def ingest(unit: InputUnit) -> list[dict]:
    """Trajectory dicts through whatever format the registry sniffs; source left out for comparison."""
    name, _ = registry.sniff(unit)
    adapter = registry.get_adapter(name)
    out = []
    for rec in adapter.read(unit, OPTS):
        assert not isinstance(rec, InvalidRecord), rec
        for traj in adapter.normalize(rec, OPTS):
            d = traj.to_dict()
            d.pop("source")
            out.append(d)
    return out


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_corpus_shape(corpus):
    assert len(corpus) == 240
    for d in corpus:
        traj = Trajectory.from_dict(d)
        assert traj.domain == "android" and traj.source.kind == "sandbox"
        assert 2 <= len(traj.turns) <= 12
        assert traj.system.initial_state and traj.system.task_description
    by_task = collections.Counter(d["split_key"] for d in corpus)
    assert 40 < len(by_task) < 200  # tasks are retried: a few episodes share a split key
    assert max(by_task.values()) >= 2
    # One split key never mixes two task descriptions.
    descriptions = collections.defaultdict(set)
    for d in corpus:
        descriptions[d["split_key"]].add(d["system"]["task_description"])
    assert all(len(v) == 1 for v in descriptions.values())
    assert len({d["traj_id"] for d in corpus}) == 240


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = write_android_demo(str(tmp_path / "a"), 5, 30, native=False)
    b = write_android_demo(str(tmp_path / "b"), 5, 30, native=False)
    c = write_android_demo(str(tmp_path / "c"), 6, 30, native=False)
    assert [Path(p).name for p in a] == ["android.jsonl"]
    assert Path(a[0]).read_bytes() == Path(b[0]).read_bytes()
    assert Path(a[0]).read_bytes() != Path(c[0]).read_bytes()
    write_android_demo(str(tmp_path / "na"), 5, 12, native=True)
    write_android_demo(str(tmp_path / "nb"), 5, 12, native=True)
    native = tree_bytes(tmp_path / "na")
    assert native == tree_bytes(tmp_path / "nb")
    assert "android.actions.jsonl" in native and "episodes/ep-0012/000.xml" in native


def test_native_and_lwm_jsonl_forms_give_the_same_trajectories(tmp_path):
    (log,) = write_android_demo(str(tmp_path / "native"), 3, 25, native=True)
    (jsonl,) = write_android_demo(str(tmp_path / "jsonl"), 3, 25, native=False)
    assert registry.sniff(InputUnit(log))[0] == "uiautomator"
    assert registry.sniff(InputUnit(jsonl))[0] == "lwm-jsonl"
    (session,) = expand_inputs([str(tmp_path / "native")], registry.claims_dir)
    assert session.is_dir  # the screens beside the log are not separate inputs
    from_log, from_dir, from_jsonl = ingest(InputUnit(log)), ingest(session), ingest(InputUnit(jsonl))
    assert len(from_log) == 25
    assert from_log == from_dir == from_jsonl
    lines = [json.loads(line) for line in Path(log).read_text().splitlines()]
    assert {"episode", "step", "action", "dump"} <= set(lines[0]) and "before" in lines[0]
    assert registry.sniff(InputUnit(str(tmp_path / "native" / lines[0]["dump"])))[0] == "uiautomator"


def test_corpus_covers_at_least_four_masking_categories(corpus):
    table = load_table(None)
    categories = collections.Counter(
        score_turn(t["action"], t["observation"], table).category for d in corpus for t in d["turns"]
    )
    assert len(categories) >= 4, categories
    # New screens are retrieval; typed queries shown among results are expansion; splash screens
    # (empty renderings) are short new outcomes; long typed notes are mostly echoed back.
    assert {"retrieval", "expansion", "action", "boilerplate"} <= set(categories), categories
