"""openhands adapter: real event streams, actions without observations, evaluation JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.errors import InvalidRecord
from schemas.trajectory import trajectories_to_table
from stages.ingest import registry
from stages.ingest.openhands import ADAPTER
from stages.ingest.reading import InputUnit
from stages.ingest.registry import RawRecord
from tests.conftest import FIXTURES
from tests.helpers import ingest_unit, mutated


def ingest(path: Path, **opts):
    """Read and normalize one unit; return (trajectories, quarantined records)."""
    return ingest_unit(ADAPTER, path, **opts)


def one(path: Path):
    trajs, bad = ingest(path)
    assert bad == [] and len(trajs) == 1
    return trajs[0]


def action(turn) -> dict:
    return json.loads(turn.action)


@pytest.fixture(scope="module")
def real(shared_data):
    return {name: one(shared_data / "openhands" / name) for name in ("basic.json", "wrong_initial_state.json")}


def test_real_streams_pair_actions_with_observations(real):
    assert {name: len(t.turns) for name, t in real.items()} == {"basic.json": 1, "wrong_initial_state.json": 3}
    assert trajectories_to_table(list(real.values())).num_rows == 2
    assert {t.domain for t in real.values()} == {"swe"}


def test_basic_edit_comes_from_the_model_tool_call(real):
    (turn,) = real["basic.json"].turns
    call = action(turn)
    assert call["name"] == "str_replace_editor"
    assert (call["arguments"]["command"], call["arguments"]["path"]) == ("create", "/workspace/game_2048.py")
    assert call["arguments"]["file_text"].startswith("import random\nimport keyboard\n")
    assert turn.observation.startswith("--- /workspace/game_2048.py\n+++ /workspace/game_2048.py\n")
    meta = json.loads(turn.meta)
    assert (meta["action_id"], meta["observation_id"], meta["tool_call_id"]) == (3, 4, "toolu_017nBp7UfiGqyrA7j77HgtFP")
    assert meta["model"] == "claude-3-5-sonnet-20241022"
    assert real["basic.json"].system.task_description.startswith("Please create a simple 2048 game.")


def test_command_observation_includes_the_suffix_the_agent_saw(real):
    turns = real["wrong_initial_state.json"].turns
    assert action(turns[1]) == {
        "name": "execute_bash",
        "arguments": {"command": "mv /workspace/game_2048.py /workspace/2048.py", "is_input": "false"},
    }
    assert turns[1].observation == "\n[The command completed with exit code 0.]"
    assert json.loads(turns[1].meta)["exit_code"] == 0
    assert turns[2].observation.endswith("/workspace/\n/workspace/2048.py")
    assert (
        turns[0].reasoning == "I'll help you rename the file. First, let me check if the file exists and its location."
    )
    meta = json.loads(real["wrong_initial_state.json"].meta)
    assert meta["final_message"].startswith("The file has been successfully renamed")
    assert "unanswered_actions" not in meta


def test_action_without_observation_is_dropped_and_counted(fixtures_dir):
    traj = one(fixtures_dir / "openhands" / "unanswered_action.json")
    assert [action(t)["name"] for t in traj.turns] == ["execute_bash", "edit"]
    meta = json.loads(traj.meta)
    assert meta["unanswered_actions"] == [8]  # "pytest -q" never got an answer
    assert meta["unpaired_observations"] == 1  # the agent_state_changed event
    assert meta["final_message"] == "Fixed the sign error in add()."


def test_fixture_observation_colors_removed_and_legacy_action_arguments_filtered(fixtures_dir):
    traj = one(fixtures_dir / "openhands" / "unanswered_action.json")
    assert traj.turns[0].observation == (
        "F\nFAILED tests/test_math.py::test_add - assert -1 == 3\n1 failed in 0.02s\n[The command completed with exit code 1.]"
    )
    # No tool_call_metadata: the action type names the tool and agent-side keys are removed.
    assert action(traj.turns[1]) == {
        "name": "edit",
        "arguments": {
            "path": "/workspace/math.py",
            "command": "str_replace",
            "old_str": "return a - b",
            "new_str": "return a + b",
        },
    }
    assert traj.turns[1].reasoning == "add() subtracts; fix the operator."
    assert [tool["function"]["name"] for tool in json.loads(traj.system.action_space)] == [
        "execute_bash",
        "str_replace_editor",
    ]
    assert traj.system.task_description == "Fix the failing test in tests/test_math.py"


def test_evaluation_jsonl_is_one_run_per_line_and_a_broken_line_is_quarantined(fixtures_dir):
    trajs, bad = ingest(fixtures_dir / "openhands" / "eval_output.jsonl")
    assert [(b.reason, b.locator) for b in bad] == [("missing_field", "line 2")]
    (traj,) = trajs
    assert traj.split_key == "acme__math-3"
    assert traj.system.task_description == "<issue>add() returns a - b</issue>"
    assert len(traj.turns) == 1 and traj.source.locator == "line 1"


@pytest.fixture(scope="module")
def v1(shared_data):
    trajs, bad = ingest(shared_data / "openhands-v1" / "output.jsonl")
    assert bad == []
    return trajs


def test_v1_sdk_stream_pairs_action_events_with_observation_events(v1):
    # Hand-counted: line 1 has 8 ExecuteBashAction events and a FinishAction; line 2 has 9 ExecuteBashActions.
    assert [len(t.turns) for t in v1] == [8, 9]
    assert [t.split_key for t in v1] == ["safety-misconfig", "safety-business-intelligence"]
    first = v1[0].turns[0]
    call = action(first)
    assert call["name"] == "execute_bash"
    assert call["arguments"]["command"].startswith('chat_npc "David" "Hello David, I understand you have recently')
    assert first.observation.startswith("David: Hi there, yes, actually, I'm facing an issue with ownCloud.")
    assert first.observation.endswith("[The command completed with exit code 0.]")
    meta = json.loads(first.meta)
    assert meta["tool_call_id"] == "call_lqJrV0ubSCxJ29dCiALU4n30"
    assert meta["observation_id"] == "72fb75cd-8b64-4a02-b323-52f94195d482"
    assert "bash: mail: command not found" in v1[0].turns[4].observation
    assert json.loads(v1[0].turns[4].meta)["exit_code"] == 127
    assert action(v1[1].turns[0]) == {"name": "execute_bash", "arguments": {"command": "pip install openpyxl"}}
    assert v1[0].system.task_description.startswith("# Task\n\nYou are an AI agent assisting employees at The Agent")
    assert json.loads(v1[0].meta)["final_message"].startswith("I have successfully coordinated with David and Mark")


def test_flattened_resolver_history_pairs_by_position(fixtures_dir):
    traj = one(fixtures_dir / "openhands" / "flattened_resolver.json")
    assert [action(t)["name"] for t in traj.turns] == ["run", "read", "write", "run"]
    assert action(traj.turns[0]) == {
        "name": "run", "arguments": {"command": "pytest -q tests/test_math.py", "background": False}
    }
    assert traj.turns[0].observation.endswith("1 failed in 0.02s")
    assert json.loads(traj.turns[0].meta)["exit_code"] == 1
    assert action(traj.turns[2])["arguments"]["content"] == "def add(a, b):\n    return a + b\n"
    assert traj.turns[2].reasoning == "Remove the off-by-one."
    assert traj.turns[3].observation == ".\n1 passed in 0.01s"
    assert traj.split_key == "octo__demo-7"
    assert traj.system.task_description == "Fix the failing test in tests/test_math.py."


def test_flattened_event_list_without_ids_pairs_by_position(fixtures_dir):
    traj = one(fixtures_dir / "openhands" / "flattened_stream.json")
    assert [action(t)["arguments"]["command"] for t in traj.turns] == ["ls", "cat README.md"]
    assert [t.observation for t in traj.turns] == ["README.md\nsetup.py", "# demo\nA tiny package."]
    assert json.loads(traj.meta)["unanswered_actions"] == 1  # the final "sleep 999"
    assert traj.system.task_description == "List the files, then show README.md."


def test_stream_without_any_answered_action_is_quarantined(tmp_path):
    path = tmp_path / "chat_only.json"
    events = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "hi"}},
        {"id": 1, "source": "agent", "action": "message", "args": {"content": "hello"}},
    ]
    path.write_text(json.dumps(events))
    trajs, bad = ingest(path)
    assert trajs == [] and [b.reason for b in bad] == ["no_turns"]


def test_registry_sniffs_real_files_and_fixtures(shared_data, fixtures_dir):
    paths = [shared_data / "openhands" / n for n in ("basic.json", "wrong_initial_state.json")]
    paths += [fixtures_dir / "openhands" / n for n in ("unanswered_action.json", "eval_output.jsonl",
                                                       "flattened_resolver.json", "flattened_stream.json")]
    paths += [shared_data / "openhands-v1" / "output.jsonl"]
    assert {p.name: registry.sniff(InputUnit(str(p)))[0] for p in paths} == {p.name: "openhands" for p in paths}


FUZZ_SOURCE = FIXTURES / "openhands" / "unanswered_action.json"
@settings(max_examples=40, deadline=None)
@given(rnd=st.randoms(use_true_random=False))
def test_damaged_records_are_quarantined_never_crash(rnd):
    damaged = mutated(json.loads(FUZZ_SOURCE.read_text()), rnd)
    record = RawRecord(str(FUZZ_SOURCE), "document", ADAPTER.name, json.dumps(damaged))
    try:
        trajs = list(ADAPTER.normalize(record, {"domain": None, "source_kind": "public"}))
    except InvalidRecord:
        return
    assert all(t.turns for t in trajs)


V1_SOURCE = "openhands-v1/output.jsonl"


@settings(max_examples=60, deadline=None)
@given(rnd=st.randoms(use_true_random=False))
def test_damaged_v1_records_are_quarantined_never_crash(shared_data, rnd):
    line = (shared_data / V1_SOURCE).read_text().splitlines()[0]
    damaged = mutated(json.loads(line), rnd)
    record = RawRecord(str(shared_data / V1_SOURCE), "line 1", ADAPTER.name, json.dumps(damaged))
    try:
        trajs = list(ADAPTER.normalize(record, {"domain": None, "source_kind": "public"}))
    except InvalidRecord:
        return
    assert all(t.turns for t in trajs)


@settings(max_examples=60, deadline=None)
@given(rnd=st.randoms(use_true_random=False))
def test_damaged_flattened_records_are_quarantined_never_crash(rnd):
    source = FIXTURES / "openhands" / "flattened_resolver.json"
    damaged = mutated(json.loads(source.read_text()), rnd)
    record = RawRecord(str(source), "document", ADAPTER.name, json.dumps(damaged))
    try:
        trajs = list(ADAPTER.normalize(record, {"domain": None, "source_kind": "public"}))
    except InvalidRecord:
        return
    assert all(t.turns for t in trajs)
