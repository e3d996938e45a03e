"""agentworldbench: evaluation rows regrouped into trajectories; the turn-prompt parser round-trips."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.errors import InvalidRecord
from stages.ingest import registry
from stages.ingest.agentworldbench import (
    ADAPTER,
    domain_of_task,
    parse_turn_prompt,
    reference_observation,
)
from stages.ingest.reading import InputUnit
from tests.helpers import ingest_unit

TERMINAL_SYSTEM = (
    "You simulate a Linux terminal. Given the history and a new action, reply with the exact terminal output.\n"
    "Task: tidy the /app folder."
)


def run(path, **opts):
    """All trajectories and all quarantined records of one file, as the pipeline would see them."""
    return ingest_unit(ADAPTER, path, **opts)


def render_turn(n, action, state=None, instruction=None, tail=""):
    """The turn prompt layout of SPEC §7, written out independently of the adapter."""
    text = f"### Turn {n}\n"
    if instruction is not None:
        text += f"**Task Instruction:**\n{instruction}\n\n"
    if state is not None:
        text += f"**Current State:**\n{state}\n\n"
    return text + f"**Action:**\n```json\n{action}\n```" + tail


@pytest.fixture(scope="module")
def evaluated(fixtures_dir):
    trajs, errors = run(fixtures_dir / "agentworldbench/eval.jsonl")
    assert errors == []
    return trajs


# ---------------------------------------------------------------- parse_turn_prompt


def test_parse_spec_worked_example():
    text = '### Turn 1\n**Current State:**\nroot@box:/app# \n\n**Action:**\n```json\n[{"keystrokes": "ls\\n", "duration": 0.1}]\n```'
    assert parse_turn_prompt(text) == (1, '[{"keystrokes": "ls\\n", "duration": 0.1}]', "root@box:/app# ", None)


def test_parse_android_first_turn_and_later_turn_with_instruction_tail():
    first = render_turn(
        1, '{"action_type": "click", "index": 3}', state="[ 0] | Frame\n\n[ 1] | Button", instruction="Open Wi-Fi."
    )
    assert parse_turn_prompt(first) == (
        1,
        '{"action_type": "click", "index": 3}',
        "[ 0] | Frame\n\n[ 1] | Button",
        "Open Wi-Fi.",
    )
    later = render_turn(
        12, '{"a": 1}', tail="\n\nReason, then answer in <predicted_observation></predicted_observation>."
    )
    assert parse_turn_prompt(later) == (12, '{"a": 1}', None, None)


@pytest.mark.parametrize(
    "text, detail",
    [
        ("Turn 1\n**Action:**\n```json\n{}\n```", "starts with"),
        ("### Turn 1\n**Current State:**\n$ \n\n", "no '**Action:**'"),
        ("### Turn 1\n**Action:**\n```json\n{}\n", "not closed"),
        ("### Turn 1\nhello\n\n**Action:**\n```json\n{}\n```", "unexpected text"),
    ],
)
def test_parse_rejects_malformed_prompts(text, detail):
    with pytest.raises(InvalidRecord, match="malformed_turn_prompt") as err:
        parse_turn_prompt(text)
    assert detail in err.value.detail


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_markers = ("**Task Instruction:**\n", "**Current State:**\n", "**Action:**\n```json\n")


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 500),
    action=_text.filter(lambda s: "\n" not in s),  # canonical actions are compact JSON: no raw newline
    state=st.none() | _text,
    instruction=st.none() | _text.filter(lambda s: "\n\n**Current State:**\n" not in s),
)
def test_parse_round_trips_rendered_prompts(n, action, state, instruction):
    if any(m in (state or "") + (instruction or "") for m in _markers):
        return  # section headers inside section text are ambiguous by construction
    assert parse_turn_prompt(render_turn(n, action, state, instruction)) == (n, action, state, instruction)


def test_reference_observation_unwrapping():
    assert reference_observation("<predicted_observation>\na\nb\n</predicted_observation>") == "a\nb"
    assert reference_observation("I think <predicted_observation>x</predicted_observation>") == "x"
    assert reference_observation("plain text") == "plain text"


# ---------------------------------------------------------------- regrouping rows


def test_rows_of_one_run_merge_and_a_diverging_run_stays_apart(evaluated):
    terminal = [t for t in evaluated if t.domain == "terminal"]
    assert len(terminal) == 2
    whole, other = sorted(terminal, key=lambda t: -len(t.turns))
    assert [json.loads(x.action)[0]["keystrokes"] for x in whole.turns] == ["ls\n", "rm -r tmp\n", "ls\n"]
    assert whole.turns[2].observation == "README.md  src\nroot@box:/app# "  # unwrapped reference
    assert [json.loads(x.meta or "{}").get("evaluated", False) for x in whole.turns] == [True, False, True]
    assert whole.system.initial_state == "root@box:/app# "
    assert whole.system.simulation_instruction == TERMINAL_SYSTEM
    assert whole.system.task_description == ""
    meta = json.loads(whole.meta)
    assert meta["row_ids"] == ["tidy-app-3", "tidy-app-1"] and meta["total_turns"] == 3
    assert whole.source.locator == "line 4, line 1"
    assert [x.observation for x in other.turns] == [
        "README.md  src  tmp\nroot@box:/app# ",
        "# demo\nA tiny project.\nroot@box:/app# ",
    ]
    assert other.source.locator == "line 3" and whole.traj_id != other.traj_id


def test_android_rows_with_plain_string_history(evaluated):
    (t,) = [t for t in evaluated if t.domain == "android"]
    assert t.system.task_description == "Turn on Wi-Fi."
    assert t.system.initial_state.startswith("[ 0] | android.widget.FrameLayout")
    assert t.system.initial_state.endswith('text="Settings" | bounds=[42,149][400,275] | clickable')
    assert [x.action for x in t.turns] == ['{"action_type": "click", "index": 1}'] * 2
    assert t.turns[1].observation.endswith('text="Wi-Fi" | checked=true | clickable')
    assert json.loads(t.meta)["row_ids"] == ["wifi-2", "wifi-1"]


def test_history_with_system_message_and_current_prompt(evaluated):
    (t,) = [t for t in evaluated if t.domain == "web"]
    assert json.loads(t.turns[1].action) == {"action": "click", "element": 7}
    assert t.turns[1].observation.startswith('[12] link "USB-C cable 2m - $9.99"')
    assert t.system.initial_state == '[4] searchbox ""\n[7] button "Search"'


def test_bad_rows_get_reasons_and_locators(fixtures_dir):
    trajs, errors = run(fixtures_dir / "agentworldbench/bad.jsonl")
    assert [t.source.locator for t in trajs] == ["line 1"]
    assert {e.locator: e.reason for e in errors} == {
        "line 2": "missing_field",
        "line 3": "wrong_type",
        "line 4": "malformed_turn_prompt",
        "line 5": "malformed_observation",
        "line 6": "turn_mismatch",
        "line 7": "malformed_message",
        "line 8": "malformed_turn_prompt",
    }
    assert all(e.uri.endswith("bad.jsonl") for e in errors)


@pytest.mark.parametrize(
    "task, domain",
    [
        ("terminal", "terminal"),
        ("GUI-android", "android"),
        ("deep_search", "search"),
        ("browser_tasks", "web"),
        ("webshop", None),
    ],
)
def test_domain_of_task(task, domain):
    assert domain_of_task(task) == domain


def test_domain_option_wins(fixtures_dir):
    trajs, _ = run(fixtures_dir / "agentworldbench/eval.jsonl", domain="os")
    assert {t.domain for t in trajs} == {"os"}


@pytest.mark.parametrize("name", ["eval.jsonl", "bad.jsonl"])
def test_registry_sniffs_fixtures(fixtures_dir, name):
    assert registry.sniff(InputUnit(str(fixtures_dir / "agentworldbench" / name))) == ("agentworldbench", 0.95)


# ---------------------------------------------------------------- official rows (every turn in prompt/response)

OFFICIAL_TURNS = [  # (action, observation) of one terminal run, written by hand
    ('[{"keystrokes": "ls\\n", "duration": 0.1}]', "README.md  src  tmp\nroot@box:/app# "),
    ('[{"keystrokes": "rm -r tmp\\n", "duration": 0.1}]', "root@box:/app# "),
    ('[{"keystrokes": "cat README.md\\n", "duration": 0.1}]', "# demo\nA tiny project.\nroot@box:/app# "),
]
SUFFIX = "\n\nThink it through, then put the exact output inside <predicted_observation></predicted_observation>."


def official_rows(turns, row_prefix, suffix, state="root@box:/app# ", system=TERMINAL_SYSTEM):
    """One official row per turn: prompt/response hold every turn; only the evaluated prompt has `suffix`."""
    prompts = [render_turn(n, a, state if n == 1 else None) for n, (a, _) in enumerate(turns, 1)]
    return [{"task": "terminal", "id": f"{row_prefix}-{t}", "system_str": system, "turn_idx": t,
             "total_turns": len(turns), "prompt": [p + suffix if n == t else p for n, p in enumerate(prompts, 1)],
             "response": [f"**Environment Observation:**\n{o}" for _, o in turns], "current_prompt": prompts[t - 1]}
            for t in range(1, len(turns) + 1)]


@pytest.mark.parametrize("suffix", [SUFFIX, ""])
def test_official_rows_of_one_trajectory_are_grouped(tmp_path, suffix):
    rows = official_rows(OFFICIAL_TURNS, "tidy", suffix)
    other = [("[{\"keystrokes\": \"ls\\n\", \"duration\": 0.1}]", "src\nroot@box:/app# "), OFFICIAL_TURNS[1]]
    rows += official_rows(other, "other", suffix)  # starts with the same action, another observation
    path = tmp_path / "official.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trajs, errors = run(path)
    assert errors == []
    assert len(trajs) == 2
    whole, short = sorted(trajs, key=lambda t: -len(t.turns))
    assert [(x.action, x.observation) for x in whole.turns] == OFFICIAL_TURNS
    assert [(x.action, x.observation) for x in short.turns] == other
    assert [json.loads(x.meta)["evaluated"] for x in whole.turns] == [True, True, True]
    assert json.loads(whole.meta)["row_ids"] == ["tidy-1", "tidy-2", "tidy-3"]
    assert whole.system.initial_state == "root@box:/app# "
    assert whole.system.simulation_instruction == TERMINAL_SYSTEM


def test_official_rows_accept_bare_and_wrapped_references(tmp_path):
    rows = official_rows(OFFICIAL_TURNS, "r", SUFFIX)
    rows[0]["response"] = [o for _, o in OFFICIAL_TURNS]  # bare
    rows[1]["response"] = [f"<predicted_observation>\n{o}\n</predicted_observation>" for _, o in OFFICIAL_TURNS]
    path = tmp_path / "official.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trajs, errors = run(path)
    assert errors == [] and len(trajs) == 1
    assert [(x.action, x.observation) for x in trajs[0].turns] == OFFICIAL_TURNS


def test_official_row_whose_current_prompt_is_another_turn_is_rejected(tmp_path):
    rows = official_rows(OFFICIAL_TURNS, "bad", SUFFIX)
    rows[1]["current_prompt"] = rows[2]["current_prompt"]
    path = tmp_path / "official.jsonl"
    path.write_text(json.dumps(rows[1]) + "\n")
    trajs, errors = run(path)
    assert trajs == [] and [e.reason for e in errors] == ["turn_mismatch"]


def test_system_prompt_tail_repeating_the_first_turn_sections_is_dropped(tmp_path):
    """An echo template appends ``## Initial state`` to the system prompt; ingest drops that copy, so
    export → ingest does not grow the prompt."""
    tail = "\n\n## Initial state\nroot@box:/app# "
    rows = official_rows(OFFICIAL_TURNS, "t", SUFFIX, system=TERMINAL_SYSTEM + tail)
    rows += official_rows(OFFICIAL_TURNS[:2], "u", SUFFIX, system=TERMINAL_SYSTEM + "\n\n## Initial state\nother")
    path = tmp_path / "official.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trajs, errors = run(path)
    assert errors == []
    by_len = {len(t.turns): t for t in trajs}
    assert by_len[3].system.simulation_instruction == TERMINAL_SYSTEM
    # A tail that does not repeat the first turn's state is the author's text: kept.
    assert by_len[2].system.simulation_instruction == TERMINAL_SYSTEM + "\n\n## Initial state\nother"
