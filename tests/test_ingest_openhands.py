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
from tests.ingest_helpers import ingest_unit


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
    paths += [fixtures_dir / "openhands" / n for n in ("unanswered_action.json", "eval_output.jsonl")]
    assert {p.name: registry.sniff(InputUnit(str(p)))[0] for p in paths} == {p.name: "openhands" for p in paths}


FUZZ_SOURCE = FIXTURES / "openhands" / "unanswered_action.json"
JUNK = [None, 0, 2.5, True, "x", [], {}, ["a"], {"a": 1}, [[1]]]


def mutated(value, rnd):
    """`value` with random members replaced by values of the wrong type or removed."""
    if rnd.random() < 0.08:
        return rnd.choice(JUNK)
    if isinstance(value, dict):
        return {k: mutated(v, rnd) for k, v in value.items() if rnd.random() > 0.03}
    if isinstance(value, list):
        return [mutated(v, rnd) for v in value if rnd.random() > 0.03]
    return value


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
