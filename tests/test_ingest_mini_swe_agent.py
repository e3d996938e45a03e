"""mini-swe-agent adapter: the real GitHub-issue run and a fixture with the harness's corner cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.trajectory import trajectories_to_table
from stages.ingest import registry
from stages.ingest.mini_swe_agent import ADAPTER
from stages.ingest.reading import InputUnit
from tests.helpers import ingest_unit


def ingest(path: Path, **opts):
    """Read and normalize one unit; return (trajectories, quarantined records)."""
    return ingest_unit(ADAPTER, path, **opts)


def keys(turn) -> str:
    (step,) = json.loads(turn.action)
    assert set(step) == {"keystrokes"}
    return step["keystrokes"]


@pytest.fixture(scope="module")
def real(shared_data):
    trajs, bad = ingest(shared_data / "mini-swe-agent" / "github_issue.traj.json")
    assert bad == []
    return trajs[0]


def test_real_run_has_one_turn_per_assistant_command(real):
    assert len(real.turns) == 10  # 22 messages: system, task, then 10 command/answer pairs
    assert real.domain == "terminal"
    assert (
        keys(real.turns[0]) == "cat /Users/fuchur/Documents/24/git_sync/swe-agent-test-repo/tests/./missing_colon.py\n"
    )
    assert keys(real.turns[1]) == "ls -la\n"
    assert trajectories_to_table([real]).num_rows == 1


def test_real_observations_keep_the_returncode_wrapper(real):
    assert real.turns[0].observation.startswith("<returncode>1</returncode>\n<output>\ncat: ")
    assert "No such file or directory" in real.turns[0].observation
    assert json.loads(real.turns[0].meta) == {"returncode": 1}
    assert real.turns[6].observation == "<returncode>0</returncode>\n<output>\n8.2\n</output>"


def test_real_heredoc_command_and_final_submission(real):
    assert keys(real.turns[8]).startswith("cat > tests/missing_colon.py << 'EOF'\n#!/usr/bin/env python3\n")
    assert keys(real.turns[8]).endswith("\nEOF\n")
    assert real.turns[9].observation.startswith("diff --git a/tests/missing_colon.py b/tests/missing_colon.py")
    assert real.turns[9].meta is None  # the submission carries no return code


def test_real_task_description_and_reasoning(real):
    task = real.system.task_description
    assert task.startswith("Please solve this issue: GitHub Issue: SyntaxError: invalid syntax")
    assert "Recommended Workflow" not in task
    assert (
        real.turns[1].reasoning
        == "I need to find the correct path to the file. Let me check the current directory structure:"
    )
    assert real.split_key == "github_issue"


@pytest.fixture(scope="module")
def fixture_run(fixtures_dir):
    trajs, bad = ingest(fixtures_dir / "mini-swe-agent" / "acme__sizes-7.traj.json")
    assert bad == []
    return trajs[0]


def test_format_error_and_unanswered_action_are_counted_not_turned(fixture_run):
    assert [keys(t) for t in fixture_run.turns] == [
        'grep -rn "def parse_size" /testbed\n',
        "cd /testbed && pytest -q --color=yes\n",
        "sleep 100\n",
    ]
    meta = json.loads(fixture_run.meta)
    assert (meta["format_errors"], meta["unanswered_actions"]) == (1, 1)
    assert meta["exit_status"] == "Submitted" and meta["mini_version"] == "1.9.0"


def test_colored_output_is_cleaned_and_timeouts_are_observations(fixture_run):
    assert fixture_run.turns[1].observation == (
        "<returncode>1</returncode>\n<output>\nF..\n1 failed, 2 passed in 0.03s\n</output>"
    )
    assert fixture_run.turns[2].observation.startswith("The last command <command>sleep 100</command> timed out")


def test_pr_description_is_the_task_and_file_name_the_split_key(fixture_run):
    assert fixture_run.system.task_description == (
        "Consider the following PR description:\nparse_size('10k') returns 10 instead of 10240"
    )
    assert fixture_run.split_key == "acme__sizes-7"


@pytest.mark.parametrize(("content", "reason"), [("[1, 2]", "missing_field"), ('{"messages": "x"}', "missing_field")])
def test_broken_runs_are_quarantined(tmp_path, content, reason):
    path = tmp_path / "broken.traj.json"
    path.write_text(content)
    trajs, bad = ingest(path)
    assert trajs == [] and [b.reason for b in bad] == [reason]


def test_registry_sniffs_real_file_and_fixture(shared_data, fixtures_dir):
    for path in (
        shared_data / "mini-swe-agent" / "github_issue.traj.json",
        fixtures_dir / "mini-swe-agent" / "acme__sizes-7.traj.json",
    ):
        assert registry.sniff(InputUnit(str(path)))[0] == "mini-swe-agent"


# ---------------------------------------------------------------- mini-swe-agent 2, tool-calling models


@pytest.fixture(scope="module")
def toolcall_run(fixtures_dir):
    trajs, bad = ingest(fixtures_dir / "mini-swe-agent" / "acme__slug-2.traj.json")
    assert bad == []
    (traj,) = trajs
    return traj


def test_each_bash_tool_call_is_a_turn_answered_by_its_tool_message(toolcall_run):
    assert [keys(t) for t in toolcall_run.turns] == [
        "grep -rn 'def slugify' src\n",
        "sed -n 1,20p src/text.py\n",
        "ls tests\n",  # the second call of one response, answered before the first: paired by tool_call_id
        "sed -i 's/s.lower()/s.lower().replace(\" \", \"-\")/' src/text.py\n",
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff\n",
    ]
    observations = [t.observation for t in toolcall_run.turns]
    assert observations[1] == "<returncode>0</returncode>\n<output>\ndef slugify(s):\n    return s.lower()\n</output>"
    assert observations[2] == "<returncode>0</returncode>\n<output>\ntest_text.py\n</output>"
    assert observations[4] == "diff --git a/src/text.py b/src/text.py\n"  # the `exit` message that ends the run
    assert [t.reasoning for t in toolcall_run.turns] == [
        "Find the function first.", "Read it and the tests.", None, None, "Done; submit."]
    assert json.loads(toolcall_run.turns[0].meta) == {"returncode": 0}


def test_a_call_to_another_tool_is_a_format_error_not_a_turn(toolcall_run):
    meta = json.loads(toolcall_run.meta)
    assert meta["format_errors"] == 1
    assert "unanswered_actions" not in meta
    assert meta["mini_version"] == "2.1.0" and meta["exit_status"] == "Submitted"
    assert toolcall_run.split_key == "acme__slug-2"
    assert toolcall_run.system.task_description.endswith("slugify('Hello World') keeps the space")


def test_the_tool_calling_run_is_sniffed_and_kept_by_a_run(fixtures_dir, tmp_path):
    path = fixtures_dir / "mini-swe-agent" / "acme__slug-2.traj.json"
    assert registry.sniff(InputUnit(str(path)))[0] == "mini-swe-agent"
    from tests.helpers import lwm_in_process

    proc = lwm_in_process("validate", str(path), "--json")
    report = json.loads(proc.stdout)
    assert (report["trajectories"], report["turns"], report["quarantined"]) == (1, 5, 0)


def test_a_tool_call_left_without_an_answer_is_counted(tmp_path):
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}
    doc = {"trajectory_format": "mini-swe-agent-1.1", "messages": [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "assistant", "content": "", "tool_calls": [{**call, "id": "c2"}]},
        {"role": "tool", "tool_call_id": "c2", "content": "<returncode>0</returncode>\n<output>\na\n</output>"},
    ]}
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(doc))
    (traj,), bad = ingest(path)
    assert bad == [] and len(traj.turns) == 1
    assert json.loads(traj.meta)["unanswered_actions"] == 1
