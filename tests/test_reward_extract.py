"""Strict extraction: only the one <predicted_observation> pair counts; tag trouble is a format failure."""

from __future__ import annotations

import pytest

from stages.render import target_reply
from stages.reward.extract import extract_prediction
from tests.helpers import vendored_eval_function


def test_the_rendered_target_reply_gives_back_the_observation_exactly():
    obs = "  total 8\n-rw-r--r-- 1 root root 0 a.txt\n\nroot@box:/app# "
    ex = extract_prediction(target_reply(obs, "I think ls lists one file.\n"))
    assert ex.ok and ex.prediction == obs


def test_reasoning_outside_the_tags_is_ignored():
    ex = extract_prediction("The answer is surely 42.\n<predicted_observation>\n7\n</predicted_observation>\nso 42!")
    assert ex.status == "ok" and ex.prediction == "7"


def test_tags_inside_a_complete_think_block_do_not_count():
    text = "<think>maybe <predicted_observation>x</predicted_observation>?</think><predicted_observation>\ny\n</predicted_observation>"
    assert extract_prediction(text).prediction == "y"


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("just an answer with no tags", "missing"),
        ("", "missing"),
        ("<predicted_observation>\nopen but never closed", "missing"),
        ("closed only</predicted_observation>", "missing"),
        ("<predicted_observation>a</predicted_observation><predicted_observation>b</predicted_observation>", "duplicate"),
        ("<predicted_observation>a<predicted_observation>b</predicted_observation>", "duplicate"),
        ("</predicted_observation>a<predicted_observation>", "misordered"),
        ("<PREDICTED_OBSERVATION>a</PREDICTED_OBSERVATION>", "missing"),
    ],
)
def test_missing_duplicated_or_misordered_tags_are_format_failures(text, status):
    ex = extract_prediction(text)
    assert ex.status == status and ex.prediction is None and not ex.ok


def test_only_one_newline_next_to_each_tag_is_removed():
    ex = extract_prediction("<predicted_observation>\n\n  x  \n\n</predicted_observation>")
    assert ex.prediction == "\n  x  \n"


def test_an_empty_prediction_is_well_formed():
    assert extract_prediction("<predicted_observation>\n</predicted_observation>").prediction == ""


# ------------------------------------------------------------------------------ thinking models

QUOTING = "I must answer between <predicted_observation> and </predicted_observation>."


def test_reasoning_before_a_lone_closing_think_tag_is_dropped():
    """R1/QwQ/Qwen3-Thinking templates put <think> in the prompt: the completion holds only </think>."""
    ex = extract_prediction(f"{QUOTING}\n</think>\n\n<predicted_observation>\nX\n</predicted_observation>")
    assert ex.ok and ex.prediction == "X"


def test_tags_after_the_lone_closing_think_tag_still_count():
    ex = extract_prediction(f"{QUOTING}\n</think>\n<predicted_observation>\na\n</predicted_observation>"
                            "<predicted_observation>\nb\n</predicted_observation>")
    assert ex.status == "duplicate"


def test_think_tags_match_in_any_case_and_pair_in_order():
    assert extract_prediction(f"<THINK>{QUOTING}</Think><predicted_observation>\nY\n</predicted_observation>").prediction == "Y"
    # the second </think> closes no <think>: everything before it is reasoning
    text = f"<think>a</think>{QUOTING}</think><predicted_observation>\nZ\n</predicted_observation>"
    assert extract_prediction(text).prediction == "Z"
    # nested blocks go as a whole
    text = f"<think>a<think>{QUOTING}</think>{QUOTING}</think><predicted_observation>\nW\n</predicted_observation>"
    assert extract_prediction(text).prediction == "W"


def test_an_unclosed_think_block_is_reasoning_up_to_the_answer():
    """A quoted tag inside thinking that never closes no longer makes a duplicate; a completion cut off while it
    thinks holds no answer."""
    ex = extract_prediction(f"<think>{QUOTING} so: <predicted_observation>\nV\n</predicted_observation>")
    assert ex.status == "duplicate"  # the first tag after <think> is where its reasoning ends: it quoted both tags
    ex = extract_prediction("<think>It prints V.\n<predicted_observation>\nV\n</predicted_observation>")
    assert ex.ok and ex.prediction == "V"
    ex = extract_prediction("<think>I close with </predicted_observation>.\n<predicted_observation>\nV\n</predicted_observation>")
    assert ex.ok and ex.prediction == "V"
    assert extract_prediction("<think>It prints V, so the answer").status == "missing"




@pytest.fixture(scope="module")
def official_parser():
    return vendored_eval_function("output_parser", "parse_model_output")


@pytest.mark.parametrize("completion", [
    f"{QUOTING}\n</think>\n\n<predicted_observation>\nX\n</predicted_observation>",
    f"<think>{QUOTING}</think>\n<predicted_observation>\nX\n</predicted_observation>",
    f"<THINK>{QUOTING}</THINK><predicted_observation>\nX\n</predicted_observation>",
    f"<think>a</think>{QUOTING}</think><predicted_observation>\nX\n</predicted_observation>",
    f"<think>a<think>{QUOTING}</think>{QUOTING}</think><predicted_observation>\nX\n</predicted_observation>",
    f"</think>{QUOTING}</think><think>{QUOTING}</think>\n<predicted_observation>\n  X y\n</predicted_observation>",
    f"{QUOTING}</think>So it prints X.<think>{QUOTING}</think><predicted_observation>\nX\n</predicted_observation>",
    "<think>It prints X.\n<predicted_observation>\nX\n</predicted_observation>",
    "<think>I close with </predicted_observation>.\n<predicted_observation>\nX\n</predicted_observation>",
    "<think>a</think> <think>It prints X. <predicted_observation>\nX\n</predicted_observation>",
])
def test_the_official_evaluator_reads_the_same_prediction_from_thinking_completions(official_parser, completion):
    ours = extract_prediction(completion)
    assert ours.ok and ours.prediction.strip() == official_parser(completion, "predicted_observation")


@pytest.mark.parametrize("observation", ["<think>plan</think>done", "a </think> b"])
def test_an_observation_holding_think_tags_cannot_be_predicted_exactly_by_either_parser(official_parser, observation):
    """The README's limit: both parsers remove think blocks from the completion, and the reference keeps them."""
    completion = target_reply(observation, "Reasoning.\n")
    assert extract_prediction(completion).prediction != observation
    assert official_parser(completion, "predicted_observation") != observation
