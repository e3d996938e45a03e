"""The judge client against a loopback OpenAI-compatible server: retries, timeouts, cache, limits, accounting."""

from __future__ import annotations

import hashlib
import json
import threading
import time

import pytest

from stages.llm.client import ChatClient
from tests.helpers import Answer, Broken, JudgeServer, Raw, Slow, Status, Trickle

MSG = [{"role": "user", "content": "grade this"}]


def client(url: str, **kw) -> ChatClient:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 5.0)
    return ChatClient(url, "judge-model", "sk-test", **kw)


def test_a_good_answer_is_returned_with_its_tokens_and_the_request_is_openai_shaped():
    with JudgeServer(lambda body, n: Answer("fine", {"prompt_tokens": 7, "completion_tokens": 3})) as judge:
        c = client(judge.url, default_params={"temperature": 0.0})
        r = c.chat(MSG, max_tokens=64)
        assert (r.ok, r.text, r.attempts, r.cached, r.prompt_tokens, r.completion_tokens) == (True, "fine", 1, False, 7, 3)
        (body,) = judge.requests
        assert body == {"model": "judge-model", "messages": MSG, "temperature": 0.0, "max_tokens": 64}
        assert judge.headers[0]["Authorization"] == "Bearer sk-test"
        assert c.usage.as_dict() == {"calls": 1, "attempts": 1, "retries": 0, "cache_hits": 0, "failures": 0,
                                     "prompt_tokens": 7, "completion_tokens": 3, "errors": {}, "refused": {}}


def test_429_and_5xx_are_retried_with_backoff_until_an_answer():
    script = [Status(429, retry_after="0"), Status(503), Status(500)]

    def reply(body, n):
        return script[n] if n < len(script) else Answer("late but fine")

    with JudgeServer(reply) as judge:
        c = client(judge.url, max_retries=4)
        r = c.chat(MSG)
        assert r.ok and r.text == "late but fine" and r.attempts == 4
        assert len(judge.requests) == 4
        assert c.usage.retries == 3 and c.usage.failures == 0


def test_persistent_failure_gives_up_after_max_retries_and_is_counted():
    with JudgeServer(lambda body, n: Status(500)) as judge:
        c = client(judge.url, max_retries=2)
        r = c.chat(MSG)
        assert not r.ok and r.text is None and r.error == "HTTP 500" and r.attempts == 3
        assert len(judge.requests) == 3
        assert c.usage.failures == 1 and c.usage.errors == {"HTTP 500": 1} and c.usage.retries == 2


def test_client_errors_other_than_429_are_not_retried():
    with JudgeServer(lambda body, n: Status(400)) as judge:
        c = client(judge.url, max_retries=3)
        r = c.chat(MSG)
        assert r.error == "HTTP 400" and r.attempts == 1 and len(judge.requests) == 1


def test_a_client_error_keeps_the_start_of_the_servers_message_without_the_key():
    said = {"error": {"message": "Incorrect API key provided: sk-test. Find your key at https://example.com/keys. "
                      + "More words. " * 100, "type": "invalid_request_error", "code": "invalid_api_key"}}
    with JudgeServer(lambda body, n: Status(401, body=json.dumps(said).encode())) as judge:
        c = client(judge.url, max_retries=3)
        r = c.chat(MSG)
    assert r.error.startswith("HTTP 401: Incorrect API key provided: <SECRET:api_key>. Find your key at "), r.error
    assert "sk-test" not in r.error and len(r.error) <= len("HTTP 401: ") + 200 and r.error.endswith("…")
    assert r.endpoint_failed and r.attempts == 1


@pytest.mark.parametrize(("status", "body", "error", "endpoint_failed"), [
    (400, b'{"object": "error", "message": "This model\'s maximum context length is 8192 tokens."}',
     "HTTP 400: This model's maximum context length is 8192 tokens.", False),  # this request only
    (404, b'{"detail": "The model `qwen` does not exist."}', "HTTP 404: The model `qwen` does not exist.", True),
    (403, b"<html>\n  <body>Forbidden</body>\n</html>", "HTTP 403: <html> <body>Forbidden</body> </html>", True),
    (500, b"", "HTTP 500", False),
])
def test_a_failure_names_the_servers_reason_and_whether_the_endpoint_itself_refused(status, body, error,
                                                                                   endpoint_failed):
    with JudgeServer(lambda b, n: Status(status, body=body)) as judge:
        r = client(judge.url, max_retries=1).chat(MSG)
    assert (r.ok, r.error, r.endpoint_failed) == (False, error, endpoint_failed)


CONTEXT_400 = Status(400, body=b'{"object": "error", "message": "This model\'s maximum context length is 8192 tokens."}')


@pytest.mark.parametrize(("status", "recorded"), [
    (400, True), (413, True), (422, True),  # the request itself: it gets the same answer every time
    (401, False), (402, False), (403, False), (404, False), (407, False),  # the key, account or path: fixed apart
    (408, False), (409, False), (429, False), (500, False), (503, False),  # transient
])
def test_only_a_refusal_of_the_request_itself_is_recorded_and_not_asked_again(status, recorded, tmp_path):
    with JudgeServer(lambda b, n: Status(status)) as judge:
        first = client(judge.url, max_retries=0, cache_dir=str(tmp_path)).chat(MSG)
        again = client(judge.url, max_retries=0, cache_dir=str(tmp_path))
        result = again.chat(MSG)
        assert len(judge.requests) == (1 if recorded else 2)
    assert (first.ok, first.refused, first.cached) == (False, recorded, False)
    assert (result.ok, result.error, result.refused, result.cached) == (False, f"HTTP {status}", recorded, recorded)
    assert again.usage.refused == ({f"HTTP {status}": 1} if recorded else {}) and again.usage.failures == 1


def test_a_recorded_refusal_is_asked_again_for_another_model_prompt_parameter_or_endpoint(tmp_path):
    cache = str(tmp_path)
    with JudgeServer(lambda b, n: CONTEXT_400) as one, JudgeServer(lambda b, n: CONTEXT_400) as other:
        assert client(one.url, cache_dir=cache).chat(MSG).refused
        assert client(one.url, cache_dir=cache).chat(MSG).cached  # the same request to the same endpoint
        assert len(one.requests) == 1
        client(one.url, cache_dir=cache).chat(MSG, max_tokens=10)
        client(one.url, cache_dir=cache).chat([{"role": "user", "content": "a shorter prompt"}])
        ChatClient(one.url, "another-model", cache_dir=cache, backoff_s=0.01).chat(MSG)
        client(other.url, cache_dir=cache).chat(MSG)
        assert len(one.requests) == 4 and len(other.requests) == 1


def test_a_stage_clients_refusal_holds_for_its_endpoint_only_though_its_answers_are_shared(tmp_path):
    """The model stages key answers without the endpoint (the same model served elsewhere answers the same); a
    refusal (a prompt over one server's context) is asked again of another server, whose answer then serves both."""
    from stages.llm.stage import StageClient

    def stage_client(url):
        return StageClient(url, "m", cache_dir=str(tmp_path), backoff_s=0.01, timeout_s=5.0)

    with JudgeServer(lambda b, n: CONTEXT_400) as small, JudgeServer(lambda b, n: Answer("fits")) as large:
        assert stage_client(small.url).chat(MSG).refused
        assert stage_client(small.url).chat(MSG).cached
        assert stage_client(large.url).chat(MSG).text == "fits"
        answer = stage_client(small.url).chat(MSG)
        assert (answer.text, answer.cached) == ("fits", True)
        assert (len(small.requests), len(large.requests)) == (1, 1)


def test_a_timeout_is_retried():
    def reply(body, n):
        return Slow(0.5, Answer("too slow")) if n == 0 else Answer("quick")

    with JudgeServer(reply) as judge:
        c = client(judge.url, timeout_s=0.2, max_retries=2)
        r = c.chat(MSG)
        assert r.ok and r.text == "quick" and r.attempts == 2
        assert c.usage.retries == 1


def test_the_timeout_bounds_the_whole_answer_not_each_read():
    slow = Trickle(Answer("a long answer " * 20), gap=0.05)  # ~400 bytes, 8 every 0.05 s: about 2.5 s in all

    def reply(body, n):
        return slow if n == 0 else Answer("quick")

    with JudgeServer(reply) as judge:
        c = client(judge.url, timeout_s=0.5, max_retries=1)
        start = time.monotonic()
        r = c.chat(MSG)
        took = time.monotonic() - start
    assert (r.ok, r.text, r.attempts) == (True, "quick", 2)
    assert took < 1.5, took  # cut off at the timeout, not held until the last byte


def test_timeouts_until_the_end_fail_with_timeout():
    with JudgeServer(lambda body, n: Slow(0.6, Answer("never in time"))) as judge:
        c = client(judge.url, timeout_s=0.1, max_retries=1)
        r = c.chat(MSG)
        assert not r.ok and r.error == "timeout" and r.attempts == 2


def test_a_200_without_a_chat_completion_fails_without_retry():
    with JudgeServer(lambda body, n: Raw(b'{"unexpected": true}')) as judge:
        c = client(judge.url, max_retries=3)
        r = c.chat(MSG)
        assert not r.ok and r.attempts == 1 and len(judge.requests) == 1
    with JudgeServer(lambda body, n: Raw(b"<html>oops")) as judge:
        r = client(judge.url, max_retries=1).chat(MSG)
        assert not r.ok and r.error == "invalid JSON from endpoint" and len(judge.requests) == 2


@pytest.mark.parametrize("usage", ['"lots"', '{"prompt_tokens": "ten", "completion_tokens": null}',
                                   '{"prompt_tokens": -3, "completion_tokens": NaN}', "[1, 2]"])
def test_an_answer_whose_usage_is_no_count_is_still_the_answer(usage):
    answer = '{"choices": [{"message": {"role": "assistant", "content": "fine"}}], "usage": ' + usage + "}"
    with JudgeServer(lambda body, n: Raw(answer.encode())) as judge:
        c = client(judge.url)
        r = c.chat(MSG)
        assert (r.ok, r.text, r.prompt_tokens, r.completion_tokens) == (True, "fine", 0, 0)
        assert c.usage.as_dict()["failures"] == 0


def test_an_answer_cut_short_or_not_http_is_retried_like_a_dropped_connection():
    script = [Broken.cut_short(), Broken(b"GARBAGE\r\n\r\n"), Broken(b"HTTP/1.1 200 OK\r\n" + b"X" * 70000)]

    def reply(body, n):
        return script[n] if n < len(script) else Answer("fine after all")

    with JudgeServer(reply) as judge:
        c = client(judge.url, max_retries=3)
        r = c.chat(MSG)
        assert (r.ok, r.text, r.attempts) == (True, "fine after all", 4)
        assert len(judge.requests) == 4 and c.usage.retries == 3 and c.usage.failures == 0


def test_answers_always_cut_short_end_as_a_failed_result_not_an_exception():
    with JudgeServer(lambda body, n: Broken.cut_short()) as judge:
        c = client(judge.url, max_retries=1)
        r = c.chat(MSG)
        assert not r.ok and r.error == "connection: IncompleteRead" and r.attempts == 2
        assert c.usage.errors == {"connection: IncompleteRead": 1}


def _completion(message: dict, finish_reason: str = "stop") -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", **message},
                                    "finish_reason": finish_reason}],
                       "usage": {"prompt_tokens": 30, "completion_tokens": 2048}}).encode()


@pytest.mark.parametrize(("answer", "error"), [
    (_completion({"content": "Thinking about it at length and then"}, "length"),
     "answer cut short at the token limit (finish_reason length)"),
    (_completion({"content": ""}), "empty answer"),
    (_completion({"content": " \n "}), "empty answer"),
], ids=["cut at the token limit", "empty", "blank"])
def test_an_answer_cut_short_or_empty_is_a_failure_with_its_reason_and_never_cached(answer, error, tmp_path):
    with JudgeServer(lambda body, n: Raw(answer)) as judge:
        c = client(judge.url, max_retries=3, cache_dir=str(tmp_path / "cache"))
        first, again = c.chat(MSG), c.chat(MSG)
        assert len(judge.requests) == 2  # not retried (the server did answer), and asked again: not cached
    assert (first.ok, first.error, first.attempts) == (False, error, 1)
    assert (again.ok, again.cached) == (False, False)
    assert c.usage.errors == {error: 2} and c.usage.completion_tokens == 4096  # what they cost is counted


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_thinking_sent_apart_by_a_reasoning_parser_comes_before_the_answer(field, tmp_path):
    answer = _completion({"content": "\n<predicted_observation>\nok\n</predicted_observation>",
                          field: "The search returns one line.\n"})
    with JudgeServer(lambda body, n: Raw(answer)) as judge:
        c = client(judge.url, cache_dir=str(tmp_path / "cache"))
        r, replay = c.chat(MSG), c.chat(MSG)
        assert len(judge.requests) == 1
    assert r.text == ("<think>\nThe search returns one line.\n</think>\n"
                      "<predicted_observation>\nok\n</predicted_observation>")
    assert replay.cached and replay.text == r.text


def test_thinking_already_in_the_answer_is_not_repeated():
    answer = _completion({"content": "<think>mine</think>\nanswer", "reasoning_content": "mine"})
    with JudgeServer(lambda body, n: Raw(answer)) as judge:
        assert client(judge.url).chat(MSG).text == "<think>mine</think>\nanswer"


def test_connection_refused_is_a_counted_failure():
    with JudgeServer(lambda body, n: Answer("x")) as judge:
        url = judge.url
    c = client(url, max_retries=1)
    r = c.chat(MSG)
    assert not r.ok and r.error.startswith("connection") and c.usage.failures == 1
    assert r.endpoint_failed and r.attempts == 2  # refused on every try: nothing listens there


def test_the_disk_cache_answers_a_repeated_request_without_a_call(tmp_path):
    with JudgeServer(lambda body, n: Answer(f"answer {n}", {"prompt_tokens": 10, "completion_tokens": 2})) as judge:
        c = client(judge.url, cache_dir=str(tmp_path / "cache"))
        first, again = c.chat(MSG), c.chat(MSG)
        assert first.text == again.text == "answer 0" and again.cached and again.attempts == 0
        assert len(judge.requests) == 1
        assert c.usage.cache_hits == 1 and c.usage.prompt_tokens == 10  # cached tokens are not counted twice
        # a different request, or the same one with a salt, is asked
        assert c.chat(MSG, temperature=0.5).text == "answer 1"
        assert c.chat(MSG, cache_salt="reask-1").text == "answer 2"
        # the key ignores the API key: a second client (a later run) reuses the cache
        other = ChatClient(judge.url, "judge-model", "sk-other", cache_dir=str(tmp_path / "cache"))
        assert other.chat(MSG).text == "answer 0" and len(judge.requests) == 3
        # another model is another key
        assert ChatClient(judge.url, "other-model", cache_dir=str(tmp_path / "cache")).chat(MSG).text == "answer 3"
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 4


def test_failures_are_not_cached(tmp_path):
    state = {"fail": True}

    def reply(body, n):
        return Status(500) if state["fail"] else Answer("recovered")

    with JudgeServer(reply) as judge:
        c = client(judge.url, max_retries=0, cache_dir=str(tmp_path))
        assert not c.chat(MSG).ok
        state["fail"] = False
        assert c.chat(MSG).text == "recovered"
        assert len(judge.requests) == 2


@pytest.mark.parametrize("limit", [1, 3])
def test_concurrency_limit_holds_across_threads(limit):
    with JudgeServer(lambda body, n: Slow(0.05, Answer("ok"))) as judge:
        c = client(judge.url, max_concurrency=limit)
        results = c.chat_many([[{"role": "user", "content": f"q{i}"}] for i in range(9)])
        assert [r.text for r in results] == ["ok"] * 9
        assert judge.max_in_flight == limit
        # threads outside chat_many share the same limit
        threads = [threading.Thread(target=c.chat, args=([{"role": "user", "content": f"t{i}"}],)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert judge.max_in_flight == limit and c.usage.calls == 15


def test_chat_many_keeps_the_order_of_requests():
    def reply(body, n):
        i = int(body["messages"][0]["content"][1:])
        return Slow(0.01 * (5 - i), Answer(f"a{i}"))

    with JudgeServer(reply) as judge:
        c = client(judge.url, max_concurrency=5)
        out = c.chat_many([[{"role": "user", "content": f"q{i}"}] for i in range(5)])
        assert [r.text for r in out] == [f"a{i}" for i in range(5)]


def test_an_interrupt_sends_no_further_request_and_waits_for_no_answer(tmp_path):
    """Ctrl-C during `chat_many` once left a thread pool that, on its way out, waited for the requests in flight
    (up to timeout_s each) and then sent every queued one; now the process ends at once, having sent only the
    requests already in flight."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    with JudgeServer(lambda body, n: Slow(30, Answer("late"))) as judge:
        script = ("from stages.llm.client import ChatClient\n"
                  f"client = ChatClient({judge.url!r}, 'm', max_concurrency=2, timeout_s=60, max_retries=0)\n"
                  "client.chat_many([[{'role': 'user', 'content': str(i)}] for i in range(10)])\n")
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=root, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while len(judge.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(judge.requests) == 2, "the two first requests never arrived"
            proc.send_signal(signal.SIGINT)
            started = time.monotonic()
            proc.wait(timeout=15)
            assert time.monotonic() - started < 5
        finally:
            proc.kill()
            proc.wait()
        time.sleep(0.5)
        assert len(judge.requests) == 2  # none of the 8 queued ones was sent
    assert "KeyboardInterrupt" in proc.stderr.read()


def test_a_prompt_with_a_lone_surrogate_is_sent_and_cached_under_its_own_key(tmp_path):
    with JudgeServer(lambda body, n: Answer(f"saw {body['messages'][0]['content']!r}")) as judge:
        c = client(judge.url, cache_dir=str(tmp_path))
        lone = [{"role": "user", "content": "broken \ud800 output"}]
        other = [{"role": "user", "content": "broken \ud801 output"}]
        first, second = c.chat(lone), c.chat(other)
        assert first.ok and first.text == "saw 'broken \\ud800 output'" and second.text == "saw 'broken \\ud801 output'"
        assert c.cache_key({"messages": lone}) != c.cache_key({"messages": other})
        again = c.chat(lone)
        assert again.cached and again.text == first.text and len(judge.requests) == 2


def test_a_prompt_of_well_formed_text_keeps_the_cache_key_it_always_had():
    c = ChatClient("http://judge.invalid/v1", "m")
    body = {"model": "m", "messages": [{"role": "user", "content": "naïve 日本 \U0001f600"}]}
    blob = json.dumps({"url": c.url, "body": body, "salt": "s"}, sort_keys=True, ensure_ascii=False)
    assert c.cache_key(body, "s") == hashlib.sha256(blob.encode("utf-8")).hexdigest()


def test_an_answer_holding_a_lone_surrogate_is_cached_and_read_back_as_it_came(tmp_path):
    with JudgeServer(lambda body, n: Answer("score \ud800 4")) as judge:
        c = client(judge.url, cache_dir=str(tmp_path))
        first = c.chat(MSG)
        assert first.ok and first.text == "score \ud800 4"
        again = c.chat(MSG)
        assert again.cached and again.text == first.text and len(judge.requests) == 1
