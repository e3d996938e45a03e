"""The token budget of the model-in-the-loop stages holds with requests in flight: each request reserves the most
it may cost before it is sent and settles with its usage after, and one that could pass the budget is not sent
(loopback OpenAI-compatible server answering from a script)."""

from __future__ import annotations

import pytest

from pipeline.llm_budget import Ledger
from pipeline.llm_stage import BudgetExhausted
from pipeline.run import run_pipeline
from stages.llm.stage import token_reservation
from tests.helpers import Answer, JudgeServer, Script, Slow, llm_config, write_llm_corpus


def test_a_reservation_holds_tokens_until_its_usage_settles_it():
    ledger = Ledger(max_tokens=100)
    assert ledger.take(60)
    assert not ledger.take(50)  # 60 held + 50 would pass 100: not sent
    assert ledger.take(40)
    ledger.add(30, 0, True, 0, "", True, 60)  # the first costs 30 of its 60: 30 spent, 40 held
    assert ledger.take(30)  # 30 + 40 + 30 = 100
    ledger.release(30)  # stopped before an outcome: it holds nothing any more
    assert ledger.take(0)  # a retry of a request in flight: its first try's reservation still holds
    snap = ledger.snapshot()
    assert (snap["reserved"], snap["not_sent"], snap["refused_reservation"]) == (40, 1, 50)
    assert snap["requests"] == 4 and snap["prompt_tokens"] == 30


def test_the_reservation_bounds_the_prompt_by_its_bytes_and_the_answer_by_max_tokens():
    body = {"model": "m", "max_tokens": 500,
            "messages": [{"role": "system", "content": "é" * 100}, {"role": "user", "content": "hi"}]}
    reserved = token_reservation(body)
    assert reserved >= 2 * 100 + 2 + 500  # 'é' is two bytes, and no byte-level BPE makes more tokens than bytes
    assert token_reservation({**body, "max_tokens": 600}) == reserved + 100
    assert token_reservation({"messages": body["messages"]}, 500) == reserved  # a request without max_tokens


def test_the_token_budget_holds_with_requests_in_flight(tmp_path):
    corpus = write_llm_corpus(tmp_path / "in.jsonl", [f"good{i}" for i in range(8)])
    script = Script()

    def cost(body) -> int:  # every answer costs all its request reserved: the budget's worst case
        return token_reservation(body)

    def reply(body, n):  # slow enough that all four requests of the first wave are in flight together
        answer = script(body, n)
        return Slow(0.3, Answer(answer.text, {"prompt_tokens": cost(body) - body["max_tokens"],
                                              "completion_tokens": body["max_tokens"]}))

    cfg = llm_config([corpus], tmp_path / "out", "", "rl", stages=["instructions"], concurrency=4, timeout_s=5.0,
                     max_completion_tokens=100)
    with JudgeServer(reply) as server:
        cfg["llm"]["endpoint"] = server.url
        first = _first_request(cfg)
        budget = int(2.5 * cost(first))
        cfg["llm"]["max_tokens"] = budget
        with pytest.raises(BudgetExhausted) as info:
            run_pipeline(cfg, echo=lambda m: None)
        sent = list(server.requests)
    assert {cost(b) for b in sent} == {cost(first)}  # every request of this corpus reserves as much
    assert sum(cost(b) for b in sent) <= budget
    assert len(sent) == 2  # two reservations fit in two and a half; the third would not
    assert "request(s) not sent, as a request holds the most it may cost" in str(info.value)


def _first_request(cfg) -> dict:
    """The body of the first instruction request of the run `cfg` describes (what its dry run shows)."""
    from pipeline.llm_stage import LLMDryRun

    dry = {**cfg, "llm": {**cfg["llm"], "dry_run": True, "dry_run_show": 1}}
    with pytest.raises(LLMDryRun) as info:
        run_pipeline(dry, echo=lambda m: None)
    (request,) = info.value.report["instructions"]["first_requests"]
    return {"messages": request["messages"], **request["params"]}


def test_a_budget_smaller_than_one_request_sends_nothing_and_says_so(tmp_path):
    corpus = write_llm_corpus(tmp_path / "in.jsonl", ["good", "low"])
    with JudgeServer(Script()) as server:
        with pytest.raises(BudgetExhausted, match=r"after 0 requests .* a request of \d+ tokens never fits: raise "
                                                  r"llm\.max_tokens, or lower llm\.max_completion_tokens"):
            run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", stages=["sft_reasoning"],
                                    max_tokens=100), echo=lambda m: None)
        assert server.requests == []
