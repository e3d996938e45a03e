"""SPEC §6 filters: hand-made trajectories per filter, real samples with hand counts, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.config import DEFAULTS
from schemas.errors import ConfigError, InvalidRecord
from schemas.stats import Stats
from schemas.trajectory import Source, SystemPrompt, Trajectory, Turn
from stages import filters
from stages.filters import FILTER_ORDER, build_filters, declared_tools
from stages.ingest import registry
from stages.ingest.reading import expand_inputs
from stages.steps import apply_steps
from tests.helpers import lwm_in_process

WEB_PAGE = '[ 0] | "Northwind Market"\n[ 1] | input | "Search"\n[ 2] | "Cart (0)"'
RESULTS = '[ 0] | "Northwind Market"\n[ 3] | "Espresso grinder — 4.6 stars"\n[ 4] | "Add to cart"'


def make(domain: str, steps: list[tuple[str, str]], action_space: str = "", initial_state: str | None = None):
    return Trajectory(
        traj_id="t1",
        domain=domain,
        split_key="k1",
        source=Source(format="test"),
        system=SystemPrompt(task_description="do it", action_space=action_space, initial_state=initial_state),
        turns=[Turn(action=a, observation=o) for a, o in steps],
    )


def call(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def bash(command: str) -> str:
    return call("bash", command=command)


def run_one(name: str, traj: Trajectory, **section) -> tuple[Trajectory | None, dict[str, float]]:
    """One filter over one trajectory: what it returns and the counters it added."""
    (step,) = build_filters({"filter": {"enabled": [name], **section}})
    stats = Stats()
    return step(traj, stats), stats.to_dict()


# ---------------------------------------------------------------- build_filters


def test_default_config_builds_all_six_in_spec_order():
    names = [step.name for step in build_filters(DEFAULTS)]
    assert names == ["empty_action", "retry_cycle", "gui_no_change", "undeclared_tools", "gui_env_failure", "min_turns"]
    assert tuple(names) == FILTER_ORDER


def test_enabled_order_does_not_change_run_order():
    steps = build_filters({"filter": {"enabled": ["min_turns", "empty_action"], "min_turns": 2}})
    assert [s.name for s in steps] == ["empty_action", "min_turns"]
    assert build_filters({"filter": {"enabled": [], "min_turns": 2}}) == []


def test_unknown_filter_names_are_a_config_error_naming_them():
    with pytest.raises(ConfigError, match="gui_no_chnage, nope"):
        build_filters({"filter": {"enabled": ["min_turns", "nope", "gui_no_chnage"], "min_turns": 2}})


@pytest.mark.parametrize(
    "section", [{"min_turns": -1}, {"min_turns": "2"}, {"min_turns": True}, {"enabled": "min_turns"}]
)
def test_bad_filter_settings_are_config_errors(section):
    with pytest.raises(ConfigError):
        build_filters({"filter": section})


# ---------------------------------------------------------------- empty_action


def test_empty_actions_are_stripped_and_counted():
    traj = make(
        "terminal",
        [
            ('[{"keystrokes": "ls\\n"}]', "a b"),
            ("   ", "a b"),
            ("{}", "x"),
            ("[]", "y"),
            ("null", "z"),
            ('[{"keystrokes": ""}]', "still running"),  # a wait: not empty
            ('""', "q"),
        ],
    )
    out, counts = run_one("empty_action", traj)
    assert [t.observation for t in out.turns] == ["a b", "still running"]
    assert counts == {"turns_stripped.empty_action": 5}
    assert len(traj.turns) == 7  # the input is not mutated


def test_a_trajectory_with_only_empty_actions_is_dropped_with_the_reason():
    out, counts = run_one("empty_action", make("mcp", [("", "a"), ("{}", "b")]))
    assert out is None
    assert counts == {"filtered.empty_action": 1, "turns_stripped.empty_action": 2}


# ---------------------------------------------------------------- retry_cycle


def test_swe_agent_rejected_edits_before_the_accepted_one_are_stripped():
    syntax = "Your proposed edit has introduced new syntax error(s). Please understand the fixes and retry."
    traj = make(
        "swe",
        [
            (call("open", path="a.py"), "[File: a.py (3 lines total)]"),
            (call("edit", start_line="1", end_line="1", replacement_text="x ="), syntax),
            (call("edit", start_line="1", end_line="1", replacement_text="x = (]"), syntax),
            (
                call("edit", start_line="1", end_line="1", replacement_text="x = 1"),
                "[File: a.py (3 lines total)]\n1:x = 1",
            ),
            (call("submit"), "diff --git a/a.py b/a.py"),
        ],
    )
    out, counts = run_one("retry_cycle", traj)
    assert [t.action for t in out.turns] == [traj.turns[i].action for i in (0, 3, 4)]
    assert counts == {"turns_stripped.retry_cycle": 2}


def test_a_crash_is_real_behaviour_and_kept_whatever_comes_next():
    crash = 'Traceback (most recent call last):\n  File "repro.py", line 3\nZeroDivisionError: division by zero'
    traj = make(
        "swe",
        [
            (bash("cd /testbed && python repro.py"), crash),
            (bash("cd /testbed && python -m pytest -q"), "F. [100%]"),
            (bash("python repro.py --fixed"), "ok"),
        ],
    )
    assert filters.retry_cycle_marks(traj) == [False, False, False]
    # run again after the crash: still no garbage action (the program ran; its crash is what the environment
    # does, and a world model must predict it), so nothing is stripped (SPEC §6: garbage action → error → retry)
    rerun = make("swe", [(bash("python repro.py"), crash), (bash("python repro.py --verbose"), "ok")])
    assert filters.retry_cycle_marks(rerun) == [False, False]
    # the same for a tool whose error is a refusal of the call itself
    refused = make("swe", [(bash("python repro.py"), "bash: python: command not found"), (bash("python3 repro.py"), "ok")])
    assert filters.retry_cycle_marks(refused) == [True, False]


def test_command_not_found_is_garbage_whatever_comes_next_but_the_last_turn_stays():
    nf = "bash: pyhton: command not found\nroot@box:/app# "
    traj = make(
        "terminal",
        [
            ('[{"keystrokes": "pyhton --version\\n"}]', nf),
            ('[{"keystrokes": "ls\\n"}]', "README.md  src\nroot@box:/app# "),
            ('[{"keystrokes": "pyhton -V\\n"}]', nf),
        ],
    )
    assert filters.retry_cycle_marks(traj) == [True, False, False]


def test_gui_invalid_action_is_stripped_and_a_json_error_needs_the_same_tool():
    web = make(
        "web",
        [
            (
                '{"action": "invalid", "text": "Press [15]"}',
                "The action you have chosen cannot be exectued. Please ...",
            ),
            ('{"action": "click", "element": 3}', RESULTS),
        ],
        initial_state=WEB_PAGE,
    )
    assert filters.retry_cycle_marks(web) == [True, False]
    err = '{"error": "Invalid arguments: limit must be an integer"}'
    same = make("mcp", [(call("search", limit="x"), err), (call("search", limit=3), '{"results": []}')])
    other = make("mcp", [(call("search", limit="x"), err), (call("fetch", url="u"), "<html>")])
    answered = make("mcp", [(call("search"), '{"error": null, "result": [1]}'), (call("search"), "[2]")])
    assert filters.retry_cycle_marks(same) == [True, False]
    assert filters.retry_cycle_marks(other) == [False, False]
    assert filters.retry_cycle_marks(answered) == [False, False]


def test_retry_whose_state_comes_back_unchanged_strips_the_failed_turn():
    traj = make(
        "os",
        [
            ('{"action": "click", "x": 5, "y": 5}', WEB_PAGE),
            ('{"action": "hotkey", "keys": ["ctrl", "q"]}', "Invalid action: unknown hotkey ctrl+q"),
            ('{"action": "scroll", "direction": "down"}', WEB_PAGE),
        ],
    )
    assert filters.retry_cycle_marks(traj) == [False, True, False]


# ---------------------------------------------------------------- gui_no_change


def test_gui_turns_that_change_nothing_are_stripped_but_the_final_answer_stays():
    traj = make(
        "web",
        [
            ('{"action": "scroll", "direction": "up"}', WEB_PAGE + "\n"),  # equals initial_state
            ('{"action": "type", "element": 1, "text": "grinder"}', RESULTS),
            ('{"action": "wait"}', RESULTS),
            ('{"action": "click", "element": 4}', RESULTS.replace("Add to cart", "Added")),
            ('{"action": "answer", "text": "4.6 stars"}', RESULTS.replace("Add to cart", "Added")),
        ],
        initial_state=WEB_PAGE,
    )
    out, counts = run_one("gui_no_change", traj)
    assert [json.loads(t.action)["action"] for t in out.turns] == ["type", "click", "answer"]
    assert counts == {"turns_stripped.gui_no_change": 2}


def test_no_change_ignores_non_gui_domains_and_a_missing_initial_state():
    same = [('{"name": "status"}', "ok"), ('{"name": "status"}', "ok")]
    assert filters.gui_no_change_marks(make("mcp", same)) == [False, False]
    assert filters.gui_no_change_marks(make("android", same)) == [False, True]


# ---------------------------------------------------------------- undeclared_tools

SWE_COMMANDS = """COMMANDS:
open:
  docstring: opens the file at the given path
  signature: open <path> [<line_number>]

edit:
  docstring: replaces lines <start_line> through <end_line>
  signature: edit <start_line>:<end_line>

Please note that THE EDIT COMMAND REQUIRES PROPER INDENTATION.
Note:
  signing: not a command, the indented line is no docstring
"""


@pytest.mark.parametrize(
    ("action_space", "names"),
    [
        ('[{"type": "function", "function": {"name": "execute_bash"}}, {"name": "think"}]', {"execute_bash", "think"}),
        ('["wikipedia_search", "osm_geocode"]', {"wikipedia_search", "osm_geocode"}),
        ('{"tools": [{"name": "read_file"}]}', {"read_file"}),
        (SWE_COMMANDS, {"open", "edit"}),
        ("- read_file\n- write_file\n", {"read_file", "write_file"}),
        ("You can read files and search the web.", None),
        ("tool(path, text)", None),
        ("", None),
        ("[]", None),
    ],
)
def test_declared_tool_names_are_read_from_each_action_space_shape(action_space, names):
    assert declared_tools(action_space) == (frozenset(names) if names is not None else None)


def test_undeclared_tool_drops_mcp_but_shell_is_implicit_only_for_swe():
    space = '["read_file", "write_file"]'
    ok = make(
        "mcp", [(call("read_file", path="a"), "x"), ('[{"name": "write_file"}, {"name": "read_file"}]', "y")], space
    )
    assert run_one("undeclared_tools", ok) == (ok, {})
    bad = make("mcp", [(call("read_file", path="a"), "x"), ('[{"name": "read_file"}, {"name": "rm"}]', "y")], space)
    out, counts = run_one("undeclared_tools", bad)
    assert out is None and counts == {"filtered.undeclared_tools": 1}
    shell = [(call("open", path="a.py"), "[File]"), (bash("ls"), "a.py")]
    assert run_one("undeclared_tools", make("swe", shell, SWE_COMMANDS))[0] is not None
    assert run_one("undeclared_tools", make("mcp", shell, '["open"]'))[0] is None
    swe_bad = make("swe", [(call("str_replace_editor", command="view"), "x")], SWE_COMMANDS)
    assert run_one("undeclared_tools", swe_bad)[0] is None


def test_no_declaration_is_kept_and_counted_and_other_domains_are_not_judged():
    traj = make("swe", [(call("str_replace_editor", command="view"), "x")], "You are a helpful assistant.")
    out, counts = run_one("undeclared_tools", traj)
    assert out is traj and counts == {"filter_skipped.undeclared_tools_no_declaration": 1}
    web = make("web", [('{"action": "click", "element": 1}', "x")], '["type"]')
    assert run_one("undeclared_tools", web) == (web, {})


# ---------------------------------------------------------------- gui_env_failure


@pytest.mark.parametrize(
    ("observation", "reason"),
    [
        ('[ 0] | "reCAPTCHA"\n[ 1] | checkbox | "I\'m not a robot"', "captcha"),
        ("Please verify you are human before continuing.", "captcha"),
        ("Our systems have detected unusual traffic from your computer network.", "captcha"),
        ('[ 0] | heading | "404 Not Found"\n[ 1] | "nginx"', "http_error"),
        ("502 Bad Gateway", "http_error"),
        ("HTTP Error 503 - Service Unavailable", "http_error"),
        ("This site can’t be reached\nexample.test refused to connect.\nERR_CONNECTION_REFUSED", "http_error"),
        ("Hmm. We’re having trouble finding that site.", "http_error"),
        ("[missing state]", "missing_state"),
        ("null", "missing_state"),
        ("Observation: A screenshot and some texts. (Omitted in context.)", "missing_state"),
    ],
)
def test_env_failure_markers(observation, reason):
    traj = make("web", [('{"action": "click", "element": 1}', observation), ('{"action": "wait"}', RESULTS)])
    assert filters.env_failure_of(traj) == reason


@pytest.mark.parametrize(
    "observation",
    [
        '[ 3] | "404"\n[ 4] | "Not Found items are hidden"',  # a number in a list, its words on another line
        '[ 0] | "Error codes: 404, 500, 503"',
        '[ 2] | "Captchas, explained: a history of bot checks"',
        "(empty screen: no visible elements)",  # a rendered loading screen is a real state
        "No state of the art results found",
        '[ 5] | "TypeError [ERR_INVALID_ARG_TYPE]: The path argument must be of type string"',  # Node docs
    ],
)
def test_ordinary_page_text_is_not_an_env_failure(observation):
    traj = make("android", [('{"action_type": "home"}', observation), ('{"action_type": "back"}', RESULTS)])
    assert filters.env_failure_of(traj) is None


def test_empty_observation_is_missing_state_except_on_the_final_turn():
    click, answer = '{"action": "click", "element": 1}', '{"action": "answer", "text": "x"}'
    assert filters.env_failure_of(make("web", [(click, RESULTS), (answer, "")])) is None
    assert filters.env_failure_of(make("web", [(click, " \n"), (answer, "")])) == "missing_state"
    assert filters.env_failure_of(make("web", [(click, RESULTS)], initial_state="[no screenshot]")) == "missing_state"


def test_env_failure_drops_gui_only():
    steps = [('{"action": "click", "element": 1}', "502 Bad Gateway"), ('{"action": "wait"}', RESULTS)]
    out, counts = run_one("gui_env_failure", make("os", steps))
    assert out is None and counts == {"filtered.gui_env_failure": 1}
    search = make("search", steps)
    assert run_one("gui_env_failure", search) == (search, {})


# ---------------------------------------------------------------- min_turns and the chain


def test_min_turns_is_checked_after_stripping():
    steps = build_filters(DEFAULTS)
    traj = make("mcp", [(call("a"), "x"), ("", "y"), ("{}", "z")], '["a"]')
    stats = Stats()
    assert apply_steps(traj, steps, stats) is None
    assert stats.to_dict() == {"filtered.min_turns": 1, "turns_stripped.empty_action": 2}
    out, counts = run_one("min_turns", traj, min_turns=3)
    assert out is traj and counts == {}
    assert run_one("min_turns", traj, min_turns=4)[1] == {"filtered.min_turns": 1}


# ---------------------------------------------------------------- real samples


def filter_real(folder: Path) -> tuple[Stats, dict[str, int]]:
    """Normalize every record of a real sample folder and run the default filters over it."""
    steps, stats, turns_after = build_filters(DEFAULTS), Stats(), {}
    for unit in expand_inputs([str(folder)], claims_dir=registry.claims_dir):
        adapter = registry.get_adapter(registry.sniff(unit)[0])
        opts = registry.resolve_opts(adapter, {})
        for record in adapter.read(unit, opts):
            if isinstance(record, InvalidRecord):
                stats.add("quarantined")
                continue
            for traj in adapter.normalize(record, opts):
                stats.add("in")
                kept = apply_steps(traj, steps, stats)
                if kept is not None:
                    turns_after[f"{Path(unit.uri).name} {record.locator}"] = len(kept.turns)
    return stats, turns_after


def test_real_swe_agent_runs(shared_data):
    # Hand count: marshmallow turn 10 and pydicom turns 6, 7, 8 are "Your proposed edit has introduced
    # new syntax error(s)" answers followed by another `edit` → 4 stripped. pydicom turn 3 is a
    # Traceback of `python reproduce_bug.py` followed by `find_file` → kept. Every run calls only
    # COMMANDS-documented tools and bash → none dropped.
    stats, turns = filter_real(shared_data / "swe-agent")
    assert stats.to_dict() == {"in": 4, "turns_stripped.retry_cycle": 4}
    assert turns == {
        "ctf_networking_1.traj document": 4,
        "marshmallow-code__marshmallow-1867.default.traj document": 13,
        "pydicom__pydicom-1458.traj document": 9,
        "swe-agent__test-repo-i1.traj document": 5,
    }


def test_real_openhands_streams_have_no_declaration(shared_data):
    # Hand count: neither stream has a system event with tools → 2 skipped; basic.json has 1 turn → dropped.
    stats, turns = filter_real(shared_data / "openhands")
    assert stats.to_dict() == {"filter_skipped.undeclared_tools_no_declaration": 2, "filtered.min_turns": 1, "in": 2}
    assert turns == {"wrong_initial_state.json document": 3}


def test_real_mcp_atlas_calls_only_enabled_tools(shared_data):
    # Hand count: the 10 rows' 42 calls all name a tool of their ENABLED_TOOLS list; no error payloads.
    stats, turns = filter_real(shared_data / "openai-messages")
    assert stats.to_dict() == {"in": 10}
    assert sum(turns.values()) == 42


@pytest.mark.parametrize(("folder", "turns"), [("webvoyager", 3), ("aitw-aitz", 4), ("opencua-raw", 14)])
def test_real_gui_runs_change_state_every_turn(shared_data, folder, turns):
    # Hand count: webvoyager's 3 turns (type, click, answer), the AITW episode's 4 and the OpenCUA
    # session's 14 each show a state different from the one before; no captcha or error page.
    stats, kept = filter_real(shared_data / folder)
    assert stats.to_dict() == {"in": 1}
    assert list(kept.values()) == [turns]


def test_real_mini_swe_agent_traceback_then_rewrite_is_kept(shared_data):
    # Turn 8's output is a ZeroDivisionError traceback, turn 9 rewrites the file with `cat >` → kept.
    stats, kept = filter_real(shared_data / "mini-swe-agent")
    assert stats.to_dict() == {"in": 1} and list(kept.values()) == [10]


# ---------------------------------------------------------------- end to end


def test_cli_manifest_counts_filter_reasons_and_balances(shared_data, tmp_path):
    lines = [
        make("mcp", [(call("read"), "a"), (call("rm"), "b")], '["read"]'),  # undeclared_tools
        make("web", [('{"action": "click", "element": 1}', "reCAPTCHA"), ('{"action": "wait"}', "x")]),
        make("android", [('{"action_type": "home"}', "h1"), ('{"action_type": "back"}', "h2")]),  # kept
        make("terminal", [('[{"keystrokes": "ls\\n"}]', "a"), ("", "b")]),  # empty action, then min_turns
    ]
    src = tmp_path / "in"
    src.mkdir()
    rows = [json.dumps({**t.to_dict(), "traj_id": f"t{i}", "split_key": f"k{i}"}) for i, t in enumerate(lines)]
    (src / "made.jsonl").write_text("\n".join([*rows, "{not json"]) + "\n")
    out = tmp_path / "out"
    args = ["run", "--executor", "local", "--progress", "off", "--max-quarantine-rate", "0.5", "-o", str(out)]
    inputs = ["-i", str(src), "-i", str(shared_data / "swe-agent"), "-i", str(shared_data / "openhands")]
    proc = lwm_in_process(*args, *inputs)
    assert proc.returncode == 0, proc.stderr
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["filtered"] == {"gui_env_failure": 1, "min_turns": 2, "undeclared_tools": 1}
    assert counts["turns_stripped"] == {"empty_action": 1, "retry_cycle": 4}
    # 5 lines + 4 .traj + 2 OpenHands streams, one trajectory each: read = kept + quarantined + filtered.
    assert counts["records"]["read"] == 11 and counts["records"]["quarantined"] == 1
    assert counts["trajectories"]["kept"] == 6
    assert counts["records"]["read"] == (
        counts["trajectories"]["kept"] + counts["records"]["quarantined"] + sum(counts["filtered"].values())
    )


# GUI states and tool outputs that recur across trajectories (the built filters answer each text once)
_STATES = [WEB_PAGE, RESULTS, "", "   \n", "null", "[screen missing]", "Please verify you are human",
           "502 Bad Gateway", "bash: foo: command not found", '{"error": "bad input"}', "ok", "Invalid action"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["web", "android", "terminal"]),
                          st.lists(st.tuples(st.sampled_from(["click 1", "ls", "type x"]), st.sampled_from(_STATES)),
                                   min_size=1, max_size=5),
                          st.none() | st.sampled_from(_STATES)), min_size=1, max_size=8))
def test_built_filters_remember_texts_and_give_the_plain_functions_verdicts(specs):
    steps = build_filters({"filter": {"enabled": ["retry_cycle", "gui_env_failure"]}})
    retry, gui = steps
    for _ in range(2):  # the second pass answers every text from the memo
        for domain, turns, initial in specs:
            traj = make(domain, turns, initial_state=initial)
            want_marks = filters.retry_cycle_marks(traj)
            assert retry.marks(traj) == want_marks
            want_drop = domain in ("web", "android") and filters.env_failure_of(traj) is not None
            assert (gui(traj, Stats()) is None) == want_drop
