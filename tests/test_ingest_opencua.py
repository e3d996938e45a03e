"""opencua: AgentNet desktop recording sessions (the real Windows session and hand-written corners)."""

from __future__ import annotations

import json

import pytest

from schemas.errors import InvalidRecord
from stages.ingest import registry
from stages.ingest.opencua import ADAPTER, EVENTS_FILE, canonical_action
from stages.ingest.reading import InputUnit, expand_inputs

REAL = "opencua-raw/session-20241106114028"
TASK = (
    "Open the system display settings, adjust the system brightness to 78, turn on night light, change scale and "
    "layout to 125%, change display resolution to 1680x1050, set 'turn off screen after 5 hours when it's on "
    "battery power.'"
)


def run(unit: InputUnit, **opts):
    opts = registry.resolve_opts(ADAPTER, opts)
    trajs, errors = [], []
    for item in ADAPTER.read(unit, opts):
        if isinstance(item, InvalidRecord):
            errors.append(item)
            continue
        try:
            trajs.extend(ADAPTER.normalize(item, opts))
        except InvalidRecord as exc:
            errors.append(exc)
    return trajs, errors


@pytest.fixture(scope="module")
def real(shared_data):
    trajs, errors = run(InputUnit(str(shared_data / REAL), is_dir=True))
    assert errors == []  # zero quarantined records
    (traj,) = trajs
    return traj


@pytest.fixture(scope="module")
def notepad(fixtures_dir):
    trajs, errors = run(InputUnit(str(fixtures_dir / "opencua/session-20250101093000"), is_dir=True))
    assert errors == []
    (traj,) = trajs
    return traj


def actions(traj):
    return [json.loads(t.action) for t in traj.turns]


def test_real_session_is_one_trajectory_with_every_action(real):
    assert real.domain == "os"
    assert len(real.turns) == 14  # 14 lines in reduced_events_complete.jsonl, the last observed in a11y.jsonl
    assert real.system.task_description == TASK
    assert real.split_key == TASK
    assert real.source.locator == EVENTS_FILE
    meta = json.loads(real.meta)
    assert meta["session"] == "session-20241106114028"
    assert (meta["system"], meta["release"], meta["screen_width"], meta["screen_height"]) == (
        "Windows",
        "10",
        1366,
        768,
    )
    assert "unobserved_final_action" not in meta
    assert "obs_record_state_timings" not in meta


def test_real_actions_are_canonical(real):
    acts = actions(real)
    assert real.turns[0].action == (
        '{"action": "click", "button": "left", "x": 1328, "y": 745, "element": 23, '
        '"target": {"role": "Button", "name": "Action Centre, No new notifications (Off)"}}'
    )
    assert acts[1] == {
        "action": "click",
        "button": "right",
        "x": 1305,
        "y": 393,
        "target": {"role": "Button", "name": "Night light"},
    }  # the tree before it is the taskbar, which has no element at that point
    assert acts[3] == {"action": "drag", "button": "left", "from": [621, 206], "to": [561, 213]}
    assert acts[5] == {"action": "scroll", "x": 541, "y": 602, "down": 3, "element": 38}
    assert [a["action"] for a in acts].count("click") == 12


def test_real_states_follow_the_recorder(real):
    assert real.system.initial_state.splitlines()[0] == '[ 0] | Pane | name="Taskbar" | bounds=[0,728][1366,768]'
    assert '[ 1] | Button | name="Start" | bounds=[0,728][48,768]' in real.system.initial_state
    # After the right click, the context menu of the quick action is the tree the recorder took next.
    assert '[ 2] | MenuItem | name="Go to Settings" | bounds=[1154,396][1303,431]' in real.turns[1].observation
    assert 'name="Brightness and colour"' in real.turns[2].observation
    assert 'name="78"' in real.turns[3].observation  # the brightness tooltip after the drag
    # The last observation is the last snapshot of a11y.jsonl (the window after the resolution change).
    assert real.turns[-1].observation.splitlines()[0] == '[ 0] | Window | name="Settings" | bounds=[-7,-7][1128,668]'
    metas = [json.loads(t.meta) for t in real.turns]
    assert [m["id"] for m in metas] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 21, 22]
    assert metas[10]["skipped_events"] == 9
    assert sum("skipped_events" in m for m in metas) == 1


def test_events_file_as_unit_gives_the_same_trajectory(shared_data, real):
    (traj,), errors = run(InputUnit(str(shared_data / REAL / EVENTS_FILE)))
    assert errors == []
    assert traj.traj_id == real.traj_id
    assert [t.observation for t in traj.turns] == [t.observation for t in real.turns]


def test_real_session_is_sniffed_and_claimed(shared_data):
    session = str(shared_data / REAL)
    assert registry.sniff(InputUnit(session, is_dir=True))[0] == "opencua"
    assert registry.sniff(InputUnit(session + "/" + EVENTS_FILE))[0] == "opencua"
    assert registry.sniff(InputUnit(session + "/reduced_events_vis.jsonl")) == (None, 0.0)
    units = expand_inputs([str(shared_data / "opencua-raw")], claims_dir=registry.claims_dir)
    assert units == [InputUnit(session, is_dir=True)]


def test_fixture_session_covers_keyboard_and_pointer_actions(notepad):
    assert actions(notepad) == [
        {
            "action": "click",
            "button": "left",
            "x": 500,
            "y": 300,
            "element": 3,
            "target": {"role": "Document", "name": "Text Editor"},
        },
        {"action": "type", "text": "héllo 世界"},
        {"action": "hotkey", "keys": ["ctrl", "s"]},
        {
            "action": "click",
            "button": "left",
            "clicks": 2,
            "x": 700,
            "y": 515,
            "element": 5,
            "target": {"role": "Edit", "name": "File name:"},
        },
        {"action": "type", "text": "report.txt"},
        {"action": "scroll", "x": 800, "y": 350, "down": 2, "element": 1},
        {"action": "drag", "button": "left", "from": [450, 290], "to": [450, 330]},
    ]
    assert 'value="héllo 世界" | bounds=[0,50][1920,1000] | focused' in notepad.turns[1].observation
    assert 'name="todo 📝.txt"' in notepad.turns[5].observation
    assert json.loads(notepad.turns[6].meta)["skipped_events"] == 2  # ids jump from 6 to 9


def test_a_missing_tree_is_taken_from_a11y_snapshots(notepad):
    # Event 3 has no tree: the last a11y.jsonl snapshot before it started (t=103.0, the fresh dialog) is used.
    observation = notepad.turns[2].observation
    assert '[ 5] | Edit | name="File name:" | value="*.txt" | bounds=[500,500][1000,530]' in observation.splitlines()


def test_fixture_task_metadata_and_unobserved_final_action(notepad):
    assert notepad.system.task_description == "Save the note as report.txt next to 報告.txt\nUse Notepad."  # BOM gone
    assert notepad.split_key == "Save the note as report.txt next to 報告.txt"
    meta = json.loads(notepad.meta)
    assert meta["screen_width"] == 1920
    # No snapshot was taken after the final click, so it has no observation and is not a turn.
    assert meta["unobserved_final_action"] == {
        "action": "click",
        "button": "left",
        "x": 1140,
        "y": 755,
        "element": 6,
        "target": {"role": "Button", "name": "Save"},
    }


def test_session_without_any_tree_for_an_action_is_quarantined(fixtures_dir):
    trajs, errors = run(InputUnit(str(fixtures_dir / "opencua/session-20250102080000"), is_dir=True))
    assert trajs == []
    (err,) = errors
    assert (err.reason, err.locator) == ("missing_state", "line 2")


def test_session_with_a_malformed_line_is_quarantined_at_read(fixtures_dir):
    trajs, errors = run(InputUnit(str(fixtures_dir / "opencua/session-20250103080000"), is_dir=True))
    assert trajs == []
    (err,) = errors
    assert (err.reason, err.locator) == ("malformed_json", "line 2")
    assert err.uri.endswith("session-20250103080000/" + EVENTS_FILE)


def test_every_fixture_session_is_sniffed_as_opencua(fixtures_dir):
    sessions = sorted(p for p in (fixtures_dir / "opencua").iterdir() if p.is_dir())
    assert len(sessions) == 3
    for session in sessions:
        assert registry.sniff(InputUnit(str(session), is_dir=True))[0] == "opencua"
        assert registry.sniff(InputUnit(str(session / EVENTS_FILE)))[0] == "opencua"
        assert ADAPTER.claims_dir(str(session))
    assert not ADAPTER.claims_dir(str(fixtures_dir / "opencua"))


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {"action": "press", "description": "Press: $ctrl$$alt$ + T"},
            {"action": "hotkey", "keys": ["ctrl", "alt", "T"]},
        ),
        ({"action": "press", "description": "Press: $enter$"}, {"action": "press", "keys": ["enter"]}),
        (
            {"action": "type", "description": "Type: a$space$b$enter$$backspace$"},
            {"action": "type", "text": "a b\n{backspace}"},
        ),
        (
            {
                "action": "scroll",
                "description": "",
                "trace": [{"x": 5, "y": 6, "dx": 1, "dy": 1}, {"x": 5, "y": 6, "dy": 1}],
            },
            {"action": "scroll", "x": 5, "y": 6, "up": 2, "right": 1},
        ),
        (
            {"action": "scroll", "description": "Scroll ⬆️×1 ↘×3", "coordinate": {"x": 1, "y": 2}},
            {"action": "scroll", "x": 1, "y": 2, "down": 2, "right": 3},
        ),
        (
            {"action": "click", "description": "Triple left Click", "coordinate": {"x": 1.5, "y": 2.0}},
            {"action": "click", "button": "left", "clicks": 3, "x": 1.5, "y": 2},
        ),
        (
            {"action": "mouse_press", "description": "Mouse long press right button", "coordinate": {"x": 3, "y": 4}},
            {"action": "long_press", "button": "right", "x": 3, "y": 4},
        ),
        (
            {"action": "terminate", "description": "terminate the task"},
            {"action": "terminate", "description": "terminate the task"},
        ),
    ],
)
def test_canonical_action_dialects(event, expected):
    assert canonical_action(event, 7) == expected


@pytest.mark.parametrize(
    "event",
    [
        {"description": "Single left Click"},
        {"action": "click", "description": "Single left Click"},
        {"action": "drag", "description": "Drag somewhere"},
        {"action": "press", "description": ""},
    ],
)
def test_unreadable_actions_raise_bad_action(event):
    with pytest.raises(InvalidRecord) as err:
        canonical_action(event, 7)
    assert (err.value.reason, err.value.locator) == ("bad_action", "line 7")


def test_the_fixed_demonstrations_look_like_the_real_turns(real):
    """SPEC §4: an os trajectory carries the domain's demonstrations, rendered as the recorded trees are."""
    import re

    from stages.templates import render_system

    traj = real
    line = re.compile(r"\[ ?\d+\] \| [A-Za-z]+ \| name=\".*\"")
    assert len(traj.system.demonstrations) == 2
    for demo in traj.system.demonstrations:
        assert json.loads(demo.action)["action"] in ("click", "type")
        assert all(line.match(x) for x in demo.observation.splitlines()), demo.observation
    assert any(line.match(x) for x in traj.turns[0].observation.splitlines())
    assert all(d.observation in render_system(traj, "v1") for d in traj.system.demonstrations)
