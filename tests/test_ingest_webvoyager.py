"""webvoyager: interact_messages.json logs (the real Amazon task and hand-written dialect corners)."""

from __future__ import annotations

import json

import pytest

from schemas.errors import InvalidRecord
from stages.ingest import registry
from stages.ingest.common import canonical_json
from stages.ingest.desktop_render import EMPTY_SCREEN, RenderLimits
from stages.ingest.reading import InputUnit, expand_inputs
from stages.ingest.registry import RawRecord
from stages.ingest.webvoyager import ADAPTER, parse_action, parse_reply, read_observation
from tests.helpers import ingest_unit

REAL = "webvoyager/taskAmazon--0/interact_messages.json"
FIXTURES = "webvoyager"


def run(path, **opts):
    """All trajectories and all quarantined records of one file, as the pipeline would see them."""
    return ingest_unit(ADAPTER, path, **opts)


def one(path):
    trajs, errors = run(path)
    assert errors == []
    (traj,) = trajs
    return traj


@pytest.fixture(scope="module")
def amazon(shared_data):
    return one(shared_data / REAL)


@pytest.fixture(scope="module")
def github(fixtures_dir):
    return one(fixtures_dir / FIXTURES / "taskGitHub--3/interact_messages.json")


def actions(traj):
    return [json.loads(t.action) for t in traj.turns]


def test_real_task_maps_to_three_turns(amazon):
    assert amazon.domain == "web"
    assert amazon.split_key == "Amazon--0"
    assert amazon.system.task_description == (
        "Search an Xbox Wireless controller with green color and rated above 4 stars.  "
        "Please interact with https://www.amazon.com/ and get the answer."
    )
    assert actions(amazon) == [
        {"action": "type", "element": 2, "text": "green Xbox Wireless controller 4 stars"},
        {"action": "click", "element": 33},
        {
            "action": "answer",
            "text": 'The green Xbox Wireless controller ("Xbox Core Wireless Gaming Controller – Velocity Green") '
            "rated above 4 stars has been found on Amazon with a rating of 4.7 out of 5 stars.",
        },
    ]
    assert (
        amazon.turns[0].action == '{"action": "type", "element": 2, "text": "green Xbox Wireless controller 4 stars"}'
    )
    assert amazon.turns[1].reasoning.startswith("The task is to identify a green Xbox Wireless controller")
    meta = json.loads(amazon.meta)
    assert meta["website"] == "https://www.amazon.com/"
    assert meta["session"] == "taskAmazon--0"
    assert meta["answer"].startswith("The green Xbox Wireless controller")


def test_real_observations_are_element_lines_without_instructions(amazon):
    initial = amazon.system.initial_state.splitlines()
    assert len(initial) == 22  # labels 0-2 and 5-23 of the first page
    assert initial[0] == '[ 0] | ".us", "Amazon"'
    assert initial[2] == '[ 2] | input | "Search Amazon"'
    results = amazon.turns[0].observation
    assert (
        '[33] | "Xbox Core Wireless Gaming Controller – Velocity Green – Xbox Series X|S, Xbox One, Windows PC, '
        'Android, and iOS"' in results.splitlines()
    )
    assert '[26] | "4.4 out of 5 stars.\xa01,647", "Rated 4.4 out of 5 stars by 1647 reviews.' in results
    assert '[53] | "4.7 4.7 out of 5 stars"' in amazon.turns[1].observation
    assert amazon.turns[2].observation == ""  # the answer ends the episode
    for text in [amazon.system.initial_state] + [t.observation for t in amazon.turns]:
        assert "please analyze" not in text and "Observation:" not in text and "screenshot" not in text


def test_real_file_is_sniffed_and_found_by_directory_walking(shared_data):
    assert registry.sniff(InputUnit(str(shared_data / REAL)))[0] == "webvoyager"
    units = expand_inputs([str(shared_data / "webvoyager")], claims_dir=registry.claims_dir)
    assert units == [InputUnit(str(shared_data / REAL))]


def test_fixture_actions_cover_every_verb_and_unexecutable_replies(github):
    assert actions(github) == [
        {"action": "type", "element": 4, "text": "astral-sh/ruff"},
        {"action": "click", "element": 5},
        {"action": "scroll", "target": "WINDOW", "direction": "down"},
        {"action": "invalid", "text": "Press [15]"},
        {"action": "invalid", "text": "I believe the repository has about 40.1k stars."},
        {"action": "scroll", "element": 12, "direction": "up"},
        {"action": "wait"},
        {"action": "go_back"},
        {"action": "google"},
        {"action": "type", "element": 3, "text": "ruff github stars"},
        {"action": "click", "element": 4},
        {"action": "answer", "text": "The astral-sh/ruff repository has 40.2k stars."},
    ]
    assert github.turns[3].reasoning == "I will press a key to go up."
    assert github.turns[4].reasoning is None
    # The harness's error replies are what the environment said: kept verbatim.
    assert github.turns[3].observation.startswith("The action you have chosen cannot be exected.")
    assert github.turns[4].observation == "Format ERROR: Both 'Thought' and 'Action' should be included in your reply."
    assert [json.loads(t.meta)["message"] for t in github.turns] == list(range(2, 25, 2))


def test_fixture_observations_keep_notes_and_unicode(github):
    assert github.system.initial_state == (
        '[ 0] | "Skip to content"\n[ 3] | button | "Sign in"\n[ 4] | input | "Search or jump to…"\n[ 7] | "Pricing"'
    )
    assert '[ 6] | "An extremely fast Python linter 🐍⚡"' in github.turns[0].observation
    assert '[15] | "Ruff — Python の高速リンター"' in github.turns[2].observation
    assert github.turns[9].observation == (
        "note: The web element you're trying to type may not be a textbox, and its tag name is <a>, type is None.\n"
        '[ 0] | textarea | "ruff github stars"\n[ 4] | "ruff-stars.pdf"'
    )
    assert github.turns[10].observation == (
        "You downloaded a PDF file, I ask the Assistant API to answer the task based on the PDF file and get the "
        "following response: The report lists 40.2k stars for ruff.\nIt is dated March 2026.\n"
        '[ 0] | "ruff-stars.pdf"'
    )
    assert github.turns[-1].observation == ""


def test_omitted_states_cut_the_trajectory_and_the_unobserved_last_action_is_dropped(fixtures_dir):
    traj = one(fixtures_dir / FIXTURES / "taskBBC News--5/interact_messages.json")
    assert traj.split_key == "BBC News--5"
    assert actions(traj) == [{"action": "click", "element": 8}, {"action": "click", "element": 4}]
    assert traj.system.initial_state == '[ 2] | "Sport"\n[ 8] | "Climate"'
    assert traj.turns[1].observation == '[ 0] | "Glaciers are melting faster than expected"\n[ 6] | "Share"'
    meta = json.loads(traj.meta)
    assert meta["omitted_turns"] == 2
    assert meta["unobserved_final_action"] == {"action": "click", "element": 6}
    assert "answer" not in meta


def test_text_only_runs_keep_the_accessibility_tree(fixtures_dir):
    traj = one(fixtures_dir / FIXTURES / "taskArXiv--2/interact_messages.json")
    assert traj.system.initial_state == (
        "[1] RootWebArea 'arXiv.org e-Print archive' focused: True\n\t[15] searchbox 'Search term or terms'\n"
        "\t[16] button 'Search'"
    )
    assert actions(traj)[0] == {"action": "type", "element": 15, "text": "world models"}
    assert "\t[40] link 'World Models for Agents'" in traj.turns[0].observation
    assert json.loads(traj.meta)["answer"] == "World Models for Agents"


def test_two_replies_in_a_row_are_quarantined(fixtures_dir):
    trajs, errors = run(fixtures_dir / FIXTURES / "broken/interact_messages.json")
    assert trajs == []
    (err,) = errors
    assert (err.reason, err.locator) == ("unexpected_message", "message 3")


def test_every_fixture_is_sniffed_and_walked(fixtures_dir):
    units = expand_inputs([str(fixtures_dir / FIXTURES)], claims_dir=registry.claims_dir)
    assert [u.uri.split("/")[-2] for u in units] == ["broken", "taskArXiv--2", "taskBBC News--5", "taskGitHub--3"]
    for unit in units:
        assert registry.sniff(unit) == ("webvoyager", 0.95)


def test_plain_chat_lists_are_not_webvoyager(tmp_path):
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(chat), encoding="utf-8")
    assert ADAPTER.sniff(registry.Probe(InputUnit(str(path)))) == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Click [12]", {"action": "click", "element": 12}),
        ("Click 7", {"action": "click", "element": 7}),
        ("Type [3]; [hello world]", {"action": "type", "element": 3, "text": "hello world"}),
        ("Scroll [WINDOW]; [up]", {"action": "scroll", "target": "WINDOW", "direction": "up"}),
        ("Scroll [8]; down", {"action": "scroll", "element": 8, "direction": "down"}),
        ("Wait", {"action": "wait"}),
        ("GoBack", {"action": "go_back"}),
        ("Google", {"action": "google"}),
        ("ANSWER; [a] and [b]", {"action": "answer", "text": "[a] and [b]"}),
        ("Type the word", {"action": "invalid", "text": "Type the word"}),
    ],
)
def test_parse_action(text, expected):
    assert parse_action(text) == expected


def test_parse_reply_splits_thought_and_action():
    assert parse_reply("Thought: the button.\nAction: Click [2]\n") == (
        {"action": "click", "element": 2},
        "the button.",
    )
    assert parse_reply("Action: Click [2]") == ({"action": "invalid", "text": "Action: Click [2]"}, None)


def test_observation_corners():
    assert read_observation("Observation: A screenshot, a PDF file and some texts. (Omitted in context.)").omitted
    assert not read_observation(
        'Observation: please analyze the attached screenshot and give the Thought and Action.\n[0]: "a";'
    ).omitted
    empty = "Observation: please analyze the attached screenshot and give the Thought and Action.\n"
    assert read_observation(empty).text == EMPTY_SCREEN
    big = empty + "\t".join(f'[{i}]: "item {i}";' for i in range(400))
    lines = read_observation(big, RenderLimits(max_elements=100)).text.splitlines()
    assert len(lines) == 101 and lines[-1] == "… (300 more elements)"
    assert lines[99] == '[99] | "item 99"'


def test_records_that_are_not_message_lists_are_quarantined(tmp_path):
    opts = registry.resolve_opts(ADAPTER, {})
    record = RawRecord("mem://x/interact_messages.json", "document", "webvoyager", canonical_json({"role": "user"}))
    with pytest.raises(InvalidRecord) as err:
        list(ADAPTER.normalize(record, opts))
    assert err.value.reason == "wrong_type"
    bad = tmp_path / "taskX--1" / "interact_messages.json"
    bad.parent.mkdir()
    bad.write_text('[{"role": "system", "content": "x"},', encoding="utf-8")
    trajs, errors = run(bad)
    assert trajs == [] and [e.reason for e in errors] == ["malformed_json"]


def test_the_fixed_demonstrations_look_like_the_real_turns(amazon):
    """SPEC §4: a web trajectory carries the domain's demonstrations; their observations are element lines as the
    real pages are, and they reach the rendered system prompt."""
    import re

    from stages.templates import render_system

    line = re.compile(r'\[ ?\d+\] \| (?:[a-z]+ \| )?".*"$')
    assert len(amazon.system.demonstrations) == 2
    for demo in amazon.system.demonstrations:
        assert json.loads(demo.action)["action"] in ("type", "click")
        assert all(line.match(x) for x in demo.observation.splitlines()), demo.observation
    real_lines = [x for x in amazon.turns[0].observation.splitlines() if x.startswith("[")]
    assert real_lines and all(line.match(x) for x in real_lines if x.rstrip().endswith('"'))
    system = render_system(amazon, "v0")
    assert all(d.observation in system for d in amazon.system.demonstrations)
