"""A run killed in the middle of its model-in-the-loop stages resumes: the next run re-sends nothing
that was answered and cached, and its shards are byte-identical to an uninterrupted run's; a run
after that is answered entirely from the cache (0 requests)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.run import run_pipeline
from tests.helpers import (
    LWM,
    Answer,
    JudgeServer,
    Script,
    Slow,
    Status,
    clean_env,
    llm_config,
    lwm_in_process,
    write_llm_corpus,
)

SCENARIOS = [f"s{i}" for i in range(12)]  # default script: candidates judged 5, 4, 3; instructions derived


def _shards(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "shards").rglob("*.parquet"))}


def _keys(bodies) -> set[str]:
    return {json.dumps(b, sort_keys=True) for b in bodies}


def _toml(path: Path, url: str) -> Path:
    path.write_text(
        "[filter]\nmin_turns = 1\n[pools]\nsft_turns = 1\n[pools.ratios]\ncpt = 0.0\nsft = 1.0\nrl = 0.0\neval = 0.0\n"
        f'[llm]\nendpoint = "{url}"\nmodel = "scripted"\nconcurrency = 2\ntimeout_s = 5.0\nmax_retries = 1\n'
        "backoff_s = 0.01\n")
    return path


def _fresh_run(corpus, out):
    """The run with every request answered, to compare the others' shards with: its output folder."""
    with JudgeServer(Script()) as server:
        run_pipeline(llm_config([corpus], out, server.url, "sft"), echo=lambda m: None)
    return out


def test_a_killed_run_resumes_without_resending_and_gives_the_same_shards(tmp_path):
    corpus = write_llm_corpus(tmp_path / "in.jsonl", SCENARIOS)
    fresh = tmp_path / "fresh"
    with JudgeServer(Script()) as server:
        run_pipeline(llm_config([corpus], fresh, server.url, "sft", concurrency=2, timeout_s=5.0),
                     echo=lambda m: None)
        total = len(server.requests)
    assert total == 12 + 12 * 6  # one instruction and 3 candidates + 3 judge calls per trajectory

    out = tmp_path / "out"
    script = Script()
    with JudgeServer(lambda body, n: Slow(0.1, script(body, n))) as server:
        args = ["run", "--executor", "local", "--input", str(corpus), "--out", str(out), "--progress", "off",
                "--config", str(_toml(tmp_path / "c.toml", server.url))]
        proc = subprocess.Popen([LWM, *args], env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while proc.poll() is None and len(server.requests) < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        killed = list(server.requests)
    assert proc.returncode == -signal.SIGKILL and 40 <= len(killed) < total
    assert not (out / "_SUCCESS").exists()

    with JudgeServer(Script()) as server:
        # the resumed run is about the cache, not the process: `lwm run` in this process
        again = lwm_in_process(*args[:-1], str(_toml(tmp_path / "c2.toml", server.url)))
        resent = list(server.requests)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"llm sft_reasoning: {sum(1 for b in resent if 'seed' in b or b['messages'][0]['content'].startswith('You grade'))} requests" in again.stderr
    assert "; kept 12" in again.stderr
    # only requests still in flight when the process died (at most the concurrency) are asked again
    assert len(_keys(killed) & _keys(resent)) <= 2
    assert len(_keys(killed) | _keys(resent)) == total and len(resent) < total - 35
    assert _shards(out) == _shards(fresh)

    # every answer is in the run's cache now: without the stage outputs and markers, 0 requests
    for sub in ("llm", "_tasks/llm_instructions", "_tasks/llm_sft_reasoning"):
        shutil.rmtree(out / sub)
    with JudgeServer(Script()) as server:
        manifest = run_pipeline(llm_config([corpus], out, server.url, "sft", concurrency=2, timeout_s=5.0),
                                echo=lambda m: None)
        assert server.requests == []
    usage = {k: (v["usage"]["requests"], v["usage"]["cache_hits"]) for k, v in manifest["llm"]["stages"].items()}
    assert usage == {"instructions": (0, 12), "sft_reasoning": (0, 72)}
    assert _shards(out) == _shards(fresh)


def test_requests_that_got_no_answer_are_asked_again_by_the_next_run(tmp_path):
    corpus = write_llm_corpus(tmp_path / "in.jsonl", SCENARIOS[:4])
    fresh = _fresh_run(corpus, tmp_path / "fresh")

    out = tmp_path / "out"
    script = Script()
    down = {"s2"}  # the endpoint fails every request about this trajectory in the first run

    def flaky(body, n):
        return Status(500) if any(s in json.dumps(body) for s in down) else script(body, n)

    lines: list[str] = []
    with JudgeServer(flaky) as server:
        first = run_pipeline(llm_config([corpus], out, server.url, "sft"), echo=lines.append)
    assert first["counts"]["samples"]["sft"] == 3
    assert any(line.startswith("warning: llm stage instructions: 1 request(s) got no answer (HTTP 500 1)")
               for line in lines), lines
    down.clear()  # the endpoint is well again
    with JudgeServer(Script()) as server:
        again = run_pipeline(llm_config([corpus], out, server.url, "sft"), echo=lambda m: None)
        asked = list(server.requests)
    assert asked and all("s2" in json.dumps(b) for b in asked)  # only what got no answer; the rest is cached
    assert again["counts"]["samples"]["sft"] == 4
    assert _shards(out) == _shards(fresh)


def test_a_later_stage_sends_nothing_about_a_trajectory_an_earlier_stage_got_no_answer_for(tmp_path):
    corpus = write_llm_corpus(tmp_path / "in.jsonl", SCENARIOS[:4])
    fresh = _fresh_run(corpus, tmp_path / "fresh")

    out, script = tmp_path / "out", Script()

    def instruction_down(body, n):  # only the instruction request about s2 fails; the sft requests would be answered
        system = body["messages"][0]["content"]
        if system.startswith("You write simulation instructions") and "s2" in json.dumps(body):
            return Status(500)
        return script(body, n)

    lines: list[str] = []
    with JudgeServer(instruction_down) as server:
        first = run_pipeline(llm_config([corpus], out, server.url, "sft"), echo=lines.append)
        asked = list(server.requests)
    about_s2 = [b for b in asked if "s2" in json.dumps(b)]
    assert len(about_s2) == 2 and all("simulation instructions" in b["messages"][0]["content"] for b in about_s2)
    assert len(asked) - len(about_s2) == 3 + 3 * 6  # the other trajectories: an instruction, 3 candidates, 3 grades
    counts = first["llm"]["stages"]["sft_reasoning"]["counts"]
    assert counts["not_asked"] == {"earlier_stage_unanswered": 1}
    assert counts["dropped"] == {"earlier_stage_unanswered": 1} and counts["kept"] == 3
    assert first["counts"]["filtered"] == {"llm_earlier_stage_unanswered": 1}
    assert first["counts"]["samples"]["sft"] == 3
    assert any(ln.startswith("warning: llm stage sft_reasoning: 1 trajectory(ies) not asked, as an earlier stage got "
                             "no answer for them") for ln in lines), lines

    with JudgeServer(Script()) as server:  # the endpoint is well again: s2 is asked, and only s2
        run_pipeline(llm_config([corpus], out, server.url, "sft"), echo=lambda m: None)
        again = list(server.requests)
    assert len(again) == 1 + 6 and all("s2" in json.dumps(b) for b in again)
    assert _shards(out) == _shards(fresh)


OVER_CONTEXT = Status(400, body=b'{"object": "error", "message": "This model\'s maximum context length is 8192 tokens."}')


def test_requests_the_server_refuses_for_good_are_not_asked_again_at_that_endpoint(tmp_path):
    corpus = write_llm_corpus(tmp_path / "in.jsonl", SCENARIOS[:4])
    fresh = _fresh_run(corpus, tmp_path / "fresh")

    out, script = tmp_path / "out", Script()

    def small_context(body, n):  # every prompt about s2 is over this server's context
        return OVER_CONTEXT if "s2" in json.dumps(body) else script(body, n)

    lines: list[str] = []
    with JudgeServer(small_context) as server:
        first = run_pipeline(llm_config([corpus], out, server.url, "sft"), echo=lines.append)
        asked_first = list(server.requests)
        again = run_pipeline(llm_config([corpus], out, server.url, "sft"), echo=lambda m: None)
        assert len(server.requests) == len(asked_first)  # the same command again: nothing is sent
    assert sum("s2" in json.dumps(b) for b in asked_first) == 1 + 3  # the instruction, then 3 candidates
    rows = {r["traj_id"]: r for p in (out / "llm" / "instructions").glob("*.parquet") for r in pq.read_table(p).to_pylist()}
    assert (rows["t-s2"]["status"], rows["t-s2"]["reason"]) == ("rejected", "request_refused")
    for manifest in (first, again):
        stages = manifest["llm"]["stages"]
        assert stages["instructions"]["usage"]["refused"] == {"HTTP 400: This model's maximum context length is "
                                                              "8192 tokens.": 1}
        assert stages["sft_reasoning"]["counts"]["dropped"] == {"request_refused": 1}
        assert manifest["counts"]["samples"]["sft"] == 3
    assert any(ln.startswith("warning: llm stage instructions: 1 request(s) refused by the server as it will refuse "
                             "them again (HTTP 400: This model's maximum context length is 8192 tokens. 1)")
               for ln in lines), lines
    assert not any("got no answer" in ln for ln in lines), lines

    with JudgeServer(Script()) as larger:  # another server, which takes the longer prompts: they are asked there
        run_pipeline(llm_config([corpus], out, larger.url, "sft"), echo=lambda m: None)
        asked = list(larger.requests)
    assert asked and all("s2" in json.dumps(b) for b in asked)
    assert _shards(out) == _shards(fresh)


def test_the_request_budget_holds_for_the_whole_run_not_each_stage(tmp_path):
    from pipeline.llm_stage import BudgetExhausted

    corpus = write_llm_corpus(tmp_path / "in.jsonl", SCENARIOS[:4])  # 4 instruction requests, then 24 for sft
    with JudgeServer(Script()) as server:
        try:
            run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", max_requests=10),
                         echo=lambda m: None)
        except BudgetExhausted as exc:
            message = str(exc)
        else:
            raise AssertionError("a budget of 10 requests ran 28")
        sent = len(server.requests)
    assert sent == 10  # each request is counted before it is sent: 4 for the instructions, 6 for sft reasoning
    assert "llm budget spent in stage sft_reasoning after 10 requests" in message


@pytest.mark.parametrize("order", [("wmat_blocks", "sft_reasoning"), ("sft_reasoning", "wmat_blocks")])
def test_a_stage_whose_output_no_later_prompt_holds_does_not_hold_back_later_stages_when_unanswered(order, tmp_path):
    """WMAT blocks feed only the WMAT pools and SFT reasoning only the samples: neither changes what a later stage's
    prompt holds, so every request of the one failing leaves the other asking about every trajectory."""
    corpus = write_llm_corpus(tmp_path / "in.jsonl", SCENARIOS[:4])
    failing, later = order
    script = Script()

    def first_stage_down(body, n):
        writes_blocks = body["messages"][0]["content"].startswith("You write world-model blocks")
        if writes_blocks == (failing == "wmat_blocks"):
            return Status(500)
        return Answer("no block here") if writes_blocks else script(body, n)

    with JudgeServer(first_stage_down) as server:
        manifest = run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", stages=list(order),
                                           wmat_pools=["sft"], wmat_steps=1), echo=lambda m: None)
        asked = [json.dumps(b) for b in server.requests]
    stages = manifest["llm"]["stages"]
    assert stages[failing]["usage"]["failures"] > 0 and "not_asked" not in stages[later]["counts"], stages
    writes_blocks = [b for b in asked if "You write world-model blocks" in b]
    later_requests = writes_blocks if later == "wmat_blocks" else [b for b in asked if b not in writes_blocks]
    assert all(any(s in b for b in later_requests) for s in SCENARIOS[:4])
