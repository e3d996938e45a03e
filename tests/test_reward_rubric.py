"""Judge answers → five scores → reward in [5, 25]; malformed answers give 0."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.reward import rubric
from stages.reward.judge_prompts import DIMENSIONS, judge_system_prompt, judge_user_prompt
from stages.reward.rubric import INVALID_REWARD, parse_judge_answer
from tests.helpers import vendored_eval_function

GOOD = """The prediction lists the same files.
<final_evaluation>
```json
{"strengths": ["same files"], "weaknesses": ["wrong date"],
 "scores": {"format": 5, "factuality": 4, "consistency": 5, "realism": 4, "quality": 3}}
```
</final_evaluation>"""


def test_a_well_formed_answer_gives_mean_times_five():
    r = parse_judge_answer(GOOD)
    assert r.ok and r.scores == {"format": 5, "factuality": 4, "consistency": 5, "realism": 4, "quality": 3}
    assert r.reward == pytest.approx(21 / 5 * 5)  # mean 4.2 → 21.0
    assert r.strengths == ("same files",) and r.weaknesses == ("wrong date",)


def test_extreme_answers_span_five_to_twenty_five():
    ones = '{"scores": {"format": 1, "factuality": 1, "consistency": 1, "realism": 1, "quality": 1}}'
    fives = ones.replace("1", "5")
    assert parse_judge_answer(ones).reward == 5.0
    assert parse_judge_answer(fives).reward == 25.0


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        # no tag, bare object
        ('Scores: {"scores": {"format": 3, "factuality": 3, "consistency": 3, "realism": 3, "quality": 3}}', 15.0),
        # trailing commas and bare keys
        ('<final_evaluation>{scores: {format: 4, factuality: 4, consistency: 4, realism: 4, quality: 4,},}</final_evaluation>', 20.0),
        # single-quoted keys
        ("<final_evaluation>{'scores': {'format': 2, 'factuality': 2, 'consistency': 2, 'realism': 2, 'quality': 2}}</final_evaluation>", 10.0),
        # floats round, strings like "4/5" read, above 5 clamps
        ('{"scores": {"format": 4.4, "factuality": "4/5", "consistency": "5", "realism": 9, "quality": 3.6}}', (4 + 4 + 5 + 5 + 4)),
        # an unclosed think block before the answer tag is dropped with its fake scores
        ('<think>{"scores": {"format": 1, "factuality": 1, "consistency": 1, "realism": 1, "quality": 1}} <final_evaluation>'
         '{"scores": {"format": 5, "factuality": 5, "consistency": 5, "realism": 5, "quality": 5}}</final_evaluation>', 25.0),
        # several blocks: the last one with scores wins
        ('```json\n{"scores": {"format": 1, "factuality": 1, "consistency": 1, "realism": 1, "quality": 1}}\n```\n'
         '```json\n{"scores": {"format": 2, "factuality": 2, "consistency": 2, "realism": 2, "quality": 2}}\n```', 10.0),
        # an unclosed final_evaluation still counts; upper-case dimension names too
        ('<final_evaluation>\n{"scores": {"Format": 3, "Factuality": 4, "Consistency": 3, "Realism": 4, "Quality": 1}}', 15.0),
        # broken outer object: the scores object alone is recovered
        ('{"strengths": ["a" "b"], "scores": {"format": 4, "factuality": 4, "consistency": 4, "realism": 4, "quality": 4}', 20.0),
    ],
)
def test_lenient_locations_and_repairs(answer, expected):
    r = parse_judge_answer(answer)
    assert r.ok, r.error
    assert r.reward == pytest.approx(expected)


@pytest.mark.parametrize(
    "answer",
    [
        None,
        "",
        "   ",
        "I think the prediction is quite good, 4 out of 5.",
        '<final_evaluation>{"strengths": [], "weaknesses": []}</final_evaluation>',
        '{"scores": {"format": 4, "factuality": 4, "consistency": 4, "realism": 4}}',  # one dimension missing
        '{"scores": {"format": 0, "factuality": 4, "consistency": 4, "realism": 4, "quality": 4}}',  # 0 is no score
        '{"scores": {"format": "good", "factuality": 4, "consistency": 4, "realism": 4, "quality": 4}}',
        '{"scores": {"format": true, "factuality": 4, "consistency": 4, "realism": 4, "quality": 4}}',
        '{"scores": [5, 5, 5, 5, 5]}',
        '<final_evaluation>```json\n{"scores": {"format": 5, "factuality": \n```',  # truncated answer
    ],
)
def test_answers_without_five_valid_scores_give_zero(answer):
    r = parse_judge_answer(answer)
    assert not r.ok and r.error
    assert r.reward == INVALID_REWARD == 0.0


FIVE = '{"scores": {"format": 5, "factuality": 5, "consistency": 5, "realism": 5, "quality": 5}}'


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (FIVE.replace('"format": 5', '"format": NaN'), "invalid or missing score: format"),
        (FIVE.replace('"realism": 5', '"realism": Infinity'), "invalid or missing score: realism"),
        (FIVE.replace('"format": 5', '"format": 1e999'), "invalid or missing score: format"),  # a float, infinite
        (FIVE.replace('"quality": 5', '"quality": "' + "9" * 400 + '"'), "invalid or missing score: quality"),
        (FIVE.replace('"format": 5', '"format": ' + "9" * 5000), "no scores object"),  # beyond int()'s digit limit
        ('<final_evaluation>{"scores": ' + "[" * 3000 + "]" * 3000 + "}</final_evaluation>", "no scores object"),
    ],
)
def test_scores_python_cannot_use_make_the_answer_invalid_instead_of_raising(answer, error):
    r = parse_judge_answer(answer)
    assert not r.ok and r.error == error and r.reward == INVALID_REWARD


def test_a_good_score_next_to_deeply_nested_json_is_still_read():
    r = parse_judge_answer('{"strengths": ' + "[" * 3000 + "]" * 3000 + "}\n" + FIVE)
    assert r.ok and r.reward == 25.0


@pytest.mark.parametrize("answer", ["{" * 30_000, '{\\"' * 10_000, '{"{' * 10_000, "{" * 30_000 + FIVE])
def test_braces_that_never_close_are_parsed_in_linear_time(answer):
    """The scan from every unclosed brace used to run to the end of the text: 30,000 of them took about 20 s."""
    start = time.perf_counter()
    r = parse_judge_answer(answer)
    assert time.perf_counter() - start < 2.0
    assert r.ok == answer.endswith(FIVE)


def _balanced_objects_by_definition(text: str) -> list[str]:
    """From each ``{`` not inside an object already found: the shortest balanced text (strings respected), if any."""
    out, i = [], 0
    while (start := text.find("{", i)) != -1:
        depth, in_str, esc, end = 0, False, False, -1
        for j in range(start, len(text)):
            c = text[j]
            if in_str:
                esc, in_str = (False, True) if esc else (c == "\\", c != '"')
            elif c in "{}":
                depth += 1 if c == "{" else -1
                if depth == 0:
                    end = j
                    break
            else:
                in_str = c == '"'
        out += [text[start : end + 1]] if end != -1 else []
        i = start + 1 if end == -1 else end + 1
    return out


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet='{}"\\ a', max_size=40))
def test_balanced_objects_are_the_ones_the_definition_gives(text):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rubric, "_SCAN_BUDGET", 10**9)  # the definition has no budget
        assert rubric._balanced_objects(text) == _balanced_objects_by_definition(text)


def test_judge_prompts_name_all_five_dimensions_and_the_answer_tag_for_every_domain():
    for domain in ("mcp", "search", "terminal", "swe", "android", "web", "os"):
        text = judge_system_prompt(domain)
        assert all(d in text for d in DIMENSIONS) and "<final_evaluation>" in text
        assert "{domain_notes}" not in text and f"Domain: {'tool servers' if domain == 'mcp' else ''}" in text
    user = judge_user_prompt([("### Turn 1\nls", "a.txt")], "### Turn 2\ncat a.txt", "PRED-1", "REF-2")
    assert user.index("a.txt") < user.index("cat a.txt") < user.index("PRED-1") < user.index("REF-2")


# ----------------------------------------------------------- the official evaluator as a reference

LENIENT = next(m.args[1] for m in test_lenient_locations_and_repairs.pytestmark if m.name == "parametrize")
INVALID = next(m.args[1] for m in test_answers_without_five_valid_scores_give_zero.pytestmark if m.name == "parametrize")

# Where this parser decides differently from the vendored AgentWorldBench one, on purpose:
DIFFERENT = {
    # capitalised dimension names: the official parser reads none of them (success, total 0); we read them
    LENIENT[6][0]: ("official: 0", 15.0),
    # an object whose outer braces never close: we recover its scores object
    LENIENT[7][0]: ("official: failure", 20.0),
}
# Answers the official parser averages over the dimensions it could read (or reads `true` as 1); we give 0.
PARTIAL = {INVALID[5], INVALID[6], INVALID[7], INVALID[8]}


@pytest.fixture(scope="module")
def official_parser():
    return vendored_eval_function("judge_parser", "parse_judge_output")


@pytest.mark.parametrize("answer", [GOOD] + [a for a, _ in LENIENT] + list(INVALID))
def test_same_rewards_as_the_official_parser_except_where_documented(official_parser, answer):
    official = official_parser(answer, "final_evaluation")
    ours = parse_judge_answer(answer)
    if answer in DIFFERENT:
        assert ours.reward == DIFFERENT[answer][1]
    elif answer in PARTIAL:
        assert official["success"] and official["total_score"] > 0 and not ours.ok
    elif official["success"]:
        assert ours.ok and ours.reward == pytest.approx(official["total_score"] * 5)
    else:
        assert not ours.ok and ours.reward == 0.0
