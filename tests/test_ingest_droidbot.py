"""The DroidBot adapter on output directories written to DroidBot's layout, and DroidTask task files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.errors import InvalidRecord
from stages.ingest import registry
from stages.ingest.android_render import render_elements
from stages.ingest.droidbot import ADAPTER, droidbot_action
from stages.ingest.reading import InputUnit, expand_inputs

OPTS = {"domain": None, "source_kind": "public"}


def ingest(path: Path) -> tuple[dict, list[InvalidRecord]]:
    """Trajectories by locator (pieces of one record as ``locator#n``), and the bad records."""
    trajs, bad = {}, []
    for rec in ADAPTER.read(InputUnit(str(path), is_dir=True), OPTS):
        if isinstance(rec, InvalidRecord):
            bad.append(rec)
            continue
        try:
            pieces = list(ADAPTER.normalize(rec, OPTS))
        except InvalidRecord as exc:
            bad.append(exc)
            continue
        for n, traj in enumerate(pieces, 1):
            trajs[rec.locator if len(pieces) == 1 else f"{rec.locator}#{n}"] = traj
    return trajs, bad


@pytest.fixture
def runs(fixtures_dir: Path) -> Path:
    return fixtures_dir / "droidbot"


def test_sniff_and_claims_the_output_directory(runs):
    for run in ("notes-run", "explore-run", "launcher-run", "droidtask-notes"):
        assert registry.sniff(InputUnit(str(runs / run), is_dir=True))[0] == "droidbot"
        assert registry.claims_dir(str(runs / run))
    assert not ADAPTER.claims_dir(str(runs))
    units = expand_inputs([str(runs)], registry.claims_dir)
    assert [Path(u.uri).name for u in units] == ["droidtask-notes", "explore-run", "launcher-run", "notes-run"]


def test_a_run_is_one_trajectory_and_an_event_without_its_stop_state_costs_that_event(runs):
    trajs, bad = ingest(runs / "notes-run")
    assert bad == []
    traj = trajs["run"]
    assert traj.domain == "android" and traj.source.format == "droidbot"
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
    # The BACK event's stop state (deadbeef0000) is not in states/: that event is dropped, the run stays.
    (dropped,) = json.loads(traj.meta)["dropped_events"]
    assert dropped["member"] == "events/event_2024-05-01_101512.json" and "deadbeef" in dropped["reason"]


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


def test_real_run_shape_kill_app_lost_event_and_a_broken_state_chain(runs):
    trajs, bad = ingest(runs / "launcher-run")
    # The empty event file costs that event only: reported as a skipped member, not the run.
    assert [(type(b).__name__, b.reason, b.locator) for b in bad] == [
        ("SkippedMember", "empty_file", "member events/event_2024-06-03_090012.json")
    ]
    first, second = trajs["run#1"], trajs["run#2"]
    assert [json.loads(t.action)["action_type"] for t in first.turns] == ["close_app", "open_app", "click"]
    assert json.loads(first.turns[0].action) == {"action_type": "close_app", "app": "com.example.notes"}
    # The run starts on the launcher; the task names the app that was launched.
    assert first.system.task_description == "Free exploration of com.example.notes (no task given)"
    assert 'text="Notes"' in first.system.initial_state
    # After the lost event the next one starts on another screen: a new piece starts there.
    assert [json.loads(t.action)["action_type"] for t in second.turns] == ["back", "manual", "terminate"]
    assert 'text="Buy milk"' in second.system.initial_state
    meta = json.loads(second.meta)
    assert meta["state_chain_breaks"] == 1 and meta["segment"] == 2
    assert [d["member"] for d in meta["dropped_events"]] == ["events/event_2024-06-03_090020.json"]  # "teleport"
    assert first.split_key == second.split_key and first.traj_id != second.traj_id


def test_skipped_member_is_counted_apart_from_records(runs):
    from schemas.stats import Stats
    from stages.normalize import normalize_unit

    stats = Stats()
    items = list(normalize_unit(InputUnit(str(runs / "launcher-run"), is_dir=True), ADAPTER, OPTS, stats))
    assert stats.get("records.read") == 1 and stats.get("records.quarantined") == 0
    assert stats.get("members.skipped") == 1 and stats.get("skipped.empty_file") == 1
    assert sum(len(i.trajectories) for i in items) == 2
    assert [i.quarantine["locator"] for i in items if i.quarantine] == ["member events/event_2024-06-03_090012.json"]


def test_validate_reports_the_skipped_member_apart(runs):
    from pipeline.validate import validate_inputs

    lines: list[str] = []
    report = validate_inputs([str(runs / "launcher-run")], None, None, {}, echo=lines.append)
    assert (report["records"], report["quarantined"], report["trajectories"]) == (1, 0, 2)
    assert report["skipped"] == {"empty_file": 1}
    assert "ingest: 1 records read, 0 quarantined, 1 damaged member file skipped" in lines  # `lwm run`'s words
    assert any("member events/event_2024-06-03_090012.json: empty_file" in line for line in lines)


def test_droidtask_task_files_are_one_trajectory_each(runs):
    trajs, bad = ingest(runs / "droidtask-notes")
    assert [(b.reason, b.locator) for b in bad] == [("malformed_yaml", "member task3.yaml")]
    task1 = trajs["member task1.yaml"]
    assert task1.system.task_description == "Create a note that says Buy milk"
    assert task1.split_key == "Create a note that says Buy milk"
    assert task1.system.initial_state.startswith("<button id=0>Notes</button>")
    assert [json.loads(t.action) for t in task1.turns] == [
        {"action_type": "click", "element": 1},
        {"action_type": "type", "element": 0, "text": "Buy milk"},
        {"action_type": "complete", "status": "successful"},
    ]
    assert task1.turns[0].observation == "<input id=0></input>\n<button id=1 label='Navigate up'></button>"
    assert task1.turns[2].observation.startswith("<input id=0>Buy milk</input>")
    assert json.loads(task1.meta) == {"tool": "droidtask", "file": "task1.yaml", "step_num": 3}
    # task2: the second record does not start where the first ended (f7aa01 vs f7aa09): the first step has
    # no observed screen and is dropped; the rest is a trajectory of its own.
    task2 = trajs["member task2.yaml"]
    assert [json.loads(t.action)["action_type"] for t in task2.turns] == ["click", "complete"]
    assert task2.system.initial_state.startswith("<input id=0>Eggs</input>")
    meta = json.loads(task2.meta)
    assert (meta["state_chain_breaks"], meta["unobserved_steps"]) == (1, 1)
    # The DroidBot output beside the task files is read as the exploration run it is.
    assert trajs["run#1"].system.task_description == "Free exploration of com.example.notes (no task given)"


def test_event_types_map_to_structured_actions():
    screen = render_elements([])
    cases = [
        ({"event_type": "key", "name": "HOME"}, '{"action_type": "home"}'),
        ({"event_type": "key", "name": "VOLUME_UP"}, '{"action_type": "key", "name": "VOLUME_UP"}'),
        (
            {"event_type": "intent", "intent": "am force-stop com.x.y"},
            '{"action_type": "close_app", "app": "com.x.y"}',
        ),
        (
            {"event_type": "intent", "intent": "am broadcast -a android.intent.action.BOOT_COMPLETED"},
            '{"action_type": "intent", "command": "am broadcast -a android.intent.action.BOOT_COMPLETED"}',
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
    more = [
        ({"event_type": "kill_app", "stop_intent": "am force-stop com.x.y"}, '{"action_type": "close_app", "app": "com.x.y"}'),
        ({"event_type": "click", "x": 5, "y": 6}, '{"action_type": "click", "x": 5, "y": 6}'),
        ({"event_type": "long_click", "x": 5, "y": 6}, '{"action_type": "long_press", "x": 5, "y": 6}'),
        ({"event_type": "spawn"}, '{"action_type": "spawn"}'),
        ({"event_type": "manual", "time": 1.0}, '{"action_type": "manual"}'),
    ]
    for event, expected in more:
        assert droidbot_action(event, screen, "") == expected
    for event, reason in [({"event_type": "teleport"}, "unknown_action"), ({"event_type": "touch"}, "bad_action")]:
        with pytest.raises(InvalidRecord) as exc:
            droidbot_action(event, screen, "member events/e.json")
        assert exc.value.reason == reason


def test_files_of_another_format_under_format_droidbot_are_quarantined_not_dropped(tmp_path):
    """Forced onto files it cannot read, the adapter says so for each one instead of yielding nothing."""
    from tests.helpers import lwm_in_process

    src = tmp_path / "logs"
    src.mkdir()
    (src / "chat.jsonl").write_text('{"messages": []}\n')
    (src / "notes.json").write_text("{}")
    proc = lwm_in_process("validate", "--format", "droidbot", "--json", str(src))
    report = json.loads(proc.stdout)
    assert (report["records"], report["quarantined"], report["reasons"]) == (2, 2, {"wrong_format": 2})
    assert proc.returncode == 1


def test_a_task_file_given_alone_under_format_droidbot_is_read(fixtures_dir):
    from tests.helpers import ingest_unit

    path = fixtures_dir / "droidbot" / "droidtask-notes" / "task1.yaml"
    trajs, bad = ingest_unit(ADAPTER, path)
    assert bad == [] and len(trajs) == 1 and len(trajs[0].turns) == 3
