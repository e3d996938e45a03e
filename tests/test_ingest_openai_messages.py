"""openai-messages: real MCP-Atlas CSV plus hand-written fixtures for each dialect corner."""

from __future__ import annotations

import json

import pytest

from schemas.errors import ConfigError, InvalidRecord
from stages.ingest import registry
from stages.ingest.openai_messages import ADAPTER, find_chat_path, resolve_path
from stages.ingest.reading import InputUnit
from stages.ingest.tool_calls import parse_arguments, tool_action
from tests.helpers import ingest_unit

ATLAS = "openai-messages/mcp-atlas/sample_tasks.csv"


def run(path, **opts):
    """All trajectories and all quarantined records of one file, as the pipeline would see them."""
    return ingest_unit(ADAPTER, path, **opts)


def by_task(trajs, task):
    return next(t for t in trajs if t.split_key == task)


@pytest.fixture(scope="module")
def atlas(shared_data):
    return run(shared_data / ATLAS)


# ---------------------------------------------------------------- real data: MCP-Atlas


def test_mcp_atlas_normalizes_every_row_without_quarantine(atlas):
    trajs, errors = atlas
    assert errors == []
    assert len(trajs) == 10
    # Tool calls counted by hand per row: 5 4 4 4 3 5 5 4 4 4.
    assert [len(t.turns) for t in trajs] == [5, 4, 4, 4, 3, 5, 5, 4, 4, 4]
    assert {t.domain for t in trajs} == {"mcp"}
    assert len({t.split_key for t in trajs}) == 10  # the TASK column
    assert len({t.traj_id for t in trajs}) == 10


def test_mcp_atlas_git_history_task(atlas):
    t = by_task(atlas[0], "688ba1b3e95696e72dd93e8a")
    assert t.system.task_description.startswith("I'm trying to piece together the history of my old local project")
    assert [json.loads(x.action)["name"] for x in t.turns] == [
        "desktop-commander_get_config",
        "desktop-commander_list_directory",
        "desktop-commander_list_directory",
        "git_git_log",
    ]
    assert t.turns[0].action == '{"name": "desktop-commander_get_config", "arguments": {}}'
    assert t.turns[1].action == '{"name": "desktop-commander_list_directory", "arguments": {"path": "/data"}}'
    assert t.turns[0].reasoning.startswith("To begin, I need to understand my environment")
    assert "[DIR] repos" in t.turns[1].observation
    assert "Commit: '0865ef487b8100848fcab25af80e60bffb4f42da'" in t.turns[3].observation
    assert "Date: 2024-04-03 15:39:04+02:00" in t.turns[3].observation
    tools = json.loads(t.system.action_space)
    assert len(tools) == 15 and tools[0] == "desktop-commander_get_config" and "git_git_log" in tools
    meta = json.loads(t.meta)
    assert "0865ef487b8100848fcab25af80e60bffb4f42da" in meta["fields"]["GTFA_CLAIMS"]
    assert t.source.locator == "row 2"


def test_mcp_atlas_text_parts_are_joined(atlas):
    # Row 5's geocode result has two text parts, one place each.
    t = by_task(atlas[0], "688fb11183792b921381bd14")
    obs = t.turns[1].observation
    assert json.loads(t.turns[1].action)["arguments"] == {"address": "Eiffel Tower"}
    assert obs.count('"place_id"') == 2
    assert obs.index("88179373") < obs.index("347889171")
    assert "}\n{" in obs


# ---------------------------------------------------------------- fixtures: dialect corners


def test_parallel_calls_pair_by_id_and_keep_call_order(fixtures_dir):
    trajs, errors = run(fixtures_dir / "openai-messages/tool_calls.jsonl")
    assert errors == []
    t = trajs[0]
    assert [x.action for x in t.turns] == [
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}',
        '{"name": "get_time", "arguments": "{city: Oslo"}',  # not JSON: kept as the raw string
    ]
    assert [x.observation for x in t.turns] == [
        "Paris: 18C, sunny",
        "Oslo: 4C, snow\nwind 20 km/h",
        "error: arguments are not valid JSON",
    ]
    assert [x.reasoning for x in t.turns] == ["I will look up both cities at once.", None, None]
    assert json.loads(t.turns[1].meta) == {"tool_call_id": "call_b"}
    assert t.system.task_description == "What is the weather and the time in Paris and Oslo?"
    assert [x["function"]["name"] for x in json.loads(t.system.action_space)] == ["get_weather", "get_time"]
    meta = json.loads(t.meta)
    assert meta["system_prompt"] == "You are a travel assistant. Use the tools."
    assert meta["final_answer"] == "Paris is sunny at 18C; Oslo has snow at 4C."
    assert t.system.simulation_instruction is None


def test_legacy_function_call_dialect(fixtures_dir):
    t = run(fixtures_dir / "openai-messages/tool_calls.jsonl")[0][1]
    assert [json.loads(x.action)["arguments"]["to"] for x in t.turns] == ["USD", "JPY"]
    assert [x.observation for x in t.turns] == ["10.85", "1598"]
    assert t.turns[1].reasoning == "Now to JPY."
    assert t.system.action_space == ""
    assert json.loads(t.meta)["user_messages"] == ["Thanks!"]


def test_orphan_result_is_quarantined_unless_skipped(fixtures_dir):
    trajs, errors = run(fixtures_dir / "openai-messages/orphan.jsonl")
    assert trajs == []
    assert [(e.reason, e.locator) for e in errors] == [("orphan_tool_result", "line 1")]
    assert "'c9'" in errors[0].detail
    trajs, errors = run(fixtures_dir / "openai-messages/orphan.jsonl", orphans="skip")
    assert errors == []
    (t,) = trajs
    assert [x.observation for x in t.turns] == ["a.txt\nb.txt"]
    meta = json.loads(t.meta)
    assert meta["orphan_tool_results"] == 1
    assert meta["unanswered_tool_calls"] == 1  # the last call never got its result


def test_json_list_of_runs_with_traj_field(fixtures_dir):
    trajs, errors = run(fixtures_dir / "openai-messages/runs.json")
    assert errors == []
    assert [t.source.locator for t in trajs] == ["item 0", "item 1"]
    assert [len(t.turns) for t in trajs] == [1, 2]
    assert {t.split_key for t in trajs} == {"task-42"}  # two runs of one task stay in one pool
    assert trajs[0].traj_id != trajs[1].traj_id
    assert trajs[1].turns[1].observation == "Lima has about 10 million inhabitants."


def test_messages_path_reaches_nested_conversation(fixtures_dir):
    path = fixtures_dir / "openai-messages/nested.json"
    trajs, errors = run(path)
    assert trajs == []
    assert errors[0].reason == "missing_field"
    assert "answer_generation.train_messages.0" in errors[0].detail  # the hint names where a chat was found
    (t,) = run(path, messages_path="answer_generation.train_messages.-1")[0]
    assert t.system.task_description == "How many stars does the repo have?"
    assert [json.loads(x.observation)["stars"] for x in t.turns] == [1234, 9]
    assert json.loads(t.meta)["fields"] == {"question_id": "q-7"}
    (draft_error,) = run(path, messages_path="answer_generation.train_messages.0")[1]
    assert draft_error.reason == "no_turns"


def test_gzip_json_document_is_one_conversation(fixtures_dir):
    (t,) = run(fixtures_dir / "openai-messages/single_chat.json.gz")[0]
    assert t.source.locator == "document"
    assert t.turns[0].observation == "On branch main\nmodified:   app.py"  # ANSI colors removed
    assert t.turns[1].action == '{"name": "git_diff", "arguments": {"path": "app.py"}}'
    assert json.loads(t.meta)["system_prompt"] == "You run shell tools."


def test_csv_with_prompt_tools_and_task_columns(fixtures_dir):
    trajs, errors = run(fixtures_dir / "openai-messages/tasks.csv")
    assert errors == []
    assert [t.split_key for t in trajs] == ["task-A", "task-B"]
    assert trajs[1].system.task_description == "What is near the Colosseum, Rome?"
    assert trajs[0].system.action_space == '["osm_geocode", "osm_nearby"]'
    assert trajs[1].turns[0].observation == "41.8902, 12.4922"
    assert trajs[0].turns[0].reasoning == "Geocoding Louvre, Paris."


def test_bad_records_get_reasons_and_locators(fixtures_dir):
    trajs, errors = run(fixtures_dir / "openai-messages/bad.jsonl")
    assert len(trajs) == 1
    assert {e.locator: e.reason for e in errors} == {
        "line 2": "missing_field",
        "line 3": "wrong_type",
        "line 4": "malformed_tool_call",
        "line 5": "malformed_message",
        "line 6": "malformed_json",
        "line 7": "no_turns",
    }


def test_domain_option_overrides_default(fixtures_dir):
    trajs, _ = run(fixtures_dir / "openai-messages/runs.json", domain="search")
    assert {t.domain for t in trajs} == {"search"}


def test_bad_orphans_value_is_a_config_error(fixtures_dir):
    with pytest.raises(ConfigError):
        run(fixtures_dir / "openai-messages/orphan.jsonl", orphans="keep")


# ---------------------------------------------------------------- helpers and sniffing


def test_arguments_parsing():
    assert parse_arguments('{"a": [1, 2]}') == {"a": [1, 2]}
    assert parse_arguments("{a: 1") == "{a: 1"
    assert parse_arguments(None) == {}
    assert parse_arguments("") == parse_arguments("  ") == {}  # no arguments, as some servers send them
    assert tool_action("f", {"x": "é"}) == '{"name": "f", "arguments": {"x": "é"}}'


def test_paths():
    doc = {"a": {"b": [[{"role": "user", "content": "x"}]]}, "trajectory": [{"action": "ls"}]}
    assert find_chat_path(doc) == "a.b.0"
    assert resolve_path(doc, "a.b.-1.0.content", "line 1") == "x"
    with pytest.raises(InvalidRecord, match="no list item '5'"):
        resolve_path(doc, "a.b.5", "line 1")
    assert find_chat_path({"trajectory": [{"action": "ls", "observation": "a"}]}) is None


@pytest.mark.parametrize(
    "name",
    ["tool_calls.jsonl", "orphan.jsonl", "runs.json", "nested.json", "single_chat.json.gz", "tasks.csv", "bad.jsonl"],
)
def test_registry_sniffs_fixtures(fixtures_dir, name):
    assert registry.sniff(InputUnit(str(fixtures_dir / "openai-messages" / name)))[0] == "openai-messages"


def test_registry_sniffs_mcp_atlas(shared_data):
    assert registry.sniff(InputUnit(str(shared_data / ATLAS))) == ("openai-messages", 0.9)


# ---------------------------------------------------------------- real data: LLaMA-Factory typed parts

TYPED = "openai-messages-typed/reason_tool_use_demo_head8.jsonl"


def test_typed_parts_rows_become_turns_and_chats_without_results_are_filtered(shared_data):
    from schemas.stats import Stats
    from stages.normalize import normalize_unit

    stats = Stats()
    opts = registry.resolve_opts(ADAPTER, {})
    items = list(normalize_unit(InputUnit(str(shared_data / TYPED)), ADAPTER, opts, stats))
    assert [i.quarantine for i in items] == [None] * 8
    # Hand-read: lines 1, 4 and 6 answer in text without calling a tool; line 8 calls two tools and gets no result.
    assert stats.get("filtered.no_turns") == 4 and stats.get("records.quarantined") == 0
    trajs = {t.source.locator: t for i in items for t in i.trajectories}
    assert {loc: len(t.turns) for loc, t in trajs.items()} == {"line 2": 2, "line 3": 5, "line 5": 1, "line 7": 2}
    movie = trajs["line 2"]
    assert json.loads(movie.turns[0].action) == {"name": "get_movie_details", "arguments": {"title": "Inception"}}
    assert '"director": "Christopher Nolan", "release_year": 2010' in movie.turns[0].observation
    assert movie.turns[0].reasoning.startswith("Alright, the user wants information about the movie \"Inception\".")
    assert movie.system.task_description == 'Can you tell me about the movie "Inception"?'
    assert json.loads(movie.system.action_space)[0]["function"]["name"] == "get_movie_details"  # tools was a string


def test_one_tool_reply_with_a_result_list_answers_the_parallel_calls_in_order(shared_data):
    trajs, _ = run(shared_data / TYPED)
    circles = next(t for t in trajs if t.source.locator == "line 3")
    radii = [json.loads(t.action)["arguments"]["radius"] for t in circles.turns]
    assert radii == [1.5, 3, 2.5, 4, 5.5]
    assert circles.turns[1].observation == "{'area': 28.2743, 'radius': 3, 'unit':'square meters'}"
    assert circles.turns[4].observation.startswith("{'area': 95.0332, 'radius': 5.5")
    backup = next(t for t in trajs if t.source.locator == "line 7")
    assert json.loads(backup.turns[1].action)["name"] == "initiate_recovery_process"
    assert json.loads(backup.turns[0].observation)["message"].startswith("Daily backup automation has been")


def test_a_reply_naming_its_one_call_is_unwrapped_as_replies_for_several_are(shared_data):
    """Line 5's one call gets ``[{"name": "move_files", "content": {...}}]``, the shape line 7's two calls get: the
    observation is the content, as there, not the wrapper."""
    trajs, _ = run(shared_data / TYPED)
    move = next(t for t in trajs if t.source.locator == "line 5")
    (turn,) = move.turns
    assert json.loads(turn.action)["name"] == "move_files"
    result = json.loads(turn.observation)
    assert result["status"] == "success" and result["file_names"] == ["photo1.jpg", "photo2.jpg", "photo3.jpg"]


def test_a_list_a_tool_returns_for_one_call_is_kept_as_it_is(tmp_path):
    calls = [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]
    for reply in ('[{"name": "other", "content": "x"}]', '[{"title": "A", "content": "x"}]', '["a"]'):
        path = tmp_path / "one.jsonl"
        path.write_text(json.dumps({"messages": [{"role": "user", "content": "find"},
                                                 {"role": "assistant", "content": None, "tool_calls": calls},
                                                 {"role": "tool", "content": reply}]}) + "\n")
        (traj,), bad = run(path)
        assert bad == [] and traj.turns[0].observation == reply


def test_results_without_ids_are_paired_by_the_name_they_give(tmp_path):
    """Two parallel calls answered in the other order, each result naming its tool and carrying no id."""
    calls = [{"id": None, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
             {"id": None, "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "JST"}'}}]
    path = tmp_path / "noid.jsonl"
    path.write_text(json.dumps({"messages": [
        {"role": "user", "content": "weather and time?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "name": "get_time", "content": "14:00 JST"},
        {"role": "tool", "name": "get_weather", "content": "18C sunny"},
    ]}) + "\n")
    (traj,), bad = run(path)
    assert bad == []
    assert [(json.loads(t.action)["name"], t.observation) for t in traj.turns] == [
        ("get_weather", "18C sunny"), ("get_time", "14:00 JST")]


def test_registry_sniffs_typed_parts(shared_data):
    assert registry.sniff(InputUnit(str(shared_data / TYPED)))[0] == "openai-messages"


def test_a_content_part_whose_type_is_not_a_string_is_read_as_data_not_an_adapter_crash(tmp_path):
    """A part ``{"type": [], "value": …}`` once raised TypeError (a list cannot be looked up in a set of names)."""
    path = tmp_path / "odd.jsonl"
    odd = [{"type": [], "value": "v"}, {"type": {"a": 1}, "value": "v"}]
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": [part]},
                                                     {"role": "assistant", "content": "x"}]}) + "\n" for part in odd))
    trajs, errors = ingest_unit(ADAPTER, path)
    assert trajs == [] and [e.reason for e in errors] == ["no_turns", "no_turns"]


@pytest.mark.parametrize(("cell", "detail"), [
    ('[{"name": "x\x01"}]', "tools: Invalid control character at column 13"),  # json's message ends in "at"
    ('[{"name" "x"}]', "tools: Expecting ':' delimiter at column 10"),
])
def test_a_json_cell_that_does_not_parse_names_its_column_once(cell, detail):
    from stages.ingest.tool_calls import decoded_field

    with pytest.raises(InvalidRecord) as err:
        decoded_field(cell, "tools", "row 1")
    assert err.value.reason == "malformed_json"
    assert err.value.detail == detail
