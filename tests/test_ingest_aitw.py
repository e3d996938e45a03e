"""The AITW / AitZ adapter on the real AitZ episode and a hand-written AITW-style fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.errors import InvalidRecord
from stages.ingest import registry
from stages.ingest.aitw import ADAPTER, EPISODE_END_COMPLETE, EPISODE_END_INFEASIBLE, decode_action, step_screen
from stages.ingest.android_render import render_elements
from stages.ingest.reading import InputUnit

OPTS = {"domain": None, "source_kind": "public"}


def ingest(path: Path) -> tuple[list, list[InvalidRecord]]:
    trajs, bad = [], []
    for rec in ADAPTER.read(InputUnit(str(path)), OPTS):
        if isinstance(rec, InvalidRecord):
            bad.append(rec)
            continue
        try:
            trajs.extend(ADAPTER.normalize(rec, OPTS))
        except InvalidRecord as exc:
            bad.append(exc)
    return trajs, bad


def test_every_real_file_normalizes_without_quarantine(shared_data):
    files = sorted((shared_data / "aitw-aitz").glob("*.json"))
    assert files
    for path in files:
        assert registry.sniff(InputUnit(str(path)))[0] == "aitw"
        trajs, bad = ingest(path)
        assert bad == [], path.name
        assert trajs, path.name


def test_real_episode_facts(shared_data):
    (traj,) = ingest(shared_data / "aitw-aitz/GOOGLE_APPS-523638528775825151.json")[0]
    assert traj.domain == "android"
    assert traj.system.task_description == 'open app "Clock" (install if not already installed)'
    assert traj.split_key == "523638528775825151"
    assert [t.action for t in traj.turns] == [
        '{"action_type": "home"}',  # code 6
        # code 4, touch (0.541, 0.507) → lift (0.001, 0.579): the finger went up
        '{"action_type": "swipe", "direction": "up", "from": [0.5074, 0.5411], "to": [0.5789, 0.0011]}',
        '{"action_type": "click", "x": 0.607, "y": 0.4984}',  # code 4, touch ≈ lift: a tap on "Cleck"
        '{"action_type": "complete", "status": "successful"}',  # code 10
    ]
    # The initial state is step 0's screen (pixel boxes y, x, h, w → [x1,y1][x2,y2]).
    assert traj.system.initial_state.split("\n")[2] == '[ 2] | TEXT | text="up email" | bounds=[37,82][83,92]'
    # Turn t is observed as the screen of step t+1.
    assert traj.turns[0].observation.split("\n")[0] == '[ 0] | TEXT | text="Man, Aug 8" | bounds=[24,56][76,64]'
    assert '[22] | TEXT | text="Cleck" | bounds=[156,321][174,326]' in traj.turns[1].observation
    assert 'text="Stopwatch"' in traj.turns[2].observation
    assert traj.turns[3].observation == EPISODE_END_COMPLETE
    assert traj.outcome is not None and traj.outcome.success is True
    assert json.loads(traj.turns[0].meta)["coat_action_desc"] == "press the home button"


@pytest.fixture
def steps_file(fixtures_dir: Path) -> Path:
    return fixtures_dir / "aitw" / "aitw_steps.jsonl"


def test_fixture_is_sniffed_as_aitw(steps_file):
    assert registry.sniff(InputUnit(str(steps_file)))[0] == "aitw"


def test_aitw_feature_names_click_with_element_type_and_scroll(steps_file):
    trajs, _ = ingest(steps_file)
    e100 = next(t for t in trajs if t.split_key == "e100")
    assert e100.system.task_description == "what is the weather in paris"
    assert [t.action for t in e100.turns] == [
        '{"action_type": "click", "x": 0.5, "y": 0.3, "element": 0}',  # inside "Screen 0" at [400,280][600,330]
        '{"action_type": "type", "text": "weather in paris"}',
        '{"action_type": "enter"}',
        '{"action_type": "swipe", "direction": "left", "from": [0.5, 0.8], "to": [0.1, 0.8]}',
        '{"action_type": "terminate", "status": "infeasible"}',
    ]
    assert [t.observation.split("\n")[0] for t in e100.turns[:4]] == [
        f'[ 0] | TEXT | text="Screen {i}" | bounds=[400,280][600,330]' for i in range(1, 5)
    ]
    assert "status" not in e100.turns[0].observation  # a zero-area detection is dropped
    assert e100.turns[4].observation == EPISODE_END_INFEASIBLE
    assert e100.outcome is not None and e100.outcome.success is False


def test_unfinished_episode_drops_its_last_step_and_regrouping_is_refused(steps_file):
    trajs, bad = ingest(steps_file)
    e200 = next(t for t in trajs if t.split_key == "e200")
    assert [t.action for t in e200.turns] == ['{"action_type": "back"}']  # step 0 (listed second); step 1 unobserved
    assert json.loads(e200.meta) == {"dropped_last_step": True, "episode_id": "e200"}
    assert e200.outcome is None
    assert [(b.reason, b.locator) for b in bad] == [("bad_order", "line 8")]


def test_dual_point_decoding_corners():
    screen = render_elements([])
    down = {"result_touch_yx": "[0.2, 0.5]", "result_lift_yx": "[0.7, 0.52]"}
    assert decode_action(down, 4, screen, "") == {
        "action_type": "swipe",
        "direction": "down",
        "from": [0.5, 0.2],
        "to": [0.52, 0.7],
    }
    # Pixel boxes (AitZ) need the image size to place a tap on an element.
    step = {
        "ui_positions": "[[100, 50, 40, 200]]",
        "ui_text": '["OK"]',
        "ui_types": '["TEXT"]',
        "result_touch_yx": "[0.06, 0.15]",
        "result_lift_yx": "[0.06, 0.15]",
    }

    pixels = step_screen(step, "")
    assert "element" not in decode_action(step, 4, pixels, "")
    assert decode_action({**step, "image_height": 2000, "image_width": 1000}, 4, pixels, "")["element"] == 0
    for bad_step, code, reason in [({}, 4, "bad_action"), ({}, 9, "unknown_action")]:
        with pytest.raises(InvalidRecord) as exc:
            decode_action(bad_step, code, screen, "item 3")
        assert exc.value.reason == reason
