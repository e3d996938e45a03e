"""swe-agent adapter: real SWE-agent trajectories, the three action syntaxes, command signatures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.errors import InvalidRecord
from schemas.trajectory import trajectories_to_table
from stages.ingest import registry
from stages.ingest.reading import InputUnit
from stages.ingest.registry import RawRecord
from stages.ingest.swe_agent import ADAPTER, parse_command, parse_commands_doc
from stages.ingest.swe_agent_tools import TOOLS, CommandParseError, parse_tool_command
from tests.conftest import FIXTURES
from tests.helpers import ingest_unit, mutated

REAL_TURNS = {
    "ctf_networking_1.traj": 4,
    "marshmallow-code__marshmallow-1867.default.traj": 14,
    "pydicom__pydicom-1458.traj": 12,
    "swe-agent__test-repo-i1.traj": 5,
}


def ingest(path: Path, **opts):
    """Read and normalize one unit; return (trajectories, quarantined records)."""
    return ingest_unit(ADAPTER, path, **opts)


def one(path: Path, **opts):
    trajs, bad = ingest(path, **opts)
    assert bad == [] and len(trajs) == 1
    return trajs[0]


def action(turn) -> dict:
    return json.loads(turn.action)


def action_text(demo) -> dict:
    return json.loads(demo.action)


@pytest.fixture(scope="module")
def real(shared_data):
    return {name: one(shared_data / "swe-agent" / name) for name in REAL_TURNS}


def test_every_real_file_normalizes_with_its_hand_counted_turns(real):
    assert {name: len(t.turns) for name, t in real.items()} == REAL_TURNS
    assert trajectories_to_table(list(real.values())).num_rows == 4
    assert {t.domain for t in real.values()} == {"swe"}


def test_ctf_demo_actions_observations_and_submission(real):
    ctf = real["ctf_networking_1.traj"]
    assert action(ctf.turns[0]) == {
        "name": "bash",
        "arguments": {"command": "tshark -n -r networking.pcap -q -z io,phs "},
    }
    assert "Protocol Hierarchy Statistics" in ctf.turns[0].observation
    # submit's signature is "submit '<flag>'": the quotes are shell quoting, the flag is the argument.
    assert action(ctf.turns[3]) == {"name": "submit", "arguments": {"flag": "flag{d316759c281bf925d600be698a4973d5}"}}
    assert ctf.turns[3].observation == ""
    assert json.loads(ctf.meta)["submission"] == "flag{d316759c281bf925d600be698a4973d5}"
    assert ctf.split_key == "ctf_networking_1"
    assert 'named "Networking 1"' in ctf.system.task_description
    assert "INSTRUCTIONS" not in ctf.system.task_description


def test_special_commands_are_parsed_by_their_documented_signatures(real):
    turns = real["marshmallow-code__marshmallow-1867.default.traj"].turns
    assert action(turns[1]) == {"name": "open", "arguments": {"path": "setup.py"}}
    assert action(turns[7]) == {"name": "find_file", "arguments": {"file_name": "fields.py", "dir": "src"}}
    assert action(turns[8]) == {
        "name": "open",
        "arguments": {"path": "src/marshmallow/fields.py", "line_number": "1474"},
    }
    edit = action(turns[4])
    assert edit["name"] == "edit" and (edit["arguments"]["start_line"], edit["arguments"]["end_line"]) == ("1", "1")
    assert edit["arguments"]["replacement_text"].startswith("from marshmallow.fields import TimeDelta\n")
    assert not edit["arguments"]["replacement_text"].endswith("end_of_edit")
    assert action(turns[13]) == {"name": "submit", "arguments": {}}


def test_observations_thoughts_and_state(real):
    turns = real["marshmallow-code__marshmallow-1867.default.traj"].turns
    assert turns[5].observation == "344\n" and turns[11].observation == "345\n"
    assert turns[13].observation.startswith("\ndiff --git a/src/marshmallow/fields.py")
    assert turns[0].reasoning.startswith("Let's list out some of the files")
    assert json.loads(turns[2].meta)["state"] == {
        "open_file": "/marshmallow-code__marshmallow/setup.py",
        "working_dir": "/marshmallow-code__marshmallow",
    }


def test_system_prompt_fields(real):
    traj = real["marshmallow-code__marshmallow-1867.default.traj"]
    assert traj.split_key == "marshmallow-code__marshmallow-1867"
    assert traj.system.task_description.endswith("fields.py#L1474")
    assert traj.system.action_space.startswith("COMMANDS:\nopen:")
    assert "signature: edit <start_line>:<end_line>" in traj.system.action_space
    assert "RESPONSE FORMAT" not in traj.system.action_space
    assert json.loads(real["pydicom__pydicom-1458.traj"].meta)["model_stats"]["api_calls"] == 12


def test_demonstration_transcript_splits_into_the_demonstrated_steps(real):
    # test-repo-i1 shows the marshmallow run as its demonstration: its pairs are that run's steps.
    demos = real["swe-agent__test-repo-i1.traj"].system.demonstrations
    source = real["marshmallow-code__marshmallow-1867.default.traj"].turns
    assert len(demos) == 13  # the final submit has no recorded output in the transcript
    assert [d.action for d in demos] == [t.action for t in source[:13]]
    assert [d.observation.strip() for d in demos[:12]] == [t.observation.strip() for t in source[:12]]
    assert demos[12].observation == "Your command ran successfully and did not produce any output."
    pydicom = real["pydicom__pydicom-1458.traj"]
    assert len(pydicom.system.demonstrations) == 10  # a shorter demo, starting at "create reproduce.py"
    assert action_text(pydicom.system.demonstrations[0]) == {
        "name": "create",
        "arguments": {"filename": "reproduce.py"},
    }


def test_terminal_domain_option_gives_keystroke_actions(shared_data):
    ctf = one(shared_data / "swe-agent" / "ctf_networking_1.traj", domain="terminal")
    assert ctf.domain == "terminal"
    assert action(ctf.turns[2]) == [{"keystrokes": 'tshark -r networking.pcap -Y "telnet" -T fields -e telnet.data\n'}]


def test_xml_dialects_fixture(fixtures_dir):
    traj = one(fixtures_dir / "swe-agent" / "xml_dialects.traj")
    syntaxes = [json.loads(t.meta)["syntax"] for t in traj.turns]
    assert syntaxes == ["xml", "xml", "xml", "xml_function", "xml", "xml"]
    assert action(traj.turns[0]) == {"name": "bash", "arguments": {"command": "ls -la"}}
    assert action(traj.turns[1]) == {"name": "open", "arguments": {"path": "calc.py", "line_number": "2"}}
    assert action(traj.turns[2])["arguments"]["replacement_text"] == "    return None if b == 0 else a / b"
    assert action(traj.turns[3]) == {
        "name": "str_replace_editor",
        "arguments": {"command": "view", "path": "/acme__calc/calc.py", "view_range": "[1, 2]"},
    }
    assert traj.turns[4].observation == "None\n"  # color codes removed
    assert traj.split_key == "acme__calc-12"
    assert traj.outcome is not None and traj.outcome.success is True
    assert traj.system.task_description.endswith("div() raises ZeroDivisionError instead of returning None")


def test_function_calling_fixture(fixtures_dir):
    traj = one(fixtures_dir / "swe-agent" / "function_calling.traj")
    assert [action(t)["name"] for t in traj.turns] == ["str_replace_editor", "bash", "str_replace_editor", "submit"]
    assert action(traj.turns[2])["arguments"]["new_str"] == "    return None if b == 0 else a / b"
    assert json.loads(traj.turns[1].meta)["tool_call_ids"] == ["toolu_02"]
    assert traj.turns[2].observation == "The file /testbed/calc.py has been edited.\nDownloading 100%\n"
    assert traj.system.task_description == "div() crashes when b is zero"
    assert [(action_text(d), d.observation) for d in traj.system.demonstrations] == [
        ({"name": "bash", "arguments": {"command": "ls"}}, "OBSERVATION:\nsetup.py\nsrc\n")
    ]
    assert traj.outcome is None  # a submission alone is no verdict
    assert traj.split_key == "function_calling"


DOC = """COMMANDS:
goto:
  docstring: moves the window to show <line_number>
  signature: goto <line_number>

decompile:
  docstring: Decompile a binary
  signature: decompile <binary_path> [--function_name <function_name>]

search_dir:
  docstring: searches for search_term in all files in dir
  signature: search_dir <search_term> [<dir>]
"""


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            "decompile ./chal --function_name main",
            {"name": "decompile", "arguments": {"binary_path": "./chal", "function_name": "main"}},
        ),
        ("decompile ./chal", {"name": "decompile", "arguments": {"binary_path": "./chal"}}),
        ('search_dir "def parse" src', {"name": "search_dir", "arguments": {"search_term": "def parse", "dir": "src"}}),
        ("goto 3\nls", {"name": "bash", "arguments": {"command": "goto 3\nls"}}),
        ("grep -rn goto .", {"name": "bash", "arguments": {"command": "grep -rn goto ."}}),
    ],
)
def test_parse_command_by_signature(command, expected):
    assert parse_command(command, parse_commands_doc(DOC)) == expected


def test_submit_force_flag_of_the_review_bundle():
    assert parse_command("submit -f", {}) == {"name": "submit", "arguments": {"force": True}}
    assert parse_command("submit --force", {}) == {"name": "submit", "arguments": {"force": True}}
    assert parse_command("submit", {}) == {"name": "submit", "arguments": {}}
    with pytest.raises(CommandParseError):
        parse_command("submit -x", {})


@pytest.mark.parametrize("command", ["goto 12 13", 'search_dir "unclosed', "goto"])
def test_command_that_does_not_fit_its_signature_is_an_error_not_a_guess(command):
    with pytest.raises(CommandParseError):
        parse_command(command, parse_commands_doc(DOC))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "malformed_json"),
        ('{"trajectory": "steps"}', "missing_field"),
        ('{"trajectory": [{"observation": "x"}]}', "missing_field"),
        ('{"trajectory": []}', "no_turns"),
        ('{"trajectory": [{"action": "ls", "observation": ""}], "history": ["text"]}', "wrong_type"),
    ],
)
def test_broken_files_are_quarantined_with_a_reason(tmp_path, content, reason):
    path = tmp_path / "broken.traj"
    path.write_text(content)
    trajs, bad = ingest(path)
    assert trajs == [] and [b.reason for b in bad] == [reason]


def test_registry_sniffs_real_files_and_fixtures_as_swe_agent(shared_data, fixtures_dir):
    paths = [shared_data / "swe-agent" / n for n in REAL_TURNS]
    paths += [fixtures_dir / "swe-agent" / n for n in ("xml_dialects.traj", "function_calling.traj",
                                                       "thought_action_1x.traj", "history_only_demo.traj")]
    assert {p.name: registry.sniff(InputUnit(str(p)))[0] for p in paths} == {p.name: "swe-agent" for p in paths}


FUZZ_SOURCE = FIXTURES / "swe-agent" / "function_calling.traj"
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


# ---------------------------------------------------------------- SWE-agent 1.x: declared signatures with options


def test_1x_options_are_parsed_by_the_declared_signature(fixtures_dir):
    traj = one(fixtures_dir / "swe-agent" / "thought_action_1x.traj")
    acts = [action(t) if t.action else None for t in traj.turns]
    assert acts[0] == {
        "name": "str_replace_editor",
        "arguments": {"command": "view", "path": "/testbed/calc.py", "view_range": [1, 4]},
    }
    assert acts[1] == {
        "name": "str_replace_editor",
        "arguments": {
            "command": "str_replace",
            "path": "/testbed/calc.py",
            "old_str": "    return a / b",
            "new_str": "    if b == 0:\n        return None\n    return a / b",
        },
    }
    assert acts[2]["arguments"] == {"command": "insert", "path": "/testbed/calc.py", "new_str": "import math",
                                    "insert_line": 0}
    assert acts[3]["arguments"]["file_text"] == "from calc import div\nprint(div(1, 0), 'it\\'s fine')\n"
    assert acts[4] == {"name": "bash", "arguments": {"command": "python /testbed/check.py"}}
    assert traj.turns[5].action == ""  # the model sent nothing: left empty for the empty-action filter
    assert acts[6] == {"name": "submit", "arguments": {}}


def test_empty_action_is_stripped_by_the_empty_action_filter(fixtures_dir):
    from schemas.stats import Stats
    from stages.filters import build_filters

    traj = one(fixtures_dir / "swe-agent" / "thought_action_1x.traj")
    stats = Stats()
    kept = traj
    for step in build_filters({"filter": {"enabled": ["empty_action"], "min_turns": 2}}):
        kept = step(kept, stats)
    assert len(kept.turns) == 6 and stats.get("turns_stripped.empty_action") == 1


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("str_replace_editor view /f.py --view_range ten 20", "needs integer values"),
        ("str_replace_editor insert /f.py --new_str x --insert_line two", "must be an integer"),
        ("str_replace_editor view /f.py --line 3", "unknown option --line"),
        ("str_replace_editor view", "missing required argument path"),
        ("str_replace_editor view /f.py extra", "unexpected argument"),
        ("str_replace_editor create /f.py --file_text 'open", "quotation"),
        ("str_replace_editor str_replace /f.py --old_str", "has no value"),
    ],
)
def test_a_command_line_outside_its_signature_is_quarantined(tmp_path, command, why):
    doc = json.loads((FIXTURES / "swe-agent" / "thought_action_1x.traj").read_text())
    doc["trajectory"][0]["action"] = command
    path = tmp_path / "bad.traj"
    path.write_text(json.dumps(doc))
    trajs, bad = ingest(path)
    assert trajs == [] and [b.reason for b in bad] == ["unparsable_command"]
    assert bad[0].detail.startswith("step 1: str_replace_editor") and why in bad[0].detail


def test_raw_command_text_has_one_key_name(real, fixtures_dir):
    trajs = list(real.values()) + [one(fixtures_dir / "swe-agent" / n) for n in ("thought_action_1x.traj",
                                                                            "xml_dialects.traj")]
    calls = [json.loads(t.action) for traj in trajs for t in traj.turns if t.action]
    calls = [c for call in calls for c in (call if isinstance(call, list) else [call])]
    shell = [c for c in calls if c["name"] == "bash"]
    assert shell and all(set(c["arguments"]) == {"command"} for c in shell)
    assert not any("args" in c["arguments"] for c in calls)  # no second key for text that was not parsed


def test_history_only_demonstration_becomes_turns(fixtures_dir):
    traj = one(fixtures_dir / "swe-agent" / "history_only_demo.traj")
    assert [action(t) for t in traj.turns] == [
        {"name": "str_replace_editor", "arguments": {"command": "view", "path": "/demo-repo"}},
        {"name": "str_replace_editor", "arguments": {"command": "str_replace", "path": "/demo-repo/src/missing_colon.py",
                                                     "old_str": "def division(a, b)", "new_str": "def division(a, b):"}},
        {"name": "submit", "arguments": {}},
    ]
    assert traj.turns[0].observation.endswith("/demo-repo/src/missing_colon.py")  # state lines removed
    assert traj.turns[1].reasoning == "Fix the missing colon."
    assert traj.system.task_description == "missing_colon.py fails with SyntaxError"
    meta = json.loads(traj.meta)
    assert meta["history_only"] is True and meta["unanswered_actions"] == 1
    assert registry.sniff(InputUnit(str(fixtures_dir / "swe-agent" / "history_only_demo.traj")))[0] == "swe-agent"


# The property: a call rendered the way SWE-agent renders it (each argument's format filled in
# signature order, strings shell-quoted, arrays joined with spaces, absent optionals left empty)
# parses back to exactly the arguments it was rendered from. The renderer below is written from
# SWE-agent's description of the format, independently of the parser under test.


def render_like_swe_agent(tool, arguments: dict) -> str:
    import shlex

    parts = [tool.name]
    for arg in tool.arguments:
        if arg.name not in arguments:
            parts.append("")  # an absent optional argument renders as nothing
            continue
        value = arguments[arg.name]
        if arg.type == "boolean":
            parts.append(arg.option)  # a flag: present means true
            continue
        if arg.type == "array":
            text = " ".join(str(v) for v in value)
        elif isinstance(value, str):
            text = shlex.quote(value)
        else:
            text = str(value)
        parts.append(f"{arg.option} {text}" if arg.option else text)
    return " ".join(parts)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)


@st.composite
def tool_calls(draw):
    tool = TOOLS[draw(st.sampled_from(sorted(TOOLS)))]
    arguments = {}
    for arg in tool.arguments:
        if not arg.required and not draw(st.booleans()):
            continue
        if arg.type == "boolean":
            arguments[arg.name] = True
        elif arg.type == "integer":
            arguments[arg.name] = draw(st.integers(-5, 10**6))
        elif arg.type == "array":
            arguments[arg.name] = draw(st.lists(st.integers(-1, 10**5), min_size=1, max_size=3))
        elif arg.option is None:
            # A positional word: the parser cannot tell a value spelled like an option from one.
            arguments[arg.name] = draw(_TEXT.filter(lambda t: not (t.startswith("-") and len(t) > 1)))
        else:
            arguments[arg.name] = draw(_TEXT)
    return tool, arguments


@settings(max_examples=400, deadline=None)
@given(call=tool_calls())
def test_rendered_calls_of_every_declared_signature_round_trip(call):
    tool, arguments = call
    line = render_like_swe_agent(tool, arguments)
    assert parse_tool_command(line, tool) == arguments
    assert parse_command(line, {}) == {"name": tool.name, "arguments": arguments}
