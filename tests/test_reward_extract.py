"""Strict extraction: only the one <predicted_observation> pair counts; tag trouble is a format failure."""

from __future__ import annotations

import pytest

from stages.render import target_reply
from stages.reward.extract import extract_prediction


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
