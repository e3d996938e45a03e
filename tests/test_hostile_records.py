"""Hostile records: deep nesting, lone surrogates and type confusion become quarantine rows with a
reason, never a traceback; ``lwm validate`` rejects what ``lwm run`` quarantines; and a schema fuzz
test over every adapter's output record finds no crash from normalize to shard rows."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from masking import load_table
from pipeline.config import resolve
from pipeline.demo import generate
from pipeline.outputs import AtomicParquetWriter
from schemas.errors import InvalidRecord
from schemas.layers import QUARANTINE_SCHEMA, RAW_SCHEMA
from schemas.shard import schema_for
from schemas.stats import Stats
from schemas.trajectory import TRAJECTORY_SCHEMA
from stages.ingest.reading import InputUnit, expand_inputs, iter_jsonl
from stages.ingest.registry import RawRecord, adapters, claims_dir, get_adapter, resolve_opts, sniff
from stages.normalize import normalize_unit
from stages.sample_rows import build_rows
from stages.steps import apply_steps, build_steps
from stages.tokenizer import load_tokenizer
from stages.tokenizer.segments import segment_tokenizer

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def lwm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, timeout=600)


def good(i: int) -> dict:
    return {"traj_id": f"t{i}", "domain": "terminal", "split_key": f"task-{i}",
            "system": {"task_description": f"task {i}", "action_space": "keys"},
            "turns": [{"action": f'[{{"keystrokes": "echo {i}-{j}\\n"}}]', "observation": f"{i}-{j} out"}
                      for j in range(2)]}


def quarantined(out: Path) -> list[dict]:
    rows = []
    for p in sorted((out / "quarantine").glob("*.parquet")):
        rows += pq.read_table(p).to_pylist()
    return rows


# --- deep nesting (5) -------------------------------------------------------------------------

DEEP = "[" * 1000 + "]" * 1000


def test_deep_nesting_is_a_quarantine_row_in_reading_and_sniffing(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text(DEEP + "\n" + json.dumps(good(1)) + "\n")
    items = list(iter_jsonl(str(path)))
    assert isinstance(items[0], InvalidRecord) and items[0].reason == "too_deep"
    assert items[1][0] == "line 2"
    deep_first = tmp_path / "deepfirst.jsonl"
    deep_first.write_text(DEEP + "\n")
    assert sniff(InputUnit(str(deep_first)))[0] is None  # nothing recognized, no traceback
    doc = tmp_path / "deep.json"
    doc.write_text(DEEP)
    assert [i.reason for i in iter_jsonl(str(path)) if isinstance(i, InvalidRecord)] == ["too_deep"]
    from stages.ingest.reading import iter_json

    assert [i.reason for i in iter_json(str(doc))] == ["too_deep"]


def test_deep_nesting_through_run(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text(json.dumps(good(0)) + "\n" + DEEP + "\n" + json.dumps(good(2)) + "\n")
    (src / "b.jsonl").write_text(DEEP + "\n")  # sniffing sees only the deep line
    deep_field = good(3)
    deep_field["turns"][0]["meta"] = json.loads("[" * 900 + "]" * 900)
    (src / "c.jsonl").write_text(json.dumps(good(4)) + "\n" + json.dumps(deep_field) + "\n")
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--max-quarantine-rate", "0.9")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = quarantined(out)
    # b.jsonl: no line of it reads, so the sniffers cannot tell its format; its row says why (not "give --format")
    assert sorted((q["uri"].rsplit("/", 1)[-1], q["locator"], q["reason"]) for q in rows) == [
        ("a.jsonl", "line 2", "too_deep"), ("b.jsonl", "line 1", "too_deep")], rows


# --- integers Python will not convert -----------------------------------------------------------

HUGE = "9" * (sys.get_int_max_str_digits() + 700)  # valid JSON; `int()` of it raises ValueError


def test_a_huge_integer_is_a_quarantine_row_and_in_tool_arguments_stays_text(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    huge = good(9)
    huge["split_key"] = "HUGE"
    in_action = good(8)  # read fine (the action is a string); the filters parse it
    in_action["turns"][0]["action"] = '[{"keystrokes": "seq 1\\n", "n": ' + HUGE + "}]"
    lines = [json.dumps(good(i)) for i in range(6)] + [json.dumps(huge).replace('"HUGE"', HUGE), json.dumps(in_action)]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    # an OpenAI chat whose call arguments hold such a number: the model's text is kept as it was sent
    chat = {"id": "c", "messages": [
        {"role": "user", "content": "Add them."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "add", "arguments": '{"n": ' + HUGE + "}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "overflow"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "2", "type": "function", "function": {"name": "add", "arguments": '{"n": 1}'}}]},
        {"role": "tool", "tool_call_id": "2", "content": "1"}]}
    (src / "chat.jsonl").write_text(json.dumps(chat) + "\n")
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--max-quarantine-rate", "0.5")
    assert proc.returncode == 0, proc.stderr
    (row,) = quarantined(out)
    assert (row["locator"], row["reason"]) == ("line 7", "malformed_json")
    assert row["detail"].startswith(f"integer of more than {sys.get_int_max_str_digits()} digits at column ")
    kept = pq.read_table(out / "trajectories", columns=["traj_id", "turns"]).to_pylist()
    assert len(kept) == 8
    (chat_row,) = [t for t in kept if not t["traj_id"].startswith("t")]
    assert HUGE in chat_row["turns"][0]["action"]
    shards = pq.read_table(out / "shards", columns=["traj_id"]).column("traj_id").to_pylist()
    assert "t8" in shards and chat_row["traj_id"] in shards


# --- lone surrogates and validate == run (6) ----------------------------------------------------

SURROGATE_LINES = [
    '{"traj_id": "s1", "domain": "terminal", "system": {"task_description": "x", "action_space": "y"}, '
    '"turns": [{"action": "ls", "observation": "bad \\ud800 here"}]}',
    '{"traj_id": "s2\\udfff", "domain": "terminal", "system": {"task_description": "x", "action_space": "y"}, '
    '"turns": [{"action": "ls", "observation": "ok"}]}',
    '{"traj_id": "s3", "domain": "terminal", "system": {"task_description": "\\ud83d", "action_space": "y"}, '
    '"turns": [{"action": "ls", "observation": "ok"}], "meta": {"k": "\\udc80"}}',
]


def test_lone_surrogates_are_quarantined_and_validate_reports_them(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    lines = [json.dumps(good(i)) for i in range(6)] + SURROGATE_LINES
    (src / "s.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--format", "lwm-jsonl",
               "--max-quarantine-rate", "0.9")
    assert proc.returncode == 0, proc.stderr
    rows = quarantined(out)
    assert sorted((r["locator"], r["reason"]) for r in rows) == [
        ("line 7", "bad_encoding"), ("line 8", "bad_encoding"), ("line 9", "bad_encoding")]
    kept = pq.read_table(next((out / "trajectories").glob("*.parquet")), columns=["traj_id"]).column("traj_id")
    assert sorted(kept.to_pylist()) == [f"t{i}" for i in range(6)]
    # the raw layer keeps every record, the surrogate as its JSON escape
    raw = pq.read_table(next((out / "raw").glob("*.parquet"))).to_pylist()
    assert len(raw) == 9 and json.loads(raw[6]["payload"])["turns"][0]["observation"] == "bad \ud800 here"
    proc = lwm("validate", str(src), "--format", "lwm-jsonl")
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text
    assert text.count("bad_encoding") >= 3 and "3 quarantined" in text


def test_validate_and_run_agree_on_type_confusion(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    bad = []
    for key, value in [("traj_id", 5), ("outcome", {"reward": "abc"}), ("outcome", {"success": "yes"}),
                       ("outcome", 5)]:
        rec = good(len(bad) + 10)
        rec[key] = value
        bad.append(rec)
    rec = good(20)
    rec["system"]["initial_state"] = 5
    bad.append(rec)
    rec = good(21)
    rec["turns"][1]["reasoning"] = ["x"]
    bad.append(rec)
    big = good(22)
    big["outcome"] = {"success": True, "reward": 1e30}
    lines = [json.dumps(good(i)) for i in range(10)] + [json.dumps(b) for b in bad] + [json.dumps(big)]
    (src / "t.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--format", "lwm-jsonl",
               "--max-quarantine-rate", "0.9")
    assert proc.returncode == 0, proc.stderr
    q = {r["locator"] for r in quarantined(out)}
    assert q == {f"line {i}" for i in range(11, 17)}
    proc = lwm("validate", str(src), "--format", "lwm-jsonl")
    assert "6 quarantined" in proc.stdout + proc.stderr


# --- schema fuzz over every adapter's output record (7) ---------------------------------------


def _first_trajectory(name: str):
    adapter = get_adapter(name)
    opts = resolve_opts(adapter, {})
    if name == "lwm-jsonl":
        return None
    root = FIXTURES / name
    for unit in expand_inputs([str(root)], claims_dir=lambda u: claims_dir(u, name)):
        for item in normalize_unit(unit, adapter, opts, Stats()):
            if item.trajectories:
                return item.trajectories[0]
    return None


@pytest.fixture(scope="module")
def adapter_records() -> dict[str, dict]:
    out = {"lwm-jsonl": generate("terminal", seed=1, n=1)[0]}
    for name in adapters():
        traj = _first_trajectory(name)
        if traj is not None:
            out[name] = traj.to_dict()
    return out


def test_every_adapter_has_an_output_record(adapter_records):
    assert set(adapter_records) == set(adapters())


@pytest.fixture(scope="module")
def pipeline_parts():
    cfg = resolve()
    cfg["pools"]["ratios"] = {"cpt": 0.25, "sft": 0.25, "rl": 0.25, "eval": 0.25}
    return cfg, build_steps(cfg), segment_tokenizer(load_tokenizer()), load_table(cfg["masking"]["table"])


def leaf_paths(value, path=()):
    if isinstance(value, dict):
        yield path
        for k, v in value.items():
            yield from leaf_paths(v, (*path, k))
    elif isinstance(value, list):
        yield path
        for i, v in enumerate(value):
            yield from leaf_paths(v, (*path, i))
    else:
        yield path


def set_path(value, path, new):
    if not path:
        return new
    target = value
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return value


REPLACEMENTS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([1e30, -1e308, 0.0, math.inf, -math.inf, math.nan, 2**64, -(2**63)]),
    st.floats(allow_nan=True), st.text(max_size=20),
    st.sampled_from(["abc", "\ud800", "x\udfffy", "", "<|im_end|>", "AKIAIOSFODNN7EXAMPLE", "terminal"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.just([{"action": 1, "observation": None}]), st.just({"success": "x", "reward": "abc"}),
    st.just(json.loads("[" * 400 + "]" * 400)),
)


def write(schema, rows: list[dict]) -> None:
    """Rows through the real Parquet writer (in memory)."""
    with AtomicParquetWriter(fsspec.filesystem("memory"), "/fuzz/part.parquet", schema) as w:
        for row in rows:
            w.write_row(row)


def run_record(record: dict, parts) -> None:
    """Everything one lwm-jsonl line goes through in a run, up to shard rows; InvalidRecord allowed."""
    cfg, transforms, seg, table = parts
    adapter = get_adapter("lwm-jsonl")
    payload = json.dumps(record, ensure_ascii=False)
    raw = RawRecord("mem://fuzz.jsonl", "line 1", adapter.name, payload)
    write(RAW_SCHEMA, [{"uri": raw.uri, "locator": raw.locator, "format": "lwm-jsonl", "payload": raw.payload}])
    stats = Stats()
    for item in normalize_unit(InputUnit(raw.uri), OneRecord(adapter, raw), resolve_opts(adapter, {}), stats):
        if item.quarantine is not None:
            write(QUARANTINE_SCHEMA, [item.quarantine])
        for traj in item.trajectories:
            kept = apply_steps(traj, transforms, stats)
            if kept is None:
                continue
            write(TRAJECTORY_SCHEMA, [kept.to_dict()])
            for pool, row in build_rows(kept, cfg, seg, table, stats):
                write(schema_for(pool), [row])
    # an adapter bug would show as adapter_error: none is allowed here
    assert not stats.get("quarantined.adapter_error"), stats.to_dict()


class OneRecord:
    """The adapter, reading one given record (so normalize_unit runs exactly as in a run)."""

    def __init__(self, adapter, raw: RawRecord) -> None:
        self.adapter, self.raw, self.name = adapter, raw, adapter.name

    def read(self, unit, opts):
        yield self.raw

    def normalize(self, record, opts):
        return self.adapter.normalize(record, opts)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_single_leaf_type_changes_never_crash(adapter_records, pipeline_parts, data):
    name = data.draw(st.sampled_from(sorted(adapter_records)))
    record = copy.deepcopy(adapter_records[name])
    path = data.draw(st.sampled_from(list(leaf_paths(record))))
    record = set_path(record, path, data.draw(REPLACEMENTS))
    run_record(record, pipeline_parts)
