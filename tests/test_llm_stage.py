"""The model-in-the-loop machinery: off by default without a byte of change, dry run, request and
token budget over every worker, progress with requests/s, and Ray giving the bytes of the
in-process runner (loopback OpenAI-compatible server answering from a script)."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.config import config_hash, resolve
from pipeline.llm_stage import BudgetExhausted, EndpointFailed, LLMDryRun, resolve_llm
from pipeline.run import run_pipeline
from schemas.errors import ConfigError
from tests.helpers import (
    LWM,
    Answer,
    JudgeServer,
    Raw,
    Script,
    Status,
    clean_env,
    llm_config,
    scenario,
    write_llm_corpus,
)

CLEAN = ["good", "low", "tie"]  # no failing requests: every request is answered (and cached)


def _shards(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "shards").rglob("*.parquet"))}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_llm_corpus(tmp_path_factory.mktemp("llm") / "in.jsonl", CLEAN)


@pytest.fixture(scope="module")
def fresh(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("fresh") / "out"
    with JudgeServer(Script()) as server:
        manifest = run_pipeline(llm_config([corpus], out, server.url, "sft"), echo=lambda m: None)
        return out, manifest, list(server.requests)


def test_without_an_llm_section_nothing_changes(corpus, tmp_path):
    plain = resolve({})
    assert "llm" not in plain
    assert config_hash(resolve({}, {"executor": {"kind": "local"}})) == config_hash(plain)
    base = llm_config([corpus], tmp_path / "a", "", "sft")
    off = {k: v for k, v in base.items() if k != "llm"}
    run_pipeline(off, echo=lambda m: None)
    run_pipeline({**off, "llm": resolve_llm([{"model": "m"}]), "run": {**off["run"], "out": str(tmp_path / "b")}},
                 echo=lambda m: None)  # a section without endpoint: the stages are off
    assert _shards(tmp_path / "a") == _shards(tmp_path / "b")
    assert not (tmp_path / "a" / "llm").exists() and not (tmp_path / "b" / "_llm").exists()


def test_llm_config_is_checked():
    with pytest.raises(ConfigError, match=r"unknown config key 'llm\.endpiont'"):
        resolve({"llm": {"endpiont": "x"}})
    with pytest.raises(ConfigError, match=r"llm\.model is required"):
        resolve({"llm": {"endpoint": "http://x/v1"}})
    with pytest.raises(ConfigError, match="unknown stage 'judge'"):
        resolve({"llm": {"stages": ["judge"]}})
    cfg = resolve({"llm": {"endpoint": "http://a/v1", "model": "m"}}, {"llm": {"max_requests": 7}})
    assert cfg["llm"]["max_requests"] == 7 and cfg["llm"]["model"] == "m"
    # where requests go and how many may be sent never changes the output config
    other = resolve({"llm": {"endpoint": "http://b/v1", "model": "m", "concurrency": 1}})
    assert config_hash(cfg) == config_hash(other)
    assert config_hash(cfg) != config_hash(resolve({"llm": {"endpoint": "http://a/v1", "model": "m2"}}))


def test_a_dry_run_prints_requests_and_projected_calls_and_sends_nothing(corpus, tmp_path):
    lines: list[str] = []
    with JudgeServer(Script()) as server:
        with pytest.raises(LLMDryRun) as info:
            run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", dry_run=True), echo=lines.append)
        assert server.requests == []
    report = info.value.report
    # instructions: one call per trajectory, at most one re-ask; reasoning: 3 candidates + 3 judge calls
    # per target at least, plus 3 judge re-asks and 2 comparisons at most
    assert {k: (v["items"], v["calls_min"], v["calls_max"]) for k, v in report.items()} == {
        "instructions": (3, 3, 6), "sft_reasoning": (3, 18, 33)}
    first = report["sft_reasoning"]["first_requests"]
    assert [r["salt"] for r in first] == ["candidate-0", "candidate-1"] and first[0]["params"]["seed"] == 0
    assert first[0]["messages"][-1]["content"].endswith("</predicted_observation>.")
    text = "\n".join(lines)
    assert "stage sft_reasoning: 3 item(s), projected 18–33 calls" in text
    assert first[0]["messages"][0]["content"] in text and "nothing was sent" in text
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_the_cli_dry_run(corpus, tmp_path):
    with JudgeServer(Script()) as server:
        done = subprocess.run(
            [LWM, "run", "--executor", "local", "--input", str(corpus), "--out", str(tmp_path / "out"),
             "--progress", "off", "--llm-endpoint", server.url, "--llm-model", "m", "--llm-dry-run"],
            env=clean_env(), capture_output=True, text=True, timeout=120)
        assert server.requests == []
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[llm dry run] stage instructions: " in done.stderr and "nothing was sent" in done.stderr
    # the judge is named for the stage that asks it only
    heads = {line.split(":")[0].removeprefix("[llm dry run] stage "): line for line in done.stderr.splitlines()
             if line.startswith("[llm dry run] stage ")}
    assert heads["instructions"].endswith("calls (model m)"), heads
    assert "calls (model m, judge m); " in heads["sft_reasoning"], heads


@pytest.mark.parametrize("stages", [None, []], ids=["no endpoint", "no stage"])
def test_an_llm_dry_run_without_a_model_stage_is_one_line_before_any_work(stages, corpus, tmp_path):
    out = tmp_path / "out"
    args = [LWM, "run", "--executor", "local", "--input", str(corpus), "--out", str(out), "--progress", "off",
            "--llm-dry-run"]
    if stages is not None:  # an endpoint, but no stage to send to it
        config = tmp_path / "run.toml"
        config.write_text("[llm]\nendpoint = 'http://127.0.0.1:9/v1'\nmodel = 'm'\nstages = []\n")
        args += ["--config", str(config)]
    done = subprocess.run(args, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == ["lwm: error: llm.dry_run (--llm-dry-run): no model stage is configured, so "
                                        "there is nothing to show; give llm.endpoint (--llm-endpoint), llm.model "
                                        "(--llm-model) and at least one of llm.stages"]
    assert not out.exists()  # nothing ran


def _keys(bodies) -> set[str]:
    return {json.dumps(b, sort_keys=True) for b in bodies}


def test_the_request_budget_stops_the_run_and_the_next_run_continues(corpus, tmp_path):
    out, whole = tmp_path / "out", tmp_path / "whole"
    with JudgeServer(Script()) as server:
        run_pipeline(llm_config([corpus], whole, server.url, "sft", stages=["sft_reasoning"]), echo=lambda m: None)
        unbudgeted = list(server.requests)
    with JudgeServer(Script()) as server:
        with pytest.raises(BudgetExhausted, match=r"after 5 requests .* run again to continue"):
            run_pipeline(llm_config([corpus], out, server.url, "sft", stages=["sft_reasoning"], max_requests=5),
                         echo=lambda m: None)
        first = list(server.requests)
    assert len(first) == 5 and not (out / "_SUCCESS").exists()
    with JudgeServer(Script()) as server:
        run_pipeline(llm_config([corpus], out, server.url, "sft", stages=["sft_reasoning"]), echo=lambda m: None)
        second = list(server.requests)
    assert not _keys(first) & _keys(second)  # nothing answered was asked again
    assert _keys(first) | _keys(second) == _keys(unbudgeted)
    assert _shards(out) == _shards(whole)


def test_progress_reports_requests_per_second_and_tokens(corpus, tmp_path, capsys):
    with JudgeServer(Script()) as server:
        cfg = llm_config([corpus], tmp_path / "out", server.url, "sft", stages=["sft_reasoning"])
        cfg["executor"]["progress"] = "lines"
        run_pipeline(cfg, echo=lambda m: None)
        sent = len(server.requests)
    err = capsys.readouterr().err
    line = [ln for ln in err.splitlines() if ln.startswith("[llm_sft_reasoning] ") and "req/s" in ln][-1]
    assert f"{sent} requests" in line and "tokens" in line and "0 failed" in line


def test_manifest_accounts_for_every_request(fresh):
    _, manifest, requests = fresh
    stages = manifest["llm"]["stages"]
    sent = sum(s["usage"]["requests"] for s in stages.values())
    assert sent == len(requests)
    assert stages["instructions"]["usage"]["requests"] == sum(
        1 for b in requests if b["messages"][0]["content"].startswith("You write simulation instructions"))
    assert sorted(scenario(b["messages"][-1]["content"]) for b in requests if "seed" in b) == sorted(CLEAN * 3)


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_ADDRESS", raising=False)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
        try:
            yield ray
        finally:
            ray.shutdown()


def test_on_ray_the_stages_give_the_bytes_of_the_in_process_run(ray_session, corpus, fresh, tmp_path):
    from pipeline.ray_executor import RayExecutor

    fresh_out, fresh_manifest, _ = fresh
    out = tmp_path / "out"
    with JudgeServer(Script()) as server:
        cfg = llm_config([corpus], out, server.url, "sft")
        cfg["executor"]["kind"] = "ray"
        manifest = run_pipeline(cfg, echo=lambda m: None, executor=RayExecutor())
        assert len(server.requests) == sum(s["usage"]["requests"] for s in manifest["llm"]["stages"].values())
        # the budget is shared by the Ray workers through one ledger
        with pytest.raises(BudgetExhausted, match="after 4 requests"):
            budget = llm_config([corpus], tmp_path / "b", server.url, "sft", max_requests=4)
            run_pipeline(budget, echo=lambda m: None, executor=RayExecutor())
    assert _shards(out) == _shards(fresh_out)
    assert manifest["llm"]["stages"]["sft_reasoning"]["counts"] == fresh_manifest["llm"]["stages"]["sft_reasoning"]["counts"]


def test_another_task_layout_leaves_no_stage_output_of_the_old_one(corpus, tmp_path):
    out = tmp_path / "out"
    with JudgeServer(Script()) as server:
        for split in (400, 1 << 30):  # byte ranges of 400 bytes (several parts), then one part
            cfg = llm_config([corpus], out, server.url, "sft")
            cfg["ingest"]["split_bytes"] = split
            run_pipeline(cfg, echo=lambda m: None)
            parts = {p.stem for p in (out / "_tasks" / "ingest").glob("*.json")}
            for stage in ("instructions", "sft_reasoning"):
                assert {p.stem.removeprefix("part-") for p in (out / "llm" / stage).glob("*.parquet")} == parts
                assert {p.stem for p in (out / "_tasks" / f"llm_{stage}").glob("*.json")} == parts
            if split == 400:
                assert len(parts) > 1


def test_a_stage_outside_the_package_runs_by_its_path(corpus, tmp_path):
    out = tmp_path / "out"
    with JudgeServer(Script()) as server:
        manifest = run_pipeline(llm_config([corpus], out, server.url, "cpt", stages=["tests.helpers:TURN_COUNT"]),
                                echo=lambda m: None)
        assert len(server.requests) == len(CLEAN)
    stage = manifest["llm"]["stages"]["turn_count"]
    assert stage["counts"] == {"asked": len(CLEAN)} and stage["usage"]["requests"] == len(CLEAN)
    rows = [r for p in (out / "llm" / "turn_count").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    answer = "<simulation_instruction>\nNONE\n</simulation_instruction>"
    assert sorted(r["traj_id"] for r in rows) == sorted(f"t-{s}" for s in CLEAN)
    assert {r["answer_chars"] for r in rows} == {len(answer)}
    assert (out / "_tasks" / "llm_turn_count").is_dir()


def test_a_row_naming_no_trajectory_of_its_batch_has_no_occurrence(corpus, tmp_path):
    out = tmp_path / "out"
    with JudgeServer(Script()) as server:
        run_pipeline(llm_config([corpus], out, server.url, "cpt", stages=["tests.helpers:SUMMARY_ROW"]),
                     echo=lambda m: None)
    rows = [r for p in (out / "llm" / "turn_count_summary").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert sorted(r["traj_id"] for r in rows if r["traj_id"]) == sorted(f"t-{s}" for s in CLEAN)
    assert {r["occurrence"] for r in rows if r["traj_id"]} == {1}
    summaries = [r for r in rows if not r["traj_id"]]
    assert summaries and {r["occurrence"] for r in summaries} == {None}
    assert sum(r["answer_chars"] for r in summaries) == len(CLEAN)


def test_a_stage_with_a_column_named_occurrence_is_one_line_before_any_work(corpus, tmp_path):
    with JudgeServer(Script()) as server:
        with pytest.raises(ConfigError, match=r"^llm\.stages: 'tests\.helpers:OWN_OCCURRENCE' is not a stage: its "
                                              r"schema has a column 'occurrence', which lwm adds to every stage's "
                                              r"rows .*; rename it$"):
            run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "cpt",
                                    stages=["tests.helpers:OWN_OCCURRENCE"]), echo=lambda m: None)
        assert server.requests == []
    assert not (tmp_path / "out").exists()  # refused before ingest: nothing was read or written


def test_the_request_budget_holds_when_the_run_has_worker_processes(corpus, tmp_path):
    cfg = llm_config([corpus], tmp_path / "out", "", "sft", stages=["sft_reasoning"], max_requests=5)
    cfg["executor"].update(kind="processes", num_cpus=2)
    cfg["ingest"]["split_bytes"] = 600  # a trajectories part per trajectory: several tasks per stage
    with JudgeServer(Script()) as server:
        cfg["llm"]["endpoint"] = server.url
        with pytest.raises(BudgetExhausted, match=r"after 5 requests"):
            run_pipeline(cfg, echo=lambda m: None)
        assert len(server.requests) == 5
    assert len(list((tmp_path / "out" / "_tasks" / "ingest").glob("*.json"))) > 2


WRONG_KEY = Status(401, body=b'{"error": {"message": "Incorrect API key provided: sk-wr***ng.", "code": "invalid_api_key"}}')


def test_a_wrong_key_stops_the_run_with_one_line_after_the_first_stage(corpus, tmp_path):
    out = tmp_path / "out"
    with JudgeServer(lambda body, n: WRONG_KEY) as server:
        done = subprocess.run(
            [LWM, "run", "--executor", "local", "--input", str(corpus), "--out", str(out), "--progress", "off",
             "--llm-endpoint", server.url, "--llm-model", "m"],
            env={**clean_env(), "OPENAI_API_KEY": "sk-wrong-key-0123456789abcdef"}, capture_output=True, text=True,
            timeout=120)
        asked = len(server.requests)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("lwm: error: ")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert errors[0].startswith("lwm: error: llm endpoint failed in stage instructions: 3 request(s) in a row refused")
    assert f"{server.url}/chat/completions (model m): HTTP 401: Incorrect API key provided: sk-wr***ng." in errors[0]
    assert "$OPENAI_API_KEY" in errors[0] and "sk-wrong-key" not in done.stderr
    assert asked == len(CLEAN)  # one instruction request per trajectory; the sft stage never started
    assert not (out / "_SUCCESS").exists()


def test_an_endpoint_refusing_every_request_stops_the_stage_before_its_end(tmp_path):
    corpus = write_llm_corpus(tmp_path / "in.jsonl", [f"good{i}" for i in range(30)])
    with JudgeServer(lambda body, n: Status(404, body=b'{"detail": "The model `m` does not exist."}')) as server:
        with pytest.raises(EndpointFailed, match=r"in a row refused, 0 answered .*HTTP 404: The model `m` does not"):
            run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", concurrency=2),
                         echo=lambda m: None)
        assert 5 <= len(server.requests) <= 6  # five in a row, and the one in flight beside the fifth


def test_nothing_listening_at_the_endpoint_stops_the_run(corpus, tmp_path):
    with JudgeServer(lambda body, n: Answer("x")) as server:
        url = server.url  # closed once the block ends: nothing listens there
    with pytest.raises(EndpointFailed, match=r"in stage instructions: .* refused.*connection: .*refused"):
        run_pipeline(llm_config([corpus], tmp_path / "out", url, "sft"), echo=lambda m: None)
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_refusals_between_answers_do_not_stop_the_run(tmp_path):
    corpus = write_llm_corpus(tmp_path / "in.jsonl", [f"good{i}" for i in range(12)])
    script = Script()

    def reply(body, n):  # every other instruction request refused: the endpoint itself works
        return WRONG_KEY if n % 2 else script(body, n)

    with JudgeServer(reply) as server:
        manifest = run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", stages=["instructions"],
                                           concurrency=1), echo=lambda m: None)
        assert len(server.requests) == 12
    assert manifest["llm"]["stages"]["instructions"]["usage"]["failures"] == 6


def _keys_seen(server) -> set[str | None]:
    return {h.get("Authorization") for h in server.headers}


@pytest.mark.parametrize(("judge_key_env", "generator_key", "judge_key"), [
    ("", "Bearer sk-generator-key", None),  # a judge on another server gets no key by default
    ("JUDGE_KEY", "Bearer sk-generator-key", "Bearer sk-judge-key"),  # or its own
])
def test_the_generators_key_goes_to_a_judge_on_another_server_only_when_named(judge_key_env, generator_key,
                                                                               judge_key, corpus, tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-generator-key")
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-key")
    with JudgeServer(Script()) as generator, JudgeServer(Script()) as judge:
        run_pipeline(llm_config([corpus], tmp_path / "out", generator.url, "sft", stages=["sft_reasoning"],
                                judge_endpoint=judge.url,
                                **({"judge_api_key_env": judge_key_env} if judge_key_env else {})),
                     echo=lambda m: None)
        assert generator.requests and judge.requests
        assert _keys_seen(generator) == {generator_key}
        assert _keys_seen(judge) == {judge_key}


def test_a_judge_on_the_generators_server_gets_the_generators_key(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-generator-key")
    with JudgeServer(Script()) as server:
        run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", stages=["sft_reasoning"],
                                judge_endpoint=server.url.replace("/v1", "/v1/")), echo=lambda m: None)
        judged = [h for b, h in zip(server.requests, server.headers, strict=True) if "seed" not in b]
        assert judged and {h.get("Authorization") for h in judged} == {"Bearer sk-generator-key"}


def test_retries_are_requests_of_the_budget(corpus, tmp_path):
    with JudgeServer(lambda body, n: Status(503)) as server:
        with pytest.raises(BudgetExhausted, match=r"after 5 requests"):
            run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", max_requests=5, max_retries=3,
                                    concurrency=1), echo=lambda m: None)
        assert len(server.requests) == 5  # one request tried 4 times and a second one's first try


def test_answers_without_token_counts_warn_once_that_the_token_budget_cannot_hold(corpus, tmp_path):
    script = Script()

    def reply(body, n):  # a server that sends no usage
        answer = script(body, n)
        return Raw(json.dumps({"choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": answer.text}}]}).encode())

    lines: list[str] = []
    with JudgeServer(reply) as server:
        run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", max_tokens=10**6), echo=lines.append)
        sent = len(server.requests)
    warnings = [ln for ln in lines if "without token counts" in ln]
    assert warnings == [f"warning: the endpoint sent {len(CLEAN)} answer(s) without token counts (usage), so "
                        "llm.max_tokens (1000000) cannot bound what they cost; llm.max_requests can"]
    assert sent > len(CLEAN)  # both stages ran: the warning came once, after the first
