"""Rule verifiers on real observations from ../shared/data, read through the project's adapters.

Facts used here were read by hand from the files: the mcp-atlas Guggenheim article (pageid 89107),
the mini-swe-agent run (turn 1 fails with return code 1, turn 2 is `ls -la` with ``total 44``),
the CoAT/AITW home screen (``text="Man, Aug 8"``), the OpenCUA pop-up menu (4 elements), the
Mobile-Env Gmail dump (``text="GOT IT"`` button).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from stages.ingest import registry
from stages.ingest.android_render import render_view_xml
from stages.reward.verifiers import (
    JSON_FIELDS,
    NO_VERIFIER,
    TERMINAL,
    UI_ELEMENTS,
    ReferenceMismatch,
    deterministic_lines,
    element_identities,
    exit_status,
    verifier_kind,
    verify,
    verify_json_fields,
    verify_terminal,
    verify_ui_elements,
)
from tests.helpers import ingest_unit


def trajs(shared_data: Path, adapter: str, rel: str, is_dir: bool = False):
    found, bad = ingest_unit(registry.get_adapter(adapter), shared_data / rel, is_dir)
    assert bad == []
    return found


@pytest.fixture(scope="module")
def mcp(shared_data):
    path = next(p for p in sorted((shared_data / "openai-messages/mcp-atlas").rglob("*")) if p.suffix == ".csv")
    return trajs(shared_data, "openai-messages", str(path.relative_to(shared_data)))


@pytest.fixture(scope="module")
def mini(shared_data):
    (t,) = trajs(shared_data, "mini-swe-agent", "mini-swe-agent/github_issue.traj.json")
    return t


@pytest.fixture(scope="module")
def aitw(shared_data):
    (t,) = trajs(shared_data, "aitw", "aitw-aitz/GOOGLE_APPS-523638528775825151.json")
    return t


@pytest.fixture(scope="module")
def opencua(shared_data):
    (t,) = trajs(shared_data, "opencua", "opencua-raw/session-20241106114028", is_dir=True)
    return t


# ------------------------------------------------------------------------------------ JSON fields

def test_mcp_tool_results_get_the_json_verifier_and_pass_against_themselves(mcp):
    refs = [turn.observation for t in mcp for turn in t.turns]
    kinds = [verifier_kind("mcp", r) for r in refs]
    # 42 tool results; 15 are JSON objects (two of them two objects in a row, from the OSM tool)
    assert len(refs) == 42 and kinds.count(JSON_FIELDS) == 15
    for ref, kind in zip(refs, kinds):
        if kind == JSON_FIELDS:
            assert verify_json_fields(ref, ref)
            if ref.count('"place_id"') < 2:  # key order and whitespace do not matter
                assert verify_json_fields(json.dumps(json.loads(ref), indent=2, sort_keys=True), ref)


def test_json_structured_fields_must_match_and_free_text_need_not(mcp):
    ref = mcp[0].turns[0].observation
    doc = json.loads(ref)
    assert doc["pageid"] == 89107 and doc["title"] == "Guggenheim Museum Bilbao"
    assert verify_json_fields(json.dumps({**doc, "summary": "A museum in Spain. " * 10}), ref)  # free text
    assert not verify_json_fields(json.dumps({**doc, "pageid": 89108}), ref)
    assert not verify_json_fields(json.dumps({**doc, "title": "Guggenheim Museum"}), ref)
    assert not verify_json_fields(json.dumps({k: v for k, v in doc.items() if k != "pageid"}), ref)
    assert not verify_json_fields(json.dumps({**doc, "extra": 1}), ref)
    assert not verify_json_fields(json.dumps({**doc, "pageid": "89107"}), ref)  # type counts
    assert not verify_json_fields("The article was found.", ref)


def test_concatenated_json_objects_compare_as_a_list(mcp):
    ref = next(turn.observation for t in mcp for turn in t.turns if turn.observation.count('"place_id"') == 2)
    assert verifier_kind("mcp", ref) == JSON_FIELDS
    first, second = ref.strip().split("\n}\n{", 1)
    assert verify_json_fields(ref, ref)
    assert not verify_json_fields(first + "\n}", ref)  # only one of the two places
    assert verify_json_fields(json.dumps([json.loads(first + "\n}"), json.loads("{" + second)]), ref)


def test_json_volatile_keys_keep_their_type_only(mcp):
    ref = mcp[0].turns[2].observation
    doc = json.loads(ref)
    hit = doc["results"][0]
    assert hit["timestamp"] == "2025-06-12T21:50:49Z" and hit["wordcount"] == 2289
    changed_time = {**doc, "results": [{**hit, "timestamp": "2024-01-01T00:00:00Z"}]}
    assert verify_json_fields(json.dumps(changed_time), ref)
    assert not verify_json_fields(json.dumps({**doc, "results": [{**hit, "wordcount": 2290}]}), ref)
    assert not verify_json_fields(json.dumps({**doc, "results": []}), ref)
    # another turn's real result is not this one
    assert not verify_json_fields(mcp[0].turns[0].observation, ref)


# --------------------------------------------------------------------------------------- terminal

def test_terminal_exit_status_and_error_line_decide(mini):
    ref = mini.turns[0].observation
    assert exit_status(ref) == 1
    assert verifier_kind("terminal", ref) == TERMINAL
    assert verify_terminal(ref, ref)
    assert not verify_terminal(ref.replace("<returncode>1</returncode>", "<returncode>0</returncode>"), ref)
    assert not verify_terminal(ref.replace("No such file or directory", "Permission denied"), ref)
    assert not verify_terminal(mini.turns[1].observation, ref)  # the real next observation


def test_terminal_listing_times_are_volatile_but_the_total_is_not(mini):
    ref = mini.turns[1].observation
    assert exit_status(ref) == 0
    assert deterministic_lines(ref) == ["total 44"]  # every other line carries a date and time
    redated = re.sub(r"Jul 17 01:31", "Aug  2 10:05", ref)
    assert redated != ref and verify_terminal(redated, ref)
    assert not verify_terminal(ref.replace("total 44", "total 48"), ref)


def test_every_mini_swe_agent_turn_passes_against_itself_and_fails_against_a_different_one(mini):
    refs = [t.observation for t in mini.turns]
    assert all(verifier_kind("terminal", r) == TERMINAL for r in refs)
    assert all(verify_terminal(r, r) for r in refs)
    distinct = [(a, b) for a in refs for b in refs if deterministic_lines(a) != deterministic_lines(b)
                or exit_status(a) != exit_status(b)]
    assert distinct and not any(verify_terminal(a, b) and verify_terminal(b, a) for a, b in distinct)


def test_swe_tool_output_lines_are_checked(shared_data):
    (t,) = trajs(shared_data, "swe-agent", "swe-agent/ctf_networking_1.traj")
    ref = t.turns[0].observation
    assert verifier_kind("swe", ref) == TERMINAL
    assert "Protocol Hierarchy Statistics" in deterministic_lines(ref)
    assert verify_terminal(ref, ref)
    assert not verify_terminal(ref.replace("frames:59 bytes:3602", "frames:60 bytes:3602", 1), ref)


# ------------------------------------------------------------------------------------ UI elements

def _shuffle_and_move(screen: str, seed: int = 0) -> str:
    lines = [line for line in screen.splitlines() if line.strip()]
    random.Random(seed).shuffle(lines)
    out = []
    for i, line in enumerate(lines):
        line = re.sub(r"^\[\s*\d+\]", f"[{i:2d}]", line)
        out.append(re.sub(r"bounds=\[(\d+),", lambda m: f"bounds=[{int(m.group(1)) + 3},", line))
    return "\n".join(out)


def test_android_screen_elements_present_and_absent(aitw):
    ref = aitw.turns[0].observation
    assert verifier_kind("android", ref) == UI_ELEMENTS
    assert 'TEXT | text="Man, Aug 8"' in element_identities(ref)
    assert verify_ui_elements(ref, ref)
    assert verify_ui_elements(_shuffle_and_move(ref), ref)  # indices, order, bounds do not matter
    lines = ref.splitlines()
    without = "\n".join(line for line in lines if 'text="Man, Aug 8"' not in line)
    assert not verify_ui_elements(without, ref)
    assert not verify_ui_elements(ref + '\n[99] | TEXT | text="Wi-Fi"', ref)
    assert not verify_ui_elements(aitw.turns[2].observation, ref)


def test_desktop_popup_menu(opencua):
    ref = opencua.turns[1].observation
    assert verifier_kind("os", ref) == UI_ELEMENTS
    assert len(element_identities(ref)) == 4 and 'MenuItem | name="Go to Settings"' in element_identities(ref)
    assert verify_ui_elements(_shuffle_and_move(ref, 3), ref)
    assert not verify_ui_elements(ref.replace('name="Edit quick actions"', 'name="Edit actions"'), ref)
    assert not verify_ui_elements(opencua.turns[2].observation, ref)


def test_real_uiautomator_dumps_rendered_as_screens(shared_data):
    xmls = sorted((shared_data / "uiautomator-xml").rglob("*.xml"))
    screens = [render_view_xml(p.read_text(encoding="utf-8")).text for p in xmls]
    screens = [s for s in screens if element_identities(s)]
    assert len(screens) >= 10
    gmail = render_view_xml((shared_data / "uiautomator-xml/mobile-env/window_dump.example.xml").read_text()).text
    assert any('text="GOT IT"' in i and "clickable" in i for i in element_identities(gmail))
    for s in screens:
        assert verify("ui_elements", s, s) is True
    # two different real screens never pass for each other
    assert not any(verify_ui_elements(a, b) for a in screens for b in screens if element_identities(a) != element_identities(b))


def test_web_page_elements(shared_data):
    from stages.ingest.webvoyager import ADAPTER
    from tests.helpers import ingest_unit

    (t,), bad = ingest_unit(ADAPTER, shared_data / "webvoyager/taskAmazon--0/interact_messages.json")
    assert bad == []
    ref = t.turns[0].observation
    assert verifier_kind("web", ref) == UI_ELEMENTS
    assert 'input | "Search Amazon"' in element_identities(ref)
    assert verify_ui_elements(ref, ref)
    assert not verify_ui_elements(t.turns[1].observation, ref)


# ------------------------------------------------------------------------------------- dispatch

def test_domains_without_a_deterministic_check_get_none(shared_data):
    for f in ("1.json", "5.json", "43.json"):
        for t in trajs(shared_data, "magentic-one", f"magentic-one/{f}"):
            for turn in t.turns:
                if not turn.observation.lstrip().startswith(("{", "[")):
                    assert verifier_kind(t.domain, turn.observation) == NO_VERIFIER
    assert verifier_kind("android", "a screen with no element lines") == NO_VERIFIER
    assert verify(NO_VERIFIER, "x", "y") is None
    with pytest.raises(ValueError, match="unknown verifier"):
        verify("regex", "x", "y")


# ----------------------------------------------------------------------------- hostile predictions

JSON_REF = json.dumps({"status": "ok", "count": 3, "items": [{"id": 1}, {"id": 2}]})
HUGE = "9" * 5000  # more digits than Python's int() converts


@pytest.mark.parametrize("prediction", ["[" * 3000, '{"a": ' * 1200 + "1" + "}" * 1200, "[" * 3000 + "]" * 3000,
                                        '{"status": "ok", "count": ' + HUGE + ', "items": [{"id": 1}, {"id": 2}]}'])
def test_json_python_cannot_read_fails_json_fields_instead_of_raising(prediction):
    assert verify(JSON_FIELDS, prediction, JSON_REF) is False


def test_a_huge_exit_code_in_the_prediction_fails_the_terminal_check_instead_of_raising():
    ref = "exit code: 0\nhello world"
    assert verify(TERMINAL, "exit code: 0\nhello world", ref) is True
    assert verify(TERMINAL, f"exit code: {HUGE}\nhello world", ref) is False
    assert verify(TERMINAL, f"<returncode>{HUGE}</returncode>\nhello world", "<returncode>0</returncode>\nhello world") is False


def test_a_reference_nested_deeper_than_recursion_allows_is_still_compared():
    depth = 600  # json parses it; a recursive comparison did not get to the bottom
    ref = "[" * depth + '{"a": 1}' + "]" * depth
    assert verifier_kind("mcp", ref) == JSON_FIELDS
    assert verify(JSON_FIELDS, ref, ref) is True
    assert verify(JSON_FIELDS, ref.replace('"a": 1', '"a": 2'), ref) is False
    assert verify(JSON_FIELDS, ref.replace('"a": 1', '"b": 1'), ref) is False


@pytest.mark.parametrize(("kind", "reference"), [(JSON_FIELDS, "plain text"), (TERMINAL, "\n  \n"),
                                                 (UI_ELEMENTS, "a screen with no element lines")])
def test_a_reference_the_verifier_cannot_use_is_a_reference_mismatch(kind, reference):
    with pytest.raises(ReferenceMismatch):
        verify(kind, "anything", reference)
