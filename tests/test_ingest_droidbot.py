"""The DroidBot adapter on hand-written output directories (states/, events/, tasks/)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from schemas.errors import InvalidRecord
from stages.ingest import registry
from stages.ingest.android_render import render_elements
from stages.ingest.droidbot import ADAPTER, droidbot_action
from stages.ingest.reading import InputUnit, expand_inputs

OPTS = {"domain": None, "source_kind": "public"}


def ingest(path: Path) -> tuple[dict, list[InvalidRecord]]:
    trajs, bad = {}, []
    for rec in ADAPTER.read(InputUnit(str(path), is_dir=True), OPTS):
        if isinstance(rec, InvalidRecord):
            bad.append(rec)
            continue
        try:
            for traj in ADAPTER.normalize(rec, OPTS):
                trajs[rec.locator] = traj
        except InvalidRecord as exc:
            bad.append(exc)
    return trajs, bad


@pytest.fixture
def runs(fixtures_dir: Path) -> Path:
    return fixtures_dir / "droidbot"


def test_sniff_and_claims_the_output_directory(runs):
    for run in ("notes-run", "explore-run"):
        assert registry.sniff(InputUnit(str(runs / run), is_dir=True))[0] == "droidbot"
        assert registry.claims_dir(str(runs / run))
    assert not ADAPTER.claims_dir(str(runs))
    units = expand_inputs([str(runs)], registry.claims_dir)
    assert units == [InputUnit(str(runs / "explore-run"), is_dir=True), InputUnit(str(runs / "notes-run"), is_dir=True)]


def test_a_task_file_is_one_trajectory_over_its_events(runs):
    trajs, _ = ingest(runs / "notes-run")
    traj = trajs["member tasks/new_note.yaml"]
    assert traj.domain == "android" and traj.source.format == "droidbot"
    assert traj.system.task_description == "Write a note that says Buy milk"
    assert traj.split_key == "notes-buy-milk"
    assert json.loads(traj.meta)["app"] == "com.example.notes"
    initial = traj.system.initial_state.split("\n")
    assert initial == [
        '[ 0] | android.widget.TextView | res=com.example.notes:id/title | text="Notes" | bounds=[48,120][600,220]',
        '[ 1] | android.widget.ImageButton | res=com.example.notes:id/fab | desc="New note" | bounds=[880,2100][1032,2252] '
        "| clickable",
        '[ 2] | android.widget.TextView | text="Groceries" | bounds=[0,300][1080,420] | clickable | long-clickable',
    ]  # the invisible "ghost row" and the empty View are pruned
    assert [t.action for t in traj.turns] == [
        '{"action_type": "click", "x": 956, "y": 2176, "element": 1}',  # the touched view is the FAB
        '{"action_type": "type", "text": "Buy milk", "element": 0}',
    ]
    assert traj.turns[0].observation.startswith(
        "[ 0] | android.widget.EditText | res=com.example.notes:id/body | bounds="
    )
    assert 'text="Buy milk"' in traj.turns[1].observation


def test_an_event_whose_stop_state_is_missing_quarantines_its_trajectory(runs):
    trajs, bad = ingest(runs / "notes-run")
    assert sorted(trajs) == ["member tasks/new_note.yaml"]
    (missing,) = bad
    assert missing.reason == "missing_state"
    assert missing.locator == "member events/event_2024-05-01_101512.json"
    assert "deadbeef" in missing.detail


def test_without_tasks_the_run_follows_every_event_by_tag(runs):
    trajs, bad = ingest(runs / "explore-run")
    assert bad == []
    traj = trajs["run"]
    assert traj.system.task_description == "Free exploration of com.example.notes (no task given)"
    assert traj.split_key == traj.traj_id
    assert [t.action for t in traj.turns] == [
        '{"action_type": "open_app", "app": "com.example.notes"}',  # event_…101459 sorts before …101503
        '{"action_type": "click", "x": 956, "y": 2176, "element": 1}',
    ]


def test_task_naming_an_unknown_event_or_unreadable_yaml_is_quarantined(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs / "notes-run", run)
    (run / "tasks" / "note_then_back.json").unlink()
    (run / "tasks" / "ghost.yaml").write_text("task: Nothing\nevents: [2030-01-01_000000]\n")
    (run / "tasks" / "broken.yml").write_text("task: [unclosed\n")
    trajs, bad = ingest(run)
    assert sorted(trajs) == ["member tasks/new_note.yaml"]
    assert sorted((b.reason, b.locator) for b in bad) == [
        ("malformed_yaml", "member tasks/broken.yml"),
        ("missing_event", "member tasks/ghost.yaml"),
    ]


def test_event_types_map_to_structured_actions():
    screen = render_elements([])
    cases = [
        ({"event_type": "key", "name": "HOME"}, '{"action_type": "home"}'),
        ({"event_type": "key", "name": "VOLUME_UP"}, '{"action_type": "key", "name": "VOLUME_UP"}'),
        (
            {"event_type": "intent", "intent": "am force-stop com.x"},
            '{"action_type": "intent", "command": "am force-stop com.x"}',
        ),
        ({"event_type": "intent", "intent": "am start com.x.y/.Main"}, '{"action_type": "open_app", "app": "com.x.y"}'),
        ({"event_type": "long_touch", "x": 10.4, "y": 20.6}, '{"action_type": "long_press", "x": 10, "y": 21}'),
        ({"event_type": "scroll", "direction": "UP"}, '{"action_type": "scroll", "direction": "up"}'),
        (
            {"event_type": "swipe", "start_x": 1, "start_y": 2, "end_x": 3, "end_y": 4},
            '{"action_type": "swipe", "x1": 1, "y1": 2, "x2": 3, "y2": 4}',
        ),
        ({"event_type": "exit"}, '{"action_type": "terminate"}'),
    ]
    for event, expected in cases:
        assert droidbot_action(event, screen, "") == expected
    for event, reason in [({"event_type": "teleport"}, "unknown_action"), ({"event_type": "touch"}, "bad_action")]:
        with pytest.raises(InvalidRecord) as exc:
            droidbot_action(event, screen, "member events/e.json")
        assert exc.value.reason == reason
