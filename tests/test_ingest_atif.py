"""atif: Harbor trajectory documents (Terminus-2 style, parallel tool calls, copied context, bad steps)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.errors import InvalidRecord
from schemas.trajectory import make_traj_id
from stages.ingest import registry
from stages.ingest.atif import ADAPTER, agent_step_turns, calls_action
from stages.ingest.reading import InputUnit
from stages.ingest.registry import RawRecord
from tests.helpers import ingest_unit, mutated


def run(path, **opts):
    """All trajectories and all quarantined records of one file, as the pipeline would see them."""
    return ingest_unit(ADAPTER, path, **opts)


@pytest.fixture(scope="module")
def terminus(fixtures_dir):
    (t,) = run(fixtures_dir / "atif/terminus.json")[0]
    return t


def test_keystroke_calls_sharing_one_screen_are_one_turn(terminus):
    assert len(terminus.turns) == 2
    first = terminus.turns[0]
    assert json.loads(first.action) == [
        {"keystrokes": "echo 'Hello, world!' > hello.txt\n", "duration": 0.1},
        {"keystrokes": "cat hello.txt\n", "duration": 0.1},
    ]
    assert first.observation.endswith("cat hello.txt\nHello, world!\nroot@box:/app# ")
    assert first.reasoning == "Two commands in one go.\n\nWrite the file and show it."
    assert terminus.turns[1].action == '[{"keystrokes": "wc -c hello.txt\\n", "duration": 0.1}]'
    assert terminus.turns[1].observation == "14 hello.txt\nroot@box:/app# "  # ANSI colors removed
    assert terminus.domain == "terminal"


def test_copied_context_becomes_context_not_turns(terminus):
    assert [(d.action, d.observation) for d in terminus.system.demonstrations] == [
        ('[{"keystrokes": "ls -la\\n", "duration": 0.1}]', "root@box:/app# ls -la\ntotal 0\nroot@box:/app# ")
    ]
    assert terminus.system.task_description == "Create hello.txt containing 'Hello, world!' in /app."
    meta = json.loads(terminus.meta)
    assert meta["user_messages"] == ["Context was summarized. Continue the task from where you left off."]
    assert meta["copied_context_steps"] == 3
    assert meta["unanswered_tool_calls"] == 1  # mark_task_complete has no result
    assert meta["system_prompt"].startswith("You are an AI assistant solving tasks in a Linux terminal.")
    assert meta["agent"] == {"name": "terminus-2", "version": "2.0.0", "model_name": "demo-model"}
    assert "final_answer" not in meta


def test_ids_and_split_key_of_a_continuation(terminus):
    assert terminus.traj_id == make_traj_id("atif", "run-77-cont-1")
    assert terminus.split_key == make_traj_id("atif", "run-77")


def test_parallel_calls_pair_by_source_call_id(fixtures_dir):
    (t,) = run(fixtures_dir / "atif/tool_calls.json")[0]
    assert [json.loads(x.action) for x in t.turns[:2]] == [
        {"name": "financial_search", "arguments": {"ticker": "GOOGL", "metric": "price"}},
        {"name": "financial_search", "arguments": {"ticker": "GOOGL", "metric": "volume"}},
    ]
    # Results came volume first; each still lands on its own call. The volume one is content parts (v1.6).
    assert [x.observation for x in t.turns[:2]] == ["GOOGL trades at $185.35.", "GOOGL volume: 1.5M shares."]
    assert [x.reasoning for x in t.turns[:2]] == [
        "Two independent lookups.\n\nI will query price and volume together.",
        None,
    ]
    # An action taken without the tool-calling format: the message is the action.
    assert (t.turns[2].action, t.turns[2].observation) == ("open_chart GOOGL 1d", "chart: 184.10 -> 185.35 (+0.7%)")
    assert json.loads(t.system.action_space)[0]["name"] == "financial_search"
    meta = json.loads(t.meta)
    assert meta["final_answer"] == "GOOGL is at $185.35 with 1.5M shares traded."
    assert meta["system_events"] == ["Context checkpoint created."]
    assert "system_prompt" not in meta
    assert t.split_key == t.traj_id == make_traj_id("atif", "025B810F-demo")


def test_bad_documents_get_reasons_and_locators(fixtures_dir):
    trajs, errors = run(fixtures_dir / "atif/runs.jsonl")
    assert [t.source.locator for t in trajs] == ["line 1"]
    assert {e.locator: e.reason for e in errors} == {
        "line 2": "orphan_tool_result",
        "line 3": "malformed_step",
        "line 4": "missing_field",
        "line 5": "malformed_tool_call",
        "line 6": "malformed_observation",
        "line 7": "wrong_type",
    }
    assert "'c7'" in next(e.detail for e in errors if e.locator == "line 2")


def test_orphans_skip(fixtures_dir):
    trajs, _ = run(fixtures_dir / "atif/runs.jsonl", orphans="skip")
    t = next(t for t in trajs if t.source.locator == "line 2")
    assert [x.observation for x in t.turns] == ["hi"]
    assert json.loads(t.meta)["orphan_tool_results"] == 1


def test_idless_results_pair_in_order_when_counts_match():
    step = {
        "source": "agent",
        "message": "",
        "tool_calls": [
            {"tool_call_id": "a", "function_name": "read", "arguments": '{"path": "x"}'},
            {"tool_call_id": "b", "function_name": "read", "arguments": {"path": "y"}},
        ],
        "observation": {"results": [{"content": "X"}, {"content": "Y"}]},
    }
    got = agent_step_turns(step, "step 1", "document", "quarantine")
    assert [(json.loads(t.action)["arguments"]["path"], t.observation) for t in got.turns] == [("x", "X"), ("y", "Y")]
    assert got.unanswered == 0


def test_calls_action_forms():
    one = [{"function_name": "f", "arguments": {"a": 1}}]
    assert calls_action(one) == '{"name": "f", "arguments": {"a": 1}}'
    two = [*one, {"function_name": "g", "arguments": {}}]
    assert json.loads(calls_action(two)) == [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]


@pytest.mark.parametrize("name", ["terminus.json", "tool_calls.json", "runs.jsonl", "separate_results.json"])
def test_registry_sniffs_fixtures(fixtures_dir, name):
    assert registry.sniff(InputUnit(str(fixtures_dir / "atif" / name))) == ("atif", 0.95)


# ---------------------------------------------------------------- dialects in the wild


def test_streaming_atif_jsonl_is_one_document_of_steps(shared_data):
    path = shared_data / "atif" / "session-2025-12-05T07-45-57-649Z-x8251x.atif.jsonl"
    records = list(ADAPTER.read(InputUnit(str(path)), registry.resolve_opts(ADAPTER, {})))
    (record,) = records  # 9 lines: a header and 8 steps
    doc = record.value()
    assert record.locator == "document" and "__header__" not in doc
    assert doc["session_id"] == "session-2025-12-05T07-45-57-649Z-x8251x"
    assert [s["step_id"] for s in doc["steps"]] == [1, 2, 3, 4, 5, 6, 7, 8]
    # Hand-read: the orchestrator's only agent step says "Decomposed task into 2 subtasks" and calls nothing;
    # the verification runs are system events. No (action, observation) pair: the record has no turns.
    with pytest.raises(InvalidRecord) as err:
        list(ADAPTER.normalize(record, registry.resolve_opts(ADAPTER, {})))
    assert err.value.reason == "no_turns"
    assert registry.sniff(InputUnit(str(path)))[0] == "atif"


@pytest.fixture(scope="module")
def chat_style(shared_data):
    trajs, errors = run(shared_data / "atif" / "sample-trajectories.json")
    assert errors == []
    return trajs


def test_chat_style_terminus_commands_in_the_message_and_output_in_the_next_user_step(chat_style):
    # Hand-counted: 4, 16, 20, 20 and 8 steps; each agent reply with commands answered by the next user step.
    assert [len(t.turns) for t in chat_style] == [1, 7, 9, 9, 3]
    last = chat_style[4]
    assert json.loads(last.turns[0].action) == [
        {"keystrokes": "ls -la\n", "duration": 0.1},
        {"keystrokes": "ls -la /output 2>/dev/null || mkdir -p /output\n", "duration": 0.1},
        {"keystrokes": "find . -name '*.log' -type f 2>/dev/null | head -5\n", "duration": 0.1},
    ]
    assert "./demo/subdir/c.log" in last.turns[0].observation
    assert last.turns[0].observation.startswith("New Terminal Output:\nroot@ddb22c0f")
    assert last.turns[0].reasoning.startswith("I'm currently in the /workspace directory as root. I need to recursively")
    assert "1762831275 ./demo/subdir/c.log" in last.turns[2].observation
    meta = json.loads(last.meta)
    assert "user_messages" not in meta  # the terminal screens are observations, not user messages
    assert meta["final_answer"].startswith("The user is asking me to confirm if I want to mark the task as complete.")
    # Terminus-2's first prompt, split by its template: the agent's instructions, the task, the first screen
    assert last.system.task_description.startswith("# Terminal Automation Request\n\n**TERMINAL ENVIRONMENT**")
    assert last.system.task_description.endswith("- build-essential (gcc, make)")
    assert last.system.initial_state == "Current Terminal Screen:\nroot@ddb22c0f-12c8-48a3-a188-531623b156a5:/workspace#"
    assert meta["system_prompt"].startswith("You are an AI assistant tasked with solving command-line tasks")
    assert meta["system_prompt"].endswith("- Commands array can be empty if you want to wait without taking action")
    assert all(t.system.initial_state.startswith("Current Terminal Screen:\nroot@") for t in chat_style)
    # The five documents share one session id; their ids differ by their place in the file.
    assert len({t.traj_id for t in chat_style}) == 5


def test_documents_of_one_batch_run_split_by_their_task_not_by_the_runs_session(chat_style):
    """An OpenThoughts-Agent export gives the five trajectories one session id (the batch run's) and each its task
    in ``extra.task`` (task_0, task_1000, task_1001, task_1004, task_1005): split by the session, a whole run of
    thousands of tasks fell into one pool whatever the ratios."""
    keys = [t.split_key for t in chat_style]
    assert keys == [make_traj_id("atif", f"task\x00{task}") for task in
                    ("task_0", "task_1000", "task_1001", "task_1004", "task_1005")]
    from stages.ingest.atif import _task_of

    assert _task_of({"task_id": 7}) == "7" and _task_of({"task": True}) is None and _task_of(None) is None


def test_registry_sniffs_every_real_atif_dialect(shared_data):
    names = ["session-2025-12-05T07-45-57-649Z-x8251x.atif.jsonl", "sample-trajectories.json", "login-trace.trajectory.json"]
    assert [registry.sniff(InputUnit(str(shared_data / "atif" / n)))[0] for n in names] == ["atif"] * 3


def test_computer_use_trace_with_in_step_results(shared_data):
    (t,) = run(shared_data / "atif" / "login-trace.trajectory.json")[0]
    assert [json.loads(x.action)["name"] for x in t.turns] == [
        "navigate", "waitFor", "assert", "assert", "screenshot", "done"
    ]
    assert t.turns[0].observation == "ok: navigate to /login"
    assert t.turns[5].observation == "verification_class=test_passed"


def test_results_in_a_separate_step_answer_the_calls_before_them(fixtures_dir):
    (t,) = run(fixtures_dir / "atif/separate_results.json")[0]
    assert [json.loads(x.action) for x in t.turns] == [
        {"name": "grep", "arguments": {"pattern": "import yaml", "path": "src/"}},
        {"name": "read_file", "arguments": {"path": "src/config.py"}},
        {"name": "read_file", "arguments": {"path": "src/loader.py"}},
    ]
    assert [x.observation for x in t.turns] == [
        "src/config.py:3:import yaml\nsrc/loader.py:1:import yaml",
        "import os\n\nimport yaml\n",
        "import yaml\n\ndef load(p): ...",
    ]
    meta = json.loads(t.meta)
    assert "system_events" not in meta and "user_messages" not in meta and "unanswered_tool_calls" not in meta
    assert meta["final_answer"] == "src/config.py and src/loader.py import yaml."


def test_a_large_streaming_atif_file_is_never_split_into_line_ranges(shared_data, fixtures_dir):
    from stages.ingest.ranges import file_ranges

    streaming = shared_data / "atif" / "session-2025-12-05T07-45-57-649Z-x8251x.atif.jsonl"
    size = streaming.stat().st_size
    assert len(file_ranges(InputUnit(str(streaming)), "atif", size, 1024)) == 1
    per_line = fixtures_dir / "atif" / "runs.jsonl"  # one document per line: may be split
    assert len(file_ranges(InputUnit(str(per_line)), "atif", per_line.stat().st_size, 1024)) > 1


@settings(max_examples=60, deadline=None)
@given(rnd=st.randoms(use_true_random=False), which=st.sampled_from(["chat", "separate"]))
def test_damaged_documents_of_the_new_dialects_are_quarantined_never_crash(rnd, which):
    from tests.conftest import FIXTURES, SHARED_DATA

    if which == "chat":
        if not (SHARED_DATA / "atif").is_dir():
            return
        doc = json.loads((SHARED_DATA / "atif" / "sample-trajectories.json").read_text())[4]
    else:
        doc = json.loads((FIXTURES / "atif" / "separate_results.json").read_text())
    record = RawRecord("mem://doc.json", "document", ADAPTER.name, json.dumps(mutated(doc, rnd)))
    try:
        trajs = list(ADAPTER.normalize(record, registry.resolve_opts(ADAPTER, {})))
    except InvalidRecord:
        return
    assert all(t.turns for t in trajs)
