"""The uiautomator adapter: XML screens stitched by a JSONL action log (hand-written fixture)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from schemas.errors import InvalidRecord
from stages.ingest import registry
from stages.ingest.android_render import render_elements
from stages.ingest.reading import InputUnit, expand_inputs
from stages.ingest.uiautomator import ADAPTER, canonical_action

OPTS = {"domain": None, "source_kind": "public"}


def ingest(unit: InputUnit) -> tuple[list, list[InvalidRecord]]:
    trajs, bad = [], []
    for rec in ADAPTER.read(unit, OPTS):
        if isinstance(rec, InvalidRecord):
            bad.append(rec)
            continue
        try:
            trajs.extend(ADAPTER.normalize(rec, OPTS))
        except InvalidRecord as exc:
            bad.append(exc)
    return trajs, bad


@pytest.fixture
def session(fixtures_dir: Path) -> Path:
    return fixtures_dir / "uiautomator"


def test_sniff_picks_uiautomator_for_the_log_the_session_dir_and_xml_screens(session, shared_data):
    assert registry.sniff(InputUnit(str(session / "settings.actions.jsonl")))[0] == "uiautomator"
    assert registry.sniff(InputUnit(str(session), is_dir=True))[0] == "uiautomator"
    assert registry.sniff(InputUnit(str(session / "ep-0001/000.xml")))[0] == "uiautomator"
    for xml in sorted((shared_data / "uiautomator-xml").rglob("*.xml")):
        name, score = registry.sniff(InputUnit(str(xml)))
        assert (name, score >= 0.9) == ("uiautomator", True), xml.name


def test_a_directory_with_a_log_is_one_session(session):
    assert registry.claims_dir(str(session))
    units = expand_inputs([str(session)], registry.claims_dir)
    assert units == [InputUnit(str(session), is_dir=True)]


def test_episode_is_ordered_by_step_with_elements_and_rendered_screens(session):
    trajs, _ = ingest(InputUnit(str(session / "settings.actions.jsonl")))
    (traj,) = trajs
    assert traj.domain == "android" and traj.source.format == "uiautomator"
    assert traj.system.task_description == "Turn on Wi-Fi"  # the first non-empty task of the episode
    assert traj.split_key == "Turn on Wi-Fi"
    assert traj.outcome is not None and traj.outcome.success is True
    assert json.loads(traj.meta) == {"app": "com.android.settings", "episode": "ep-0001"}
    assert [t.action for t in traj.turns] == [
        '{"action_type": "click", "x": 540, "y": 470, "element": 3}',  # "Network & internet" in 000.xml
        '{"action_type": "click", "x": 950, "y": 390, "element": 4}',  # the Wi-Fi switch in 001.xml
        '{"action_type": "complete", "status": "successful"}',
    ]
    initial = traj.system.initial_state
    assert initial.split("\n")[0] == (
        '[ 0] | android.widget.TextView | res=com.android.settings:id/title | text="Settings" | bounds=[48,120][600,220]'
    )
    assert "navigationBarBackground" not in initial  # zero-area
    first, second, third = (t.observation for t in traj.turns)
    assert 'text="Network & internet" | bounds=[198,106][700,180]' in first
    assert "Hidden hint" not in first  # displayed="false"
    assert "switch_widget | bounds=[880,330][1036,450] | clickable | checkable\n" in first + "\n"
    assert "| clickable | checkable | checked" in second and 'text="Connected to HomeNet"' in second
    assert third == second
    assert len(traj.system.demonstrations) == 2 and '"action_type"' in traj.system.action_space


def test_missing_dump_and_escaping_path_are_quarantined(session):
    _, bad = ingest(InputUnit(str(session / "settings.actions.jsonl")))
    by_reason = {b.reason: b for b in bad}
    assert sorted(by_reason) == ["bad_path", "missing_state"]
    assert "ep-0002/001.xml" in by_reason["missing_state"].detail
    assert by_reason["missing_state"].locator.startswith("episode ep-0002")
    assert "../escape.xml" in by_reason["bad_path"].detail


def test_the_directory_unit_gives_the_same_trajectory_and_ids_do_not_depend_on_location(session, tmp_path):
    from_file, _ = ingest(InputUnit(str(session / "settings.actions.jsonl")))
    from_dir, _ = ingest(InputUnit(str(session), is_dir=True))
    copy = tmp_path / "elsewhere"
    shutil.copytree(session, copy)
    from_copy, _ = ingest(InputUnit(str(copy / "settings.actions.jsonl")))
    assert [t.traj_id for t in from_file] == [t.traj_id for t in from_dir] == [t.traj_id for t in from_copy]
    assert from_copy[0].turns == from_file[0].turns


def test_a_bare_screen_is_not_a_trajectory(session):
    _, bad = ingest(InputUnit(str(session / "ep-0001/000.xml")))
    assert [b.reason for b in bad] == ["no_actions"]


def write_log(tmp_path: Path, lines: list[dict]) -> InputUnit:
    (tmp_path / "s.xml").write_text('<hierarchy><node class="B" text="Hi" bounds="[0,0][10,10]"/></hierarchy>')
    log = tmp_path / "actions.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return InputUnit(str(log))


def test_first_step_needs_a_before_screen_and_steps_are_unique(tmp_path):
    back = {"action_type": "back"}
    _, bad = ingest(write_log(tmp_path, [{"episode": 1, "step": 1, "action": back, "dump": "s.xml"}]))
    assert [b.reason for b in bad] == ["missing_field"]
    twice = [{"episode": "e", "step": 1, "before": "s.xml", "action": back, "dump": "s.xml"}] * 2
    _, bad = ingest(write_log(tmp_path, twice))
    assert [b.reason for b in bad] == ["bad_value"]
    trajs, bad = ingest(
        write_log(tmp_path, [{"episode": "e", "step": 5, "before": "s.xml", "action": back, "dump": "s.xml"}])
    )
    assert bad == [] and trajs[0].turns[0].observation == '[ 0] | B | text="Hi" | bounds=[0,0][10,10]'
    assert trajs[0].outcome is None and trajs[0].split_key == trajs[0].traj_id


def test_action_validation_and_element_lookup():
    screen = render_elements([])
    assert (
        canonical_action({"action_type": "swipe", "direction": "up"}, screen, "")
        == '{"action_type": "swipe", "direction": "up"}'
    )
    assert (
        canonical_action({"action_type": "click", "x": 1, "y": 2}, screen, "")
        == '{"action_type": "click", "x": 1, "y": 2}'
    )
    for action, reason in [
        ({"action_type": "fly"}, "unknown_action"),
        ({"action_type": "type"}, "bad_action"),
        ({"action_type": "click", "x": "1", "y": 2}, "bad_action"),
        ({"action_type": "scroll", "direction": "sideways"}, "bad_action"),
        ({"action_type": "open_app"}, "bad_action"),
        ("click", "bad_action"),
    ]:
        with pytest.raises(InvalidRecord) as exc:
            canonical_action(action, screen, "line 1")
        assert exc.value.reason == reason, action
