"""Rejection-sampled sft reasoning against a loopback OpenAI-compatible server answering from a script:
winners (best score, ties broken pairwise), drops with their reasons, failures (429, timeouts,
5xx, malformed answers, a judge without scores), the cache on a re-run, and the weighted-loss
contract on the new sft targets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.run import run_pipeline
from stages.llm.rejection import PAIRWISE_SYSTEM
from stages.render import PRED_CLOSE, PRED_OPEN
from stages.tokenizer import load_tokenizer
from tests.helpers import (
    CANDIDATES,
    Answer,
    JudgeServer,
    Raw,
    Script,
    candidate_text,
    llm_config,
    scenario,
    write_llm_corpus,
)

SCENARIOS = list(CANDIDATES)
KEPT = {"good": 1, "tie": 2, "tiebad": 0, "flaky": 0, "slow": 1}  # scenario → winning candidate
DROPPED = {"malformed": "malformed", "low": "below_threshold", "down": "request_failed", "judgebad": "judge_failed"}


def _rows(out: Path, sub: str) -> list[dict]:
    return [r for p in sorted((out / sub).glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def _shard_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "shards").rglob("*.parquet"))}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_llm_corpus(tmp_path_factory.mktemp("llm") / "in.jsonl", SCENARIOS)


@pytest.fixture(scope="module")
def first(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft") / "out"
    script = Script()
    with JudgeServer(script) as server:
        cfg = llm_config([corpus], out, server.url, "sft", stages=["sft_reasoning"])
        manifest = run_pipeline(cfg, echo=lambda m: None)
        return out, manifest, script, list(server.requests)


def test_winners_are_the_best_candidates_and_ties_are_broken_pairwise(first):
    out, _, script, _ = first
    rows = {r["traj_id"].removeprefix("t-"): r for r in _rows(out, "llm/sft_reasoning")}
    assert set(rows) == set(SCENARIOS)
    for scn, winner in KEPT.items():
        row = rows[scn]
        assert (row["status"], row["winner"]) == ("kept", winner), scn
        assert row["reasoning"] == f"Thinking about {scn}, candidate {winner}: the search returns one line.\n"
        assert row["score"] == 5.0 * max(v for v in CANDIDATES[scn] if isinstance(v, int))
    assert rows["tie"]["tied"] == 2 and rows["tiebad"]["tied"] == 2 and rows["good"]["tied"] == 1
    assert rows["good"]["candidate_scores"] == [15.0, 25.0, 20.0]
    assert rows["slow"]["candidate_scores"] == [-1.0, 25.0, 15.0]  # the timed-out candidate is never scored
    assert script.kinds["pairwise"] == 2  # tie (answered B) and tiebad (unusable: the first candidate stays)


def test_dropped_targets_are_counted_with_their_reason_and_never_become_samples(first):
    out, manifest, _, _ = first
    rows = {r["traj_id"].removeprefix("t-"): r for r in _rows(out, "llm/sft_reasoning")}
    for scn, reason in DROPPED.items():
        assert (rows[scn]["status"], rows[scn]["reason"], rows[scn]["reasoning"]) == ("dropped", reason, None), scn
    counts = manifest["llm"]["stages"]["sft_reasoning"]["counts"]
    assert counts["kept"] == len(KEPT)
    assert counts["dropped"] == {reason: 1 for reason in DROPPED.values()}
    assert counts["ties"] == {"targets": 2, "comparisons": 2, "unresolved": 1}
    assert manifest["counts"]["filtered"] == {f"llm_{r}": 1 for r in DROPPED.values()}
    shard = _rows(out, "shards/sft")
    assert sorted(r["traj_id"].removeprefix("t-") for r in shard) == sorted(KEPT)
    assert manifest["counts"]["samples"]["sft"] == len(KEPT)


def _judged(requests) -> list[dict]:
    """The judge's requests: grades and pairwise comparisons (generation requests carry a seed)."""
    return [b for b in requests if "seed" not in b]


def test_every_judge_request_is_bounded_by_default(first):
    *_, requests = first
    judged = _judged(requests)
    assert any(b["messages"][0]["content"] == PAIRWISE_SYSTEM for b in judged)  # comparisons were asked too
    assert {b.get("max_tokens") for b in judged} == {4096}


def test_the_judges_max_tokens_is_configured(corpus, tmp_path):
    with JudgeServer(Script()) as server:
        run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", stages=["sft_reasoning"],
                                judge_max_tokens=300, max_completion_tokens=700), echo=lambda m: None)
        requests = list(server.requests)
    judged = _judged(requests)
    assert len(judged) >= len(SCENARIOS) and {b["max_tokens"] for b in judged} == {300}
    assert {b["max_tokens"] for b in requests if "seed" in b} == {700}  # generation keeps its own bound


def test_failures_retries_and_tokens_are_in_the_manifest(first):
    _, manifest, _, requests = first
    section = manifest["llm"]
    assert section["model"] == section["judge_model"] == "scripted"
    usage = section["stages"]["sft_reasoning"]["usage"]
    # identical judge requests (two candidates predicting the same text) may meet in the cache
    assert usage["requests"] + usage["cache_hits"] == usage["calls"]
    # failed calls: 'down' (3 × HTTP 500) and the timed-out candidate of 'slow'
    assert usage["errors"] == {"HTTP 500": 3, "timeout": 1}
    assert usage["failures"] == 4
    # flaky: one 429 per candidate; down and slow: one retry per failed call (max_retries 1)
    assert usage["retries"] == 3 + 3 + 1
    assert usage["attempts"] == len(requests)  # every HTTP attempt reached the server
    gen = 3 * len(SCENARIOS) - 4  # answered generation calls: 50 + 10 tokens each
    assert usage["completion_tokens"] >= 10 * gen and usage["prompt_tokens"] >= 50 * gen


def test_a_rerun_answers_everything_from_the_cache_in_the_run_output(corpus, first, tmp_path):
    out, manifest, _, _ = first
    again = tmp_path / "out"
    shutil.copytree(out, again)
    shutil.rmtree(again / "_tasks" / "llm_sft_reasoning")  # the markers would skip the stage altogether
    shutil.rmtree(again / "llm")
    with JudgeServer(Script()) as server:  # another port: the cache is keyed by content, not endpoint
        m2 = run_pipeline(llm_config([corpus], again, server.url, "sft", stages=["sft_reasoning"]), echo=lambda m: None)
        # only the calls that failed before are asked again (failures are never cached): 'down' × 3
        # and the timed-out candidate of 'slow', two attempts each; every answered request is a cache hit
        resent = sorted((scenario(b["messages"][-1]["content"]), b["seed"]) for b in server.requests)
    assert resent == sorted([("down", 0), ("down", 1), ("down", 2), ("slow", 0)] * 2)
    usage = m2["llm"]["stages"]["sft_reasoning"]["usage"]
    first_usage = manifest["llm"]["stages"]["sft_reasoning"]["usage"]
    assert usage["requests"] == usage["failures"] == 4
    assert usage["cache_hits"] == first_usage["calls"] - first_usage["failures"]
    assert _shard_bytes(again) == _shard_bytes(out)


@pytest.mark.parametrize("weight", [1.0, 0.25])
def test_new_sft_targets_keep_the_weighted_loss_contract(corpus, tmp_path, weight):
    out = tmp_path / "out"
    with JudgeServer(Script()) as server:
        run_pipeline(llm_config([corpus], out, server.url, "sft", stages=["sft_reasoning"], reasoning_weight=weight),
                     echo=lambda m: None)
    tok = load_tokenizer("default")
    source = {json.loads(line)["traj_id"]: json.loads(line) for line in corpus.read_text().splitlines()}
    rows = _rows(out, "shards/sft")
    assert len(rows) == len(KEPT)
    for row in rows:
        scn = row["traj_id"].removeprefix("t-")
        reasoning = candidate_text(scn, KEPT[scn], CANDIDATES[scn][KEPT[scn]]).split(PRED_OPEN)[0].strip() + "\n"
        observation = source[row["traj_id"]]["turns"][row["turn_idx"] - 1]["observation"]
        ids, w = row["input_ids"], row["loss_weight"]
        trained = [i for i, x in enumerate(w) if x > 0]
        # one contiguous weighted region: reasoning, the tagged real observation, the end token
        assert trained == list(range(trained[0], trained[-1] + 1))
        assert tok.decode(ids[trained[0] : trained[-1] + 1]) == f"{reasoning}{PRED_OPEN}{observation}{PRED_CLOSE}<|im_end|>"
        reason_ids = [i for i in trained if w[i] == weight] if weight != 1.0 else []
        if weight != 1.0:
            assert tok.decode([ids[i] for i in reason_ids]) == reasoning
            rest = [i for i in trained if i not in reason_ids]
            assert {w[i] for i in rest} == {1.0}
            assert tok.decode([ids[i] for i in rest]) == f"{PRED_OPEN}{observation}{PRED_CLOSE}<|im_end|>"
        else:
            assert set(w[i] for i in trained) == {1.0}
        assert all(x == 0 for x in w[: trained[0]])  # system, history and the target action stay at 0
        span = row["turn_spans"][-1]
        assert (span["start"], span["end"]) == (trained[0], trained[-1] + 1)


@pytest.mark.parametrize("chat_format", ["chatml", "plain"])
def test_the_reasoning_weight_changes_weights_of_reasoning_tokens_only(chat_format):
    from masking import load_table, score_turn
    from schemas.trajectory import Source, SystemPrompt, Trajectory, Turn
    from stages.samples import TrajectorySamples
    from stages.tokenizer.segments import segment_tokenizer

    turns = [Turn('{"cmd": "ls"}', "a.txt  b.txt"),
             Turn('{"cmd": "pip install numpy"}', "ERROR: No space left on device",
                  reasoning="The disk was nearly full before, so the unpack fails.\n")]
    traj = Trajectory("t1", "terminal", "k", Source(), SystemPrompt("task", "shell"), turns)
    seg = segment_tokenizer(load_tokenizer("default"))
    scores = [score_turn(t.action, t.observation, load_table(None)) for t in turns]

    def sample(weight):
        return TrajectorySamples(traj, "system text", scores, seg, chat_format, reasoning_weight=weight,
                                 target_reasoning={2: turns[1].reasoning}).turn_sample(2, 10**6)

    one, quarter = sample(1.0), sample(0.25)
    assert one.ids == quarter.ids and one.spans == quarter.spans
    changed = [i for i, (a, b) in enumerate(zip(one.weights, quarter.weights)) if a != b]
    assert {one.weights[i] for i in changed} == {1.0} and {quarter.weights[i] for i in changed} == {0.25}
    assert seg.tok.decode([one.ids[i] for i in changed]) == turns[1].reasoning
    assert changed == list(range(changed[0], changed[-1] + 1))


def test_on_the_real_samples_every_sft_target_carries_kept_reasoning_and_its_real_observation(shared_data, tmp_path):
    out = tmp_path / "out"
    with JudgeServer(Script()) as server:  # default script: candidates judged 5, 4, 3 (winner: candidate 0)
        cfg = llm_config([shared_data], out, server.url, "sft")
        cfg["run"]["max_quarantine_rate"] = 1.0
        manifest = run_pipeline(cfg, echo=lambda m: None)
    trajs = {r["traj_id"]: r for p in (out / "trajectories").glob("*.parquet") for r in pq.read_table(p).to_pylist()}
    rows = _rows(out, "llm/sft_reasoning")
    assert len(rows) >= 10 and {r["status"] for r in rows} == {"kept"}
    shard = _rows(out, "shards/sft")
    assert manifest["llm"]["stages"]["sft_reasoning"]["counts"]["kept"] == len(rows) >= len(shard) >= 10
    tok = load_tokenizer("default")
    for row in shard:
        observation = trajs[row["traj_id"]]["turns"][row["turn_idx"] - 1]["observation"]
        reasoning = candidate_text("", 0, 5).split(PRED_OPEN)[0].strip() + "\n"
        trained = [i for i, x in enumerate(row["loss_weight"]) if x > 0]
        text = tok.decode(row["input_ids"][trained[0] : trained[-1] + 1])
        assert text == f"{reasoning}{PRED_OPEN}{observation}{PRED_CLOSE}<|im_end|>", row["traj_id"]


def test_kept_reasoning_is_the_targets_and_leaves_the_agents_own_reasoning_alone():
    """The sft_reasoning rows give the world model's reasoning for a target; the turn's ``reasoning`` (the
    agent's thought, which WMAT's policy segments hold when both stages run) stays what the log recorded."""
    from schemas.trajectory import Source, SystemPrompt, Trajectory, Turn
    from stages.llm.rejection import STAGE
    from stages.llm.stage import Applied

    turns = [Turn('{"cmd": "ls"}', "a.txt", reasoning="I look around first."),
             Turn('{"cmd": "cat a.txt"}', "hello", reasoning="Then I read the file."),
             Turn('{"cmd": "rm a.txt"}', "", reasoning="Clean up.")]
    traj = Trajectory("t1", "terminal", "k", Source(), SystemPrompt("task", "shell"), turns)
    rows = [{"traj_id": "t1", "turn_idx": 2, "status": "kept", "reason": None, "reasoning": "cat prints the file."},
            {"traj_id": "t1", "turn_idx": 3, "status": "dropped", "reason": "below_threshold", "reasoning": None}]
    applied = Applied()
    applied.add(STAGE.apply(traj, rows, None))
    assert applied.reasoning == {2: "cat prints the file."} and applied.dropped == {3: "below_threshold"}
    assert [t.reasoning for t in traj.turns] == ["I look around first.", "Then I read the file.", "Clean up."]
    applied.add({1: "request_failed"})  # a stage of one's own may still return drop reasons only
    assert applied.dropped == {1: "request_failed", 3: "below_threshold"}


@pytest.mark.parametrize("reasons", [["request_failed", "request_failed"], ["request_failed", "earlier_stage_unanswered"],
                                     ["request_failed", ""], ["request_refused"], ["below_threshold"]])
def test_no_target_answered_drops_the_targets_but_holds_no_later_stage_back(reasons):
    """The reasoning reaches the samples only, never the trajectory a later stage's prompt is made from: a trajectory
    none of whose targets got an answer is not held back from later stages (`Applied.unanswered`)."""
    from schemas.trajectory import Source, SystemPrompt, Trajectory, Turn
    from stages.llm.rejection import STAGE

    traj = Trajectory("t1", "terminal", "k", Source(), SystemPrompt("task", "shell"),
                      [Turn('{"cmd": "ls"}', "a.txt"), Turn('{"cmd": "cat a.txt"}', "hello")])
    rows = [{"traj_id": "t1", "turn_idx": t, "status": "dropped" if reason else "kept", "reason": reason,
             "reasoning": None if reason else "cat prints it."} for t, reason in enumerate(reasons, 1)]
    applied = STAGE.apply(traj, rows, None)
    assert applied.unanswered is False
    assert applied.dropped == {t: reason for t, reason in enumerate(reasons, 1) if reason}


def test_a_server_that_sends_the_thinking_apart_gives_the_same_kept_reasoning(first, tmp_path):
    """vLLM or SGLang with a reasoning parser: the text before the tag comes as ``message.reasoning_content``."""
    corpus = write_llm_corpus(tmp_path / "in.jsonl", ["good", "tie", "low"])
    script = Script()

    def reply(body, n):
        answer = script(body, n)
        if "seed" not in body or not isinstance(answer, Answer) or PRED_OPEN not in answer.text:
            return answer
        thinking, tag, rest = answer.text.partition(PRED_OPEN)
        return Raw(json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": tag + rest, "reasoning_content": thinking}}]}).encode())

    with JudgeServer(reply) as server:
        run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft", stages=["sft_reasoning"]),
                     echo=lambda m: None)
    rows = {r["traj_id"].removeprefix("t-"): r for r in _rows(tmp_path / "out", "llm/sft_reasoning")}
    expected = {r["traj_id"].removeprefix("t-"): r for r in _rows(first[0], "llm/sft_reasoning")}
    assert {k: (r["status"], r["winner"], r["reasoning"]) for k, r in rows.items()} == {
        k: (expected[k]["status"], expected[k]["winner"], expected[k]["reasoning"]) for k in rows}
    assert rows["good"]["status"] == "kept" and rows["good"]["reasoning"].startswith("Thinking about good")
