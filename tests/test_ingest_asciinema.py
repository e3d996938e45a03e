"""asciinema adapter: keystroke grouping, observations, full-screen programs, the keystroke-log sidecar."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from schemas.trajectory import trajectories_to_table
from stages.ingest import registry
from stages.ingest.asciinema import ADAPTER
from stages.ingest.reading import InputUnit
from tests.helpers import ingest_unit

PROMPT = "user@box:~/app$ "


def ingest(path: Path, **opts):
    """Read and normalize one unit; return (trajectories, quarantined records)."""
    return ingest_unit(ADAPTER, path, **opts)


def keys_of(turn) -> str:
    return json.loads(turn.action)[0]["keystrokes"]


def write_cast(path: Path, header: dict, events: list) -> Path:
    path.write_text("\n".join(json.dumps(x) for x in [header, *events]) + "\n")
    return path


@pytest.fixture(scope="module")
def session(fixtures_dir):
    trajs, bad = ingest(fixtures_dir / "asciinema" / "session.cast")
    assert bad == []
    return trajs[0]


def test_session_groups_keystrokes_into_seven_commands(session):
    assert [keys_of(t) for t in session.turns] == [
        "ls\n",
        "pip install -r requirements.txt\n",
        "vim notes.txt\n",
        "ibuy milk\x1b:wq\n",  # every key typed inside vim, one action ending when vim leaves the screen
        "sleep 30\n",
        "\x03",
        "exit\n",
    ]
    assert session.domain == "terminal"
    assert session.system.task_description == "install deps and write notes"


def test_initial_state_is_the_output_before_the_first_key(session):
    assert session.system.initial_state == "Welcome to box\n" + PROMPT


def test_colored_output_is_plain_text_without_the_echoed_command(session):
    assert session.turns[0].observation == "src  README.md  run.sh\n" + PROMPT


def test_progress_bar_keeps_only_its_final_state(session):
    observation = session.turns[1].observation
    assert observation == (
        "Downloading rich-13.7.0 (240 kB)\n  [##########] 100%\nSuccessfully installed rich-13.7.0\n" + PROMPT
    )


def test_bracketed_paste_is_one_command_without_markers(session):
    assert "\x1b[200~" not in session.turns[1].action and "\\u001b[200~" not in session.turns[1].action


def test_full_screen_program_becomes_a_placeholder_and_its_exit_shows_the_prompt(session):
    assert session.turns[2].observation == "[full-screen program: vim]\n"
    assert session.turns[3].observation == PROMPT


def test_interrupt_ends_a_command_without_enter(session):
    assert session.turns[4].observation == ""  # still running when Ctrl-C came
    assert session.turns[5].observation == "^C\n" + PROMPT
    assert session.turns[6].observation == "exit\n"  # the late echo "exit" is dropped, bash's own "exit" stays


def test_duration_is_time_from_enter_to_the_next_keystroke(session):
    durations = [json.loads(t.action)[0]["duration"] for t in session.turns]
    assert durations == [1.8, 2.5, 1.0, 1.6, 2.0, 2.0, 0.01]
    assert json.loads(session.turns[3].meta) == {"t": 8.4}


def test_trajectories_fit_the_arrow_schema(session):
    assert trajectories_to_table([session]).num_rows == 1


def test_keystroke_log_sidecar_supplies_the_input(fixtures_dir):
    trajs, bad = ingest(fixtures_dir / "asciinema" / "recorded.cast")
    assert bad == []
    (traj,) = trajs
    assert json.loads(traj.meta)["input_source"] == "keys_log"
    assert [keys_of(t) for t in traj.turns] == ["df -h\n", "exit\n"]
    assert traj.turns[0].observation == "Filesystem      Size  Used\n/dev/sda1        50G   20G\n$ "
    assert traj.turns[1].observation == ""  # only the echo of "exit" followed
    assert traj.system.initial_state == "$ "


def test_sidecar_file_alone_yields_nothing_when_its_cast_exists(fixtures_dir):
    assert ingest(fixtures_dir / "asciinema" / "recorded.keys.jsonl") == ([], [])


def test_orphan_keystroke_log_is_quarantined(tmp_path):
    keys = tmp_path / "lost.keys.jsonl"
    keys.write_text('{"t": 1, "keys": "ls\\r"}\n')
    assert registry.sniff(InputUnit(str(keys)))[0] == "asciinema"
    trajs, bad = ingest(keys)
    assert trajs == [] and [b.reason for b in bad] == ["orphan_keys_log"]


def test_output_only_recording_is_quarantined(fixtures_dir):
    trajs, bad = ingest(fixtures_dir / "asciinema" / "output_only.cast")
    assert trajs == []
    assert [b.reason for b in bad] == ["no_input_events"]


def test_v3_intervals_are_accumulated_into_times(tmp_path):
    header = {"version": 3, "term": {"cols": 80, "rows": 24}, "title": "v3"}
    events = [[0.5, "o", "$ "], [1.0, "i", "pwd\r"], [0.1, "o", "\r\n/home/me\r\n$ "], [2.0, "i", "exit\r"]]
    (traj,), bad = ingest(write_cast(tmp_path / "v3.cast", header, events))
    assert bad == []
    # Enter at 0.5 + 1.0 = 1.5 s, the next key at 1.5 + 0.1 + 2.0 = 3.6 s.
    assert json.loads(traj.turns[0].action) == [{"keystrokes": "pwd\n", "duration": 2.1}]
    assert traj.turns[0].observation == "/home/me\n$ "


def test_keys_never_submitted_are_counted_not_turned(tmp_path):
    header = {"version": 2, "width": 80, "height": 24}
    events = [[0.1, "o", "$ "], [1.0, "i", "ls\r"], [1.1, "o", "\r\na\r\n$ "], [2.0, "i", "rm -rf"]]
    (traj,), _ = ingest(write_cast(tmp_path / "typed.cast", header, events))
    assert len(traj.turns) == 1
    assert json.loads(traj.meta)["unsubmitted_keys"] == len("rm -rf")


def test_malformed_event_line_quarantines_the_recording_with_its_line(tmp_path):
    path = tmp_path / "bad.cast"
    path.write_text('{"version": 2, "width": 80, "height": 24}\n[0.1, "o", "$ "]\n[0.2, "o"]\n')
    trajs, bad = ingest(path)
    assert trajs == []
    assert [(b.reason, b.locator) for b in bad] == [("malformed_event", "line 3")]


def test_wrong_header_is_quarantined(tmp_path):
    path = tmp_path / "v1.cast"
    path.write_text('{"version": 1, "stdout": []}\n')
    assert [b.reason for b in ingest(path)[1]] == ["wrong_format"]


@pytest.mark.parametrize("name", ["session.cast", "recorded.cast", "output_only.cast", "recorded.keys.jsonl"])
def test_registry_sniffs_the_fixtures_as_asciinema(fixtures_dir, name):
    assert registry.sniff(InputUnit(str(fixtures_dir / "asciinema" / name)))[0] == "asciinema"


def test_compressed_recording_finds_its_plain_keystroke_log(tmp_path, fixtures_dir):
    source = fixtures_dir / "asciinema"
    (tmp_path / "recorded.cast.gz").write_bytes(gzip.compress((source / "recorded.cast").read_bytes()))
    (tmp_path / "recorded.keys.jsonl").write_bytes((source / "recorded.keys.jsonl").read_bytes())
    (traj,), bad = ingest(tmp_path / "recorded.cast.gz")
    assert bad == [] and [keys_of(t) for t in traj.turns] == ["df -h\n", "exit\n"]
    assert registry.sniff(InputUnit(str(tmp_path / "recorded.cast.gz")))[0] == "asciinema"
    assert ingest(tmp_path / "recorded.keys.jsonl") == ([], [])  # read with its compressed recording
