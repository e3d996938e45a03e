"""WMAT output format: parsing, adherence reasons, `lwm check-format`, and the no-spoiler check."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from stages.reward.wmat_format import (
    check_block,
    check_output,
    find_spoilers,
    parse_confidence,
    parse_keywords,
    render_block,
    render_policy,
)
from tests.helpers import lwm_in_process

ROOT = Path(__file__).resolve().parent.parent

GOOD = (
    "<imaginary>Open the most relevant result, then scan it for the quoted finding.</imaginary>\n"
    "<keyword>noise, field study; Noise</keyword>\n"
    "<analysis>No source page is open yet; the next step is to open one result.</analysis>\n"
    "<confidence>65%</confidence>\n"
    "<think>The second result looks like a review.</think>\n"
    '<action>{"action": "click", "id": 2}</action>'
)


def test_a_well_formed_output_parses_into_fields_keywords_q_and_spans():
    result = check_output(GOOD)
    assert result.ok, result.reason
    out = result.output
    assert out.keywords == ("noise", "field study")  # "Noise" is a case-insensitive duplicate
    assert out.confidence == pytest.approx(0.65)
    assert out.action == '{"action": "click", "id": 2}'
    assert out.think == "The second result looks like a review."
    wm_start, wm_end = out.wm_span
    p_start, p_end = out.policy_span
    assert GOOD[wm_start:wm_end].startswith("<imaginary>") and GOOD[wm_start:wm_end].endswith("</confidence>")
    assert GOOD[p_start:p_end].startswith("<think>") and GOOD[p_start:p_end].endswith("</action>")
    assert wm_end <= p_start


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (GOOD.replace("<confidence>65%</confidence>\n", ""), "missing_tag:confidence"),
        (GOOD.replace("65%", "quite likely"), "confidence_unparseable"),
        (GOOD.replace("65%", "140%"), "confidence_unparseable"),
        (GOOD.replace("</analysis>", ""), "unclosed_tag:analysis"),
        (GOOD.replace("</analysis>", "</think>"), "mismatched_tag:analysis"),
        (GOOD.replace("<analysis>No", "<analysis><keyword>No"), "unclosed_tag:analysis"),
        (GOOD + "\n<action>again</action>", "duplicate_tag:action"),
        ("Sure! " + GOOD, "text_outside_tags"),
        (GOOD + " trailing words", "text_outside_tags"),
        (GOOD.replace("<imaginary>Open", "<imaginary> ").replace(
            " the most relevant result, then scan it for the quoted finding.", ""), "empty_tag:imaginary"),
        (GOOD.replace("noise, field study; Noise", " , ; "), "empty_tag:keyword"),
        (GOOD.replace("<think>The second result looks like a review.</think>\n", ""), "missing_tag:think"),
        ("</imaginary>" + GOOD, "unopened_tag:imaginary"),
    ],
)
def test_malformed_outputs_fail_with_their_reason(text, reason):
    result = check_output(text)
    assert not result.ok
    assert result.reason == reason
    assert result.output is None


def test_think_may_be_empty_but_action_may_not():
    assert check_output(GOOD.replace("The second result looks like a review.", "")).ok
    assert check_output(GOOD.replace('{"action": "click", "id": 2}', " ")).reason == "empty_tag:action"


def test_block_is_the_world_model_span_alone():
    block = GOOD.split("\n<think>")[0]
    assert check_block(block).ok
    assert check_block(GOOD).reason == "unexpected_tag:think"
    assert check_output(block).reason == "missing_tag:think"


@pytest.mark.parametrize(("text", "q"), [("70", 0.7), ("70%", 0.7), (" 72.5 % ", 0.725), ("0", 0.0), ("100%", 1.0)])
def test_confidence_is_a_percentage_rescaled_to_unit(text, q):
    assert parse_confidence(text) == pytest.approx(q)


@pytest.mark.parametrize("text", ["", "high", "-5%", "101", "70%%", "0.7 or 0.8", "70 percent"])
def test_confidence_rejects_anything_but_one_percentage(text):
    assert parse_confidence(text) is None


def test_keywords_split_on_commas_semicolons_newlines():
    assert parse_keywords("a b,  c;\nd\n\n, A  B") == ("a b", "c", "d")


def test_rendered_block_and_policy_round_trip():
    text = render_block("Roadmap.", ["x", "y z"], "Gap.", 0.4) + "\n" + render_policy("", '{"action": "back"}')
    out = check_output(text).output
    assert out.keywords == ("x", "y z") and out.confidence == pytest.approx(0.4)
    assert out.action == '{"action": "back"}'


# -- no spoilers ------------------------------------------------------------------------------

KNOWN = ("What does recent reporting say about wind turbine noise? Quote the key finding.\n"
         "Search results for \"wind turbine overview\"\n[1] Wind turbine noise: a review\n"
         "    https://research.example.net/wind-turbine-noise-798\n")
FUTURE = ("Title: Wind turbine noise: open questions\nURL: https://journal.example.edu/wind-turbine-noise-949\n"
          "By Emeka Silva · Oct 2020\nIndependent reviewers noted the effect is strongest in Tallinn and "
          "weakest near the coast.\nA 2023 field study found the backlog grew to 39 thousand cases before Jun.\n")


def test_an_abstract_block_has_no_spoilers():
    block = ("<imaginary>Open a promising result, read the page, and locate the sentence with the key "
             "finding about wind turbine noise.</imaginary>\n<keyword>wind turbine noise, review</keyword>\n"
             "<analysis>The [1] review looks relevant; open it next.</analysis>\n<confidence>60%</confidence>")
    assert find_spoilers(block, FUTURE, KNOWN) == []


@pytest.mark.parametrize(
    ("leak", "kind", "text"),
    [
        ("The page says it is strongest in Tallinn.", "proper_noun", "Tallinn"),
        ("Expect about 39 thousand cases.", "number", "39"),
        ("It was written in 2020.", "number", "2020"),
        ("Open journal.example.edu/wind-turbine-noise-949 next.", "identifier",
         "journal.example.edu/wind-turbine-noise-949"),
    ],
)
def test_concrete_future_entities_are_spoilers(leak, kind, text):
    spoilers = find_spoilers(f"<imaginary>{leak}</imaginary>", FUTURE, KNOWN)
    assert (kind, text) in {(s.kind, s.text) for s in spoilers}


def test_copied_future_phrases_are_spoilers_from_the_ngram_length_on():
    block = "<imaginary>We will learn the effect is strongest near the coast.</imaginary>"
    # the block shares "the effect is strongest" (4 words) with the future, no 5-word run
    assert find_spoilers(block, FUTURE, KNOWN) == []
    assert [(s.kind, s.text) for s in find_spoilers(block, FUTURE, KNOWN, ngram=4)] == [
        ("phrase", "the effect is strongest")]


def test_entities_already_known_are_not_spoilers():
    block = "<imaginary>The review at research.example.net/wind-turbine-noise-798 may help.</imaginary>"
    future = FUTURE + "See https://research.example.net/wind-turbine-noise-798 again.\n"
    assert find_spoilers(block, future, KNOWN) == []


def test_a_sentence_opening_capital_is_not_a_proper_noun():
    # "Independent" opens a line in the future text; a block may use the word
    assert find_spoilers("<analysis>Independent sources would help.</analysis>", FUTURE, KNOWN) == []


# -- lwm check-format --------------------------------------------------------------------------


def _lwm(*args: str) -> subprocess.CompletedProcess:
    """`lwm ARGS` in this process: the report and the exit status are what is checked."""
    return lwm_in_process(*args)


def test_check_format_reports_adherence_and_reasons(tmp_path):
    lines = [{"output": GOOD}, {"completion": GOOD}, GOOD,
             {"output": GOOD.replace("<confidence>65%</confidence>\n", "")},
             {"output": GOOD.replace("65%", "likely")},
             {"output": "<think>no world model</think><action>x</action>"}]
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    proc = _lwm("check-format", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["outputs"] == 6 and report["in_format"] == 3
    assert report["adherence"] == pytest.approx(0.5)
    assert report["reasons"] == {"missing_tag:confidence": 1, "confidence_unparseable": 1,
                                 "missing_tag:imaginary": 1}
    text = _lwm("check-format", str(path))
    assert "3/6 outputs in format (adherence 50.00%)" in text.stdout
    assert _lwm("check-format", str(path), "--min-adherence", "0.6").returncode == 1
    assert _lwm("check-format", str(path), "--min-adherence", "0.5").returncode == 0


def test_check_format_names_the_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"output": GOOD}) + "\n{not json\n", encoding="utf-8")
    proc = _lwm("check-format", str(path))
    assert proc.returncode == 2
    assert f"{path}:2: not JSON" in proc.stderr


def test_check_format_names_a_line_that_is_not_utf8_and_reads_a_byte_order_mark(tmp_path):
    path = tmp_path / "outs.jsonl"
    path.write_bytes(b'{"output": "a"}\n\xff\xfe\n')
    proc = _lwm("check-format", str(path))
    assert proc.returncode == 2 and proc.stderr.strip() == f"lwm: error: {path}:2: not UTF-8 (byte 0xff at character 1)"
    path.write_bytes(b'\xef\xbb\xbf{"output": "a"}\n')
    proc = _lwm("check-format", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs"] == 1


def test_check_format_of_a_file_without_outputs_says_so(tmp_path):
    """0 of 0 is no adherence: the report said 0.00% with status 0 (and 1 with --min-adherence)."""
    path = tmp_path / "empty.jsonl"
    path.write_text("\n", encoding="utf-8")
    proc = _lwm("check-format", str(path), "--min-adherence", "0.5")
    assert proc.returncode == 2 and proc.stderr.strip() == f"lwm: error: {path}: holds no outputs (one JSON object per line)"


# -- the README's examples --------------------------------------------------------------------------


def _readme_fences(section: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return [part.split("\n", 1)[1] for part in body.split("```")[1::2]]


def test_the_readme_example_output_is_in_format():
    example = _readme_fences("World-model agentic training (WMAT)")[0]
    result = check_output(example.strip())
    assert result.ok, result.reason
    assert result.output.keywords == ("wind turbine noise", "review", "finding")
    assert result.output.confidence == pytest.approx(0.65)


def test_the_readme_config_resolves():
    import tomllib

    from pipeline.config import resolve

    toml = next(f for f in _readme_fences("World-model agentic training (WMAT)") if f.startswith("[llm]"))
    cfg = resolve(tomllib.loads(toml))
    assert cfg["llm"]["stages"] == ["wmat_blocks"] and cfg["llm"]["wmat_steps"] == 2
