"""magentic-one adapter: WebSurfer steps of real Who&When logs and of a fixture with every action sentence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.trajectory import trajectories_to_table
from stages.ingest import registry
from stages.ingest.magentic_one import ADAPTER
from stages.ingest.reading import InputUnit
from tests.helpers import ingest_unit


def ingest(path: Path, **opts):
    """Read and normalize one unit; return (trajectories, quarantined records)."""
    return ingest_unit(ADAPTER, path, **opts)


def one(path: Path):
    trajs, bad = ingest(path)
    assert bad == [] and len(trajs) == 1
    return trajs[0]


def action(turn) -> dict:
    return json.loads(turn.action)


@pytest.fixture(scope="module")
def real(shared_data):
    return {name: one(shared_data / "magentic-one" / name) for name in ("1.json", "5.json", "43.json")}


def test_real_logs_have_one_turn_per_websurfer_browser_step(real):
    assert {name: len(t.turns) for name, t in real.items()} == {"1.json": 7, "5.json": 3, "43.json": 2}
    assert trajectories_to_table(list(real.values())).num_rows == 3
    assert {t.domain for t in real.values()} == {"search"}


def test_search_and_click_actions_with_page_text(real):
    turns = real["5.json"].turns
    assert action(turns[0]) == {"name": "web_search", "arguments": {"query": "Michael Jackson sixth studio album"}}
    assert turns[0].observation.startswith("Here is a screenshot of [Michael Jackson sixth studio album - Search]")
    assert "Thriller is the sixth studio album by the American singer" in turns[0].observation
    assert action(turns[1]) == {"name": "click", "arguments": {"target": "Thriller (album) - Wikipedia"}}
    assert (
        turns[1].reasoning == "Look up and confirm the fifth single released from Michael Jackson's 'Thriller' album."
    )


def test_typing_into_a_named_field_back_button_and_unnamed_control(real):
    turns = real["1.json"].turns
    assert action(turns[0]) == {
        "name": "input_text",
        "arguments": {
            "text_value": "martial arts schools near the New York Stock Exchange",
            "input_field": "0 characters out of 2000",
        },
    }
    assert [action(t)["name"] for t in turns] == [
        "input_text",
        "click",
        "click",
        "history_back",
        "click",
        "click",
        "history_back",
    ]
    assert action(turns[5]) == {"name": "click", "arguments": {}}  # "I clicked the control."


def test_run_script_log_is_cut_from_the_last_page(real):
    last = real["1.json"].turns[-1]
    assert last.observation.endswith("開啟\n<Image>")
    assert "Traceback" not in last.observation and "SCENARIO.PY" not in last.observation
    assert json.loads(last.meta)["harness_log_chars"] > 0


def test_replies_without_a_page_are_context_and_dataset_fields_go_to_meta(real):
    meta = json.loads(real["5.json"].meta)
    assert meta["surfer_replies"] == 1  # the WebSurfer's spoken answer about "bite"
    assert (meta["final_answer"], meta["ground_truth"], meta["mistake_agent"]) == ("bite", "stare", "WebSurfer")
    assert real["5.json"].split_key == "ed58682d-bc52-4baa-9eb0-4eb81e1edacc"
    assert real["43.json"].system.task_description.startswith(
        "As of May 2023, how many stops are between South Station"
    )


def test_fixture_covers_the_other_action_sentences(fixtures_dir):
    traj = one(fixtures_dir / "magentic-one" / "surfer_dialects.json")
    assert [action(t) for t in traj.turns] == [
        {"name": "visit_url", "arguments": {"url": "https://en.wikipedia.org/wiki/Le_Jules_Verne"}},
        {"name": "page_down", "arguments": {}},
        {"name": "input_text", "arguments": {"text_value": "renamed"}},
        {"name": "hover", "arguments": {"target": "History"}},
        {"name": "answer_question", "arguments": {}},
    ]
    # The surfer's own words before its action sentence follow the orchestrator's instruction.
    assert (
        traj.turns[2].reasoning
        == "Use the page's search box to look for 'renamed'.\n\nThe search box is at the top right."
    )
    assert traj.turns[1].reasoning is None  # no new instruction since the previous step
    # A summary in place of the action sentence opens the observation.
    assert traj.turns[4].observation.startswith("The page says the restaurant has kept the name Le Jules Verne")
    meta = json.loads(traj.meta)
    assert (meta["surfer_replies"], meta["final_answer"]) == (1, "1983")


def test_log_without_browser_steps_is_quarantined(tmp_path):
    path = tmp_path / "no_surfing.json"
    path.write_text(
        json.dumps(
            {
                "question": "2+2?",
                "history": [{"role": "human", "content": "2+2?"}, {"role": "WebSurfer", "content": "4"}],
            }
        )
    )
    trajs, bad = ingest(path)
    assert trajs == [] and [b.reason for b in bad] == ["no_turns"]


def test_registry_sniffs_real_files_and_fixture(shared_data, fixtures_dir):
    paths = [shared_data / "magentic-one" / n for n in ("1.json", "5.json", "43.json")]
    paths.append(fixtures_dir / "magentic-one" / "surfer_dialects.json")
    assert {p.name: registry.sniff(InputUnit(str(p)))[0] for p in paths} == {p.name: "magentic-one" for p in paths}
