"""The framework signatures without the frameworks: verl's compute_score and TRL's reward function."""

from __future__ import annotations

import inspect
import re

import pytest

from stages.render import target_reply
from stages.reward import frameworks
from stages.reward.frameworks import compute_score, make_trl_reward, reward_config, trl_reward
from tests.helpers import Answer, JudgeServer, scores_answer

REF = "<returncode>0</returncode>\n<output>\nhello\n</output>"


def test_signatures_are_the_ones_the_frameworks_call():
    assert list(inspect.signature(compute_score).parameters)[:4] == ["data_source", "solution_str", "ground_truth",
                                                                     "extra_info"]
    assert list(inspect.signature(trl_reward).parameters)[:2] == ["prompts", "completions"]


def test_compute_score_takes_the_judge_from_the_environment(monkeypatch):
    with JudgeServer(lambda body, n: Answer(scores_answer(5))) as server:
        monkeypatch.setenv("LWM_JUDGE_URL", server.url)
        monkeypatch.setenv("LWM_JUDGE_MODEL", "judge")
        extra = {"domain": "terminal", "verifier": "terminal", "current_prompt": "### Turn 2\n**Action:**\necho hello",
                 "history": [{"prompt": "### Turn 1\n**Action:**\ncd /", "observation": "<returncode>0</returncode>"}],
                 "index": 3, "num_turns": 2}
        out = compute_score("lwmkit/terminal", target_reply(REF, "ok\n"), REF, extra)
        assert out == {"score": 25.0, "format_ok": 1.0, "rule": 1.0, "rubric": 25.0, "judge_failed": 0.0}
        user = server.requests[0]["messages"][1]["content"]
        assert "cd /" in user and "echo hello" in user
        # the domain falls back to the data source; reward settings come as keywords
        out = compute_score("lwmkit/terminal", target_reply("<returncode>1</returncode>", ""), REF, None,
                            rubric_weight=1, rule_weight=1)
        assert out["rule"] == 0.0 and out["score"] == pytest.approx(12.5)


def test_no_judge_configured_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("LWM_JUDGE_URL", raising=False)
    monkeypatch.delenv("LWM_JUDGE_MODEL", raising=False)
    with pytest.raises(ValueError, match="needs a judge"):
        compute_score("lwmkit/mcp", "x", "y", {})


def test_trl_reward_with_standard_and_conversational_rows():
    with JudgeServer(lambda body, n: Answer(scores_answer(2))) as server:
        reward = make_trl_reward(judge_url=server.url, judge_model="judge", without_verifier="zero")
        prompts = ["### Turn 1\n**Action:**\necho hello",
                   [{"role": "system", "content": "You are a shell."}, {"role": "user", "content": "echo hello"}]]
        completions = [target_reply(REF, ""), [{"role": "assistant", "content": target_reply("wrong", "")}]]
        out = reward(prompts=prompts, completions=completions, completion_ids=[[1], [2]], reference=[REF, REF],
                     domain=["terminal", "mcp"], verifier=["terminal", "none"], trainer_state=object())
        # 0.9·10 + 0.1·25 with a passing verifier; no verifier counted as a failed rule ("zero")
        assert out == pytest.approx([11.5, 9.0])


def test_one_client_per_setting_is_shared():
    a = frameworks.judge_client(judge_url="http://127.0.0.1:9/v1", judge_model="m", judge_concurrency=2)
    b = frameworks.judge_client(judge_url="http://127.0.0.1:9/v1", judge_model="m", judge_concurrency=2)
    c = frameworks.judge_client(judge_url="http://127.0.0.1:9/v1", judge_model="m", judge_concurrency=3)
    assert a is b and a is not c and c.max_concurrency == 3
    assert reward_config(rule_weight=2, unrelated="x").rule_weight == 2


@pytest.mark.parametrize(("settings", "env", "expected"), [
    ({}, {"LWM_JUDGE_CONCURRENCY": "abc"}, "LWM_JUDGE_CONCURRENCY must be an integer, not 'abc'"),
    ({}, {"LWM_JUDGE_CONCURRENCY": "0"}, "LWM_JUDGE_CONCURRENCY must be at least 1, not '0'"),
    ({"judge_timeout_s": "nan"}, {}, "judge_timeout_s must be at least 0.001"),
    ({"judge_max_retries": -1}, {}, "judge_max_retries must be at least 0, not -1"),
])
def test_a_bad_judge_setting_names_where_it_came_from(monkeypatch, settings, env, expected):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=re.escape(expected)):
        frameworks.judge_client(judge_url="http://127.0.0.1:9/v1", judge_model="m", **settings)


def test_degenerate_rollouts_and_judge_answers_score_alone_instead_of_ending_the_step():
    """A rollout of nested brackets, one with a surrogate, and a judge answer with a NaN score: each gets its
    own reward and the rest of the batch is scored."""
    json_ref = '{"status": "ok", "count": 3}'

    def judge(body, n):
        nan = scores_answer(5).replace('"format": 5', '"format": NaN')
        return Answer(nan if "ASK-FOR-NAN" in body["messages"][1]["content"] else scores_answer(5))

    with JudgeServer(judge) as server:
        settings = {"judge_url": server.url, "judge_model": "judge"}
        deep = compute_score("lwmkit/mcp", target_reply('{"a": ' * 1200, ""), json_ref,
                             {"domain": "mcp", "verifier": "json_fields"}, **settings)
        assert deep == {"score": 0.9 * 25, "format_ok": 1.0, "rule": 0.0, "rubric": 25.0, "judge_failed": 0.0}
        completions = [target_reply(json_ref, ""), target_reply("ASK-FOR-NAN", ""), target_reply("x\ud800", ""),
                       target_reply("[" * 3000, "")]
        out = make_trl_reward(**settings)(prompts=["### Turn 1"] * 4, completions=completions,
                                          reference=[json_ref] * 4, domain=["mcp"] * 4, verifier=["json_fields"] * 4)
    assert out == pytest.approx([25.0, 0.0, 0.9 * 25, 0.9 * 25])
