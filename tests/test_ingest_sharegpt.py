"""sharegpt: function_call / observation conversations from hand-written fixtures."""

from __future__ import annotations

import json

import pytest

from schemas.errors import InvalidRecord
from stages.ingest import registry
from stages.ingest.reading import InputUnit
from stages.ingest.sharegpt import ADAPTER, parse_function_call
from tests.helpers import ingest_unit


def run(path, **opts):
    """All trajectories and all quarantined records of one file, as the pipeline would see them."""
    return ingest_unit(ADAPTER, path, **opts)


@pytest.fixture(scope="module")
def glaive(fixtures_dir):
    trajs, errors = run(fixtures_dir / "sharegpt/glaive.json")
    assert errors == []
    return trajs


def test_calls_pair_with_observations_in_order(glaive):
    t = glaive[0]
    assert [x.action for x in t.turns] == [
        '{"name": "search_flights", "arguments": {"origin": "LIS", "destination": "OPO"}}',
        '{"name": "book_flight", "arguments": {"flight": "FR8345"}}',  # arguments given as JSON text, parsed
    ]
    assert json.loads(t.turns[0].observation)["flights"][1] == {"number": "FR8345", "price": 31}
    assert t.turns[1].observation == '{"status": "booked", "seat": "14C"}'
    assert [x.reasoning for x in t.turns] == ["Let me search first.", None]
    assert t.system.task_description == "Find me a flight from Lisbon to Porto and book the cheapest."
    assert [x["name"] for x in json.loads(t.system.action_space)] == ["search_flights", "book_flight"]
    meta = json.loads(t.meta)
    assert meta == {
        "final_answer": "Booked FR8345 for 31 EUR, seat 14C.",
        "system_prompt": "You are a booking assistant.",
    }
    assert t.source.locator == "item 0" and t.domain == "mcp"


def test_parallel_calls_and_unanswered_call(glaive):
    t = glaive[1]
    assert [json.loads(x.action)["arguments"]["destination"] for x in t.turns] == ["MAD", "FCO"]
    assert ["IB3101" in t.turns[0].observation, "TP836" in t.turns[1].observation] == [True, True]
    meta = json.loads(t.meta)
    assert meta["unanswered_tool_calls"] == 1  # the booking at the end has no observation
    assert meta["user_messages"] == ["Book Madrid."]
    assert meta["system_prompt"] == "Answer with tools when useful."
    assert meta["final_answer"] == "Madrid is cheaper (45 vs 88)."


def test_zstd_file_good_and_bad_records(fixtures_dir):
    trajs, errors = run(fixtures_dir / "sharegpt/chats.jsonl.zst")
    (t,) = trajs
    assert t.turns[0].action == '{"name": "calculator", "arguments": {"expression": "17 * 23"}}'
    assert t.turns[0].observation == "391"
    assert {e.locator: e.reason for e in errors} == {
        "line 2": "orphan_tool_result",
        "line 3": "malformed_tool_call",
        "line 4": "malformed_tool_call",
        "line 5": "malformed_message",
        "line 6": "missing_field",
        "line 7": "wrong_type",
    }


def test_orphans_skip_keeps_the_record(fixtures_dir):
    trajs, errors = run(fixtures_dir / "sharegpt/chats.jsonl.zst", orphans="skip")
    orphan = next(t for t in trajs if t.source.locator == "line 2")
    assert [(x.action, x.observation) for x in orphan.turns] == [('{"name": "weather", "arguments": {}}', "rain")]
    assert json.loads(orphan.meta)["orphan_tool_results"] == 1
    assert len(errors) == 5


def test_parse_function_call_forms():
    assert parse_function_call('{"name": "f", "arguments": {"a": 1}}', "m", "l") == [("f", {"a": 1})]
    assert parse_function_call([{"name": "f"}, {"name": "g", "arguments": "{}"}], "m", "l") == [
        ("f", None),
        ("g", "{}"),
    ]
    with pytest.raises(InvalidRecord) as err:
        parse_function_call("f(x)", "message 3", "line 9")
    assert (err.value.reason, err.value.locator) == ("malformed_tool_call", "line 9")


@pytest.mark.parametrize("name", ["glaive.json", "chats.jsonl.zst"])
def test_registry_sniffs_fixtures(fixtures_dir, name):
    assert registry.sniff(InputUnit(str(fixtures_dir / "sharegpt" / name))) == ("sharegpt", 0.9)


# ---------------------------------------------------------------- real data: LLaMA-Factory glaive demo


def test_real_glaive_sample_turns_and_chats_without_calls_are_filtered(shared_data):
    from schemas.stats import Stats
    from stages.normalize import normalize_unit

    stats = Stats()
    path = shared_data / "sharegpt-glaive" / "glaive_toolcall_en_demo_head30.json"
    items = list(normalize_unit(InputUnit(str(path)), ADAPTER, registry.resolve_opts(ADAPTER, {}), stats))
    assert [i.quarantine for i in items if i.quarantine] == []
    # Hand-counted: 15 of the 30 conversations have function_call/observation pairs (22 in all); 15 never call.
    assert stats.get("filtered.no_turns") == 15 and stats.get("records.quarantined") == 0
    trajs = [t for i in items for t in i.trajectories]
    assert len(trajs) == 15 and sum(len(t.turns) for t in trajs) == 22
    first = trajs[0]
    assert first.source.locator == "item 0"
    assert json.loads(first.turns[0].action) == {
        "name": "search_recipes", "arguments": {"ingredients": ["chicken", "bell peppers", "rice"]}
    }
    assert '"name": "Chicken and Bell Pepper Stir Fry"' in first.turns[0].observation
    assert json.loads(first.system.action_space)[0]["name"] == "search_recipes"
    assert [len(t.turns) for t in trajs if t.source.locator == "item 3"] == [3]
    assert registry.sniff(InputUnit(str(path)))[0] == "sharegpt"
