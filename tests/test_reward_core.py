"""The reward core: combination arithmetic, and whole scoring against a loopback judge."""

from __future__ import annotations

import json

import pytest

from stages.llm.client import ChatClient
from stages.render import PREDICT_INSTRUCTION, target_reply
from stages.reward.core import RewardConfig, RewardInput, combine, score_batch, split_prompt
from tests.helpers import Answer, JudgeServer, Status, scores_answer

CFG = RewardConfig()


# ------------------------------------------------------------------------------------ combination

@pytest.mark.parametrize(
    ("rubric", "rule", "cfg", "expected"),
    [
        (20.0, True, CFG, 0.9 * 20 + 0.1 * 25),  # 20.5
        (20.0, False, CFG, 0.9 * 20),  # 18.0
        (25.0, True, CFG, 25.0),
        (5.0, False, CFG, 4.5),
        (20.0, None, CFG, 20.0),  # no verifier: the rubric alone
        (20.0, None, RewardConfig(without_verifier="zero"), 18.0),
        (None, True, CFG, 0.0),  # judge failed: 0 whatever the rule says
        (None, None, CFG, 0.0),
        (None, True, RewardConfig(on_judge_failure="rule"), 2.5),
        (None, None, RewardConfig(on_judge_failure="rule"), 0.0),
        (20.0, True, RewardConfig(rubric_weight=1, rule_weight=1), 22.5),
        (20.0, False, RewardConfig(rubric_weight=1, rule_weight=0), 20.0),
    ],
)
def test_combination(rubric, rule, cfg, expected):
    assert combine(rubric, rule, cfg) == pytest.approx(expected)


def test_rewards_stay_on_the_rubric_scale():
    for rubric in (5.0, 12.0, 25.0):
        for rule in (True, False, None):
            assert 0.0 <= combine(rubric, rule, CFG) <= 25.0


@pytest.mark.parametrize("bad", [{"without_verifier": "half"}, {"on_judge_failure": "ignore"},
                                 {"rubric_weight": 0, "rule_weight": 0}, {"rule_weight": -1},
                                 {"rubric_weight": float("nan")}, {"rule_weight": float("nan")},
                                 {"rubric_weight": float("inf")}, {"rule_weight": float("-inf")},
                                 {"format_failure_reward": float("nan")}])
def test_invalid_configs_are_refused(bad):
    with pytest.raises(ValueError):
        RewardConfig(**bad)


def test_split_prompt_gives_history_pairs_and_the_bare_current_action():
    messages = [
        {"role": "system", "content": "You are a shell."},
        {"role": "user", "content": "### Turn 1\n**Action:**\nls"},
        {"role": "assistant", "content": "**Environment Observation:**\na.txt"},
        {"role": "user", "content": "### Turn 2\n**Action:**\ncat a.txt" + PREDICT_INSTRUCTION},
    ]
    history, current = split_prompt(messages)
    assert history == (("### Turn 1\n**Action:**\nls", "a.txt"),)
    assert current == "### Turn 2\n**Action:**\ncat a.txt"
    with pytest.raises(ValueError):
        split_prompt(messages[:-1])


# ------------------------------------------------------------------------------ against a judge

REF = json.dumps({"status": "ok", "count": 3})


def item(prediction: str | None, raw: str | None = None, verifier: str | None = None, ref: str = REF) -> RewardInput:
    completion = raw if raw is not None else target_reply(prediction, "Reasoning first.\n")
    return RewardInput("mcp", completion, ref, "### Turn 1\n**Action:**\n{}", (), verifier)


_REASKED: list[str] = []


def judge_by_marker(body, n):
    """Grades by what the prediction says: the script a test needs, whatever the order of calls."""
    user = body["messages"][1]["content"]
    if "FIXED-ON-REASK" in user:
        _REASKED.append(user)
    if "MALFORMED" in user:
        return Answer("I cannot decide. {scores: maybe}")
    if "DOWN" in user:
        return Status(503)
    if "FIXED-ON-REASK" in user and len(_REASKED) == 1:
        return Answer("no json at all")
    return Answer(scores_answer(4))


def test_scoring_a_batch_with_good_malformed_failing_and_badly_tagged_predictions(tmp_path):
    with JudgeServer(judge_by_marker) as judge:
        client = ChatClient(judge.url, "judge", max_retries=1, backoff_s=0.01, cache_dir=str(tmp_path))
        items = [
            item(REF),  # exact JSON: rule passes, rubric 20
            item(json.dumps({"status": "error", "count": 3})),  # rule fails
            item('{"status": "ok", "count": 3, "note": "MALFORMED"}'),  # judge answer unusable twice
            item('{"status": "ok", "count": 3, "x": "DOWN"}'),  # judge endpoint fails
            item(None, raw="The result is {\"status\": \"ok\"} with no tags"),  # format failure
            item("FIXED-ON-REASK", verifier="none"),  # malformed first, good on the re-ask; no verifier
        ]
        results = score_batch(items, client, RewardConfig())
        rewards = [r.reward for r in results]
        assert rewards == pytest.approx([0.9 * 20 + 2.5, 0.9 * 20, 0.0, 0.0, 0.0, 20.0])
        assert [r.rule for r in results] == [True, False, False, False, None, None]
        assert [r.judge_failed for r in results] == [False, False, True, True, False, False]
        assert results[2].judge_error.startswith("invalid") or "scores" in results[2].judge_error
        assert results[3].judge_error.startswith("judge call failed")
        assert results[4].format_status == "missing" and results[4].rubric is None
        assert results[0].as_dict() == {"score": 20.5, "format_ok": 1.0, "rule": 1.0, "rubric": 20.0, "judge_failed": 0.0}
        # the badly tagged prediction never reached the judge; the re-ask was a separate request
        asked = [b["messages"][1]["content"] for b in judge.requests]
        assert not any("with no tags" in a for a in asked)
        assert sum("FIXED-ON-REASK" in a for a in asked) == 2
        assert sum("MALFORMED" in a for a in asked) == 2
        n_requests = len(judge.requests)
        # a second scoring of the same batch: successes come from the cache, failures are asked again
        again = score_batch(items, client, RewardConfig())
        assert [r.reward for r in again] == rewards
        new = [b["messages"][1]["content"] for b in judge.requests[n_requests:]]
        assert new and all(("MALFORMED" in a) or ("DOWN" in a) or ("FIXED-ON-REASK" in a) for a in new)


def test_the_judge_sees_history_current_prediction_and_reference_but_not_the_reasoning():
    with JudgeServer(lambda body, n: Answer(scores_answer(5))) as judge:
        client = ChatClient(judge.url, "judge", backoff_s=0.01)
        it = RewardInput("terminal", target_reply("hello\n$ ", "SECRET-REASONING "), "hello\n$ ",
                         "### Turn 2\n**Action:**\necho hello", (("### Turn 1\n**Action:**\ncd /", "$ "),))
        (res,) = score_batch([it], client)
        assert res.reward == 25.0 and res.verifier == "terminal" and res.rule is True
        system, user = judge.requests[0]["messages"]
        assert system["role"] == "system" and "terminal" in system["content"]
        assert "cd /" in user["content"] and "echo hello" in user["content"] and "SECRET-REASONING" not in user["content"]


def test_format_failure_reward_is_configurable_and_costs_no_call():
    with JudgeServer(lambda body, n: Answer(scores_answer(5))) as judge:
        client = ChatClient(judge.url, "judge")
        (res,) = score_batch([item(None, raw="no tags")], client, RewardConfig(format_failure_reward=-1.0))
        assert res.reward == -1.0 and judge.requests == []


def test_an_unknown_recorded_verifier_kind_is_an_error_not_a_silent_zero():
    with JudgeServer(lambda body, n: Answer(scores_answer(5))) as judge, pytest.raises(ValueError, match="unknown verifier"):
        score_batch([item(REF, verifier="regex")], ChatClient(judge.url, "judge"))


def test_a_failing_endpoint_is_not_re_asked_beyond_the_clients_retries():
    with JudgeServer(lambda body, n: Status(500)) as judge:
        (res,) = score_batch([item(REF)], ChatClient(judge.url, "judge", max_retries=2, backoff_s=0.01),
                             RewardConfig(judge_reasks=3))
        assert res.reward == 0.0 and res.judge_error == "judge call failed: HTTP 500"
        assert len(judge.requests) == 3


def test_predictions_the_verifier_cannot_read_fail_the_rule_and_the_batch_goes_on():
    """Deep nesting and numbers beyond Python's digit limit are wrong predictions, not a missing verifier:
    they neither raise nor get the rubric-only reward a sample without a verifier gets."""
    huge = "9" * 5000
    term_ref = "exit code: 0\nhello world"
    with JudgeServer(lambda body, n: Answer(scores_answer(5))) as judge:
        client = ChatClient(judge.url, "judge", backoff_s=0.01)
        items = [
            item("[" * 3000),
            item('{"a": ' * 1200 + "1" + "}" * 1200),
            item('{"status": "ok", "count": ' + huge + "}"),
            RewardInput("terminal", target_reply(f"exit code: {huge}\nhello world", "Reasoning.\n"), term_ref, "### Turn 1"),
            item(REF),
        ]
        results = score_batch(items, client)
    assert [r.rule for r in results] == [False, False, False, False, True]
    assert [r.verifier for r in results] == ["json_fields"] * 3 + ["terminal", "json_fields"]
    assert [r.reward for r in results] == pytest.approx([0.9 * 25] * 4 + [25.0])


def test_judge_answers_with_unusable_scores_fail_only_their_own_sample():
    five = '{"scores": {"format": 5, "factuality": 5, "consistency": 5, "realism": 5, "quality": 5}}'
    hostile = {"NAN": five.replace('"format": 5', '"format": NaN'), "HUGE": five.replace('"format": 5', '"format": 1e999'),
               "DEEP": '{"scores": ' + "[" * 3000 + "]" * 3000 + "}", "OPEN": "{" * 20_000}

    def judge(body, n):
        user = body["messages"][1]["content"]
        return Answer(next((a for k, a in hostile.items() if k in user), scores_answer(4)))

    with JudgeServer(judge) as server:
        items = [item(json.dumps({"status": "ok", "count": 3, "x": k})) for k in hostile] + [item(REF)]
        results = score_batch(items, ChatClient(server.url, "judge", backoff_s=0.01))
    assert [r.judge_failed for r in results] == [True] * 4 + [False]
    assert [r.reward for r in results] == pytest.approx([0.0] * 4 + [0.9 * 20 + 2.5])
    assert all(r.rubric is None and r.judge_error for r in results[:4])
