"""``lwm reward``: a predictions file scored against a real-data run's rl and eval pools through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages.render import target_reply
from tests.helpers import Answer, JudgeServer, lwm_in_process, scores_answer

POOLS = "[pools]\nratios = {cpt = 0.0, sft = 0.0, rl = 0.5, eval = 0.5}\neval_subsample = 1.0\n"
FOLDERS = ["mini-swe-agent", "aitw-aitz", "opencua-raw", "openai-messages", "swe-agent"]


def lwm(*args: str, process: bool = False) -> subprocess.CompletedProcess:
    """`lwm ARGS` in this process, or as its own process with `process`."""
    if process:
        return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, timeout=600)
    return lwm_in_process(*args)


@pytest.fixture(scope="module")
def run(shared_data, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("reward")
    (base / "pools.toml").write_text(POOLS)
    args = ["run", "--executor", "local", "--progress", "off", "--config", str(base / "pools.toml"), "-o", str(base / "run")]
    for folder in FOLDERS:
        args += ["-i", str(shared_data / folder)]
    proc = lwm(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return base / "run"


def rows(run: Path, pool: str) -> list[dict]:
    return sorted((r for p in (run / "shards" / pool).glob("*.parquet") for r in pq.read_table(p).to_pylist()),
                  key=lambda r: r["sample_id"])


def judge(body, n):
    user = body["messages"][1]["content"]
    return Answer("no scores here" if "MAKE-JUDGE-FAIL" in user else scores_answer(4))


def test_rl_pool_scores_per_domain(run, tmp_path):
    rl = rows(run, "rl")
    assert len(rl) >= 4
    preds, expected = [], {}
    for i, r in enumerate(rl):
        if i == 0:
            text, reward = "I believe it prints nothing.", 0.0  # no tags: format failure
        elif i == 1:
            text, reward = target_reply("MAKE-JUDGE-FAIL", ""), 0.0  # judge never gives scores
        else:
            text = target_reply(r["reference"], "Reasoning.\n")  # exact: the rule passes where there is one
            reward = 20.0 if r["verifier"] == "none" else 0.9 * 20 + 0.1 * 25
        preds.append({"sample_id": r["sample_id"], "prediction": text})
        expected[r["sample_id"]] = (r["domain"], reward)
    preds.append({"sample_id": "not-a-sample", "prediction": "x"})
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in preds))
    with JudgeServer(judge) as server:
        args = ["reward", str(run), str(path), "--judge-url", server.url, "--judge-model", "j", "--json",
                "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "scores.jsonl")]
        proc = lwm(*args)
        assert proc.returncode == 0, proc.stderr
        # why, from the sample's own failure: the judge answered (no call failed), but without scores
        assert (f"warning: the judge at {server.url} gave no usable answer for 1 of {len(rl) - 1} samples "
                "(no JSON object ×1)") in proc.stderr
        report = json.loads(proc.stdout)
        asked = len(server.requests)
        again = json.loads(lwm(*args, process=True).stdout)  # a new process: only the cache on disk is shared
        assert len(server.requests) == asked  # every successful judge answer came from the cache
    assert report["scored"] == len(rl) and report["unknown_ids"] == 1 and report["without_prediction"] == 0
    for domain in {d for d, _ in expected.values()}:
        want = [w for d, w in expected.values() if d == domain]
        assert report["domains"][domain]["mean_reward"] == pytest.approx(sum(want) / len(want))
    overall = report["domains"]["all"]
    assert overall["samples"] == len(rl)
    assert overall["format_failure_rate"] == pytest.approx(1 / len(rl))
    assert overall["judge_failure_rate"] == pytest.approx(1 / (len(rl) - 1))
    with_verifier = [r for r in rl[1:] if r["verifier"] != "none"]
    assert overall["with_verifier"] == len(with_verifier)
    # the judge-failure sample's prediction is wrong for its verifier; every other exact one passes
    wrong = int(rl[1]["verifier"] != "none")
    assert overall["rule_pass_rate"] == pytest.approx((len(with_verifier) - wrong) / len(with_verifier))
    judged_calls = (len(rl) - 1) + 1  # every tagged prediction, plus one re-ask of the unusable answer
    assert report["judge"]["calls"] == judged_calls and again["judge"]["cache_hits"] == judged_calls
    assert again["domains"] == report["domains"]
    lines = [json.loads(x) for x in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert {x["sample_id"]: x["reward"] for x in lines} == pytest.approx({k: v for k, (_, v) in expected.items()})


def test_eval_pool_from_agentworldbench_style_predictions(run, tmp_path):
    ev = rows(run, "eval")
    later = [r for r in ev if r["turn_idx"] > 1]
    assert ev and later
    path = tmp_path / "gen.jsonl"
    path.write_text("".join(json.dumps({"id": r["sample_id"], "gen": "<predicted_observation>\nok\n</predicted_observation>"}) + "\n"
                            for r in later))
    with JudgeServer(judge) as server:
        proc = lwm("reward", str(run), str(path), "--pool", "eval", "--judge-url", server.url, "--judge-model", "j")
        assert proc.returncode == 0, proc.stderr
        assert len(server.requests) == len(later)
        # the judge saw each sample's history: the trajectory's earlier turns come back from the trajectories layer
        assert all("# Earlier turns" in b["messages"][1]["content"] for b in server.requests)
    head, *body = proc.stdout.splitlines()
    assert head.split() == ["domain", "n", "reward", "rule", "pass", "judge", "fail", "format", "fail"]
    assert body[-1].split()[:2] == ["all", str(len(later))]
    assert f"{len(ev) - len(later)} eval samples had no prediction" in proc.stderr


def test_bad_prediction_files_are_one_line_errors(run, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sample_id": "a", "prediction": "x"}\nnot json\n')
    proc = lwm("reward", str(run), str(bad), "--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "j")
    assert proc.returncode == 2 and f"{bad}:2: not a JSON object" in proc.stderr and "Traceback" not in proc.stderr
    bad.write_text('{"sample_id": "nope", "prediction": "x"}\n')
    proc = lwm("reward", str(run), str(bad), "--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "j")
    assert proc.returncode == 2 and "none of its 1 sample ids is in the rl pool" in proc.stderr
    proc = lwm("reward", str(tmp_path), str(bad), "--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "j")
    assert proc.returncode == 2 and "not a finished run" in proc.stderr
    # a sample predicted twice: which one to score is ambiguous, so neither silently replaces the other
    bad.write_text('{"sample_id": "a", "prediction": "x"}\n{"sample_id": "b", "prediction": "y"}\n'
                   '{"id": "a", "gen": "z"}\n')
    proc = lwm("reward", str(run), str(bad), "--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "j")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"lwm: error: {bad}:3: sample id a already has a prediction (line 1); give one prediction per sample"]


def test_a_judge_that_never_answers_fails_the_command_after_recording_why(run, tmp_path):
    """Rewards without a single judge answer are not scores: one line naming the judge and the errors, exit 2;
    the per-sample file still records each failure."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    rl = rows(run, "rl")[:3]
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps({"sample_id": r["sample_id"], "prediction": target_reply(r["reference"], "")})
                            + "\n" for r in rl))
    out = tmp_path / "scores.jsonl"
    proc = lwm("reward", str(run), str(path), "--judge-url", url, "--judge-model", "j", "--retries", "0",
               "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("lwm: error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert errors[0].startswith(f"lwm: error: the judge at {url} gave no usable answer for any of the 3 samples "
                                "sent to it (judge call failed: connection")
    assert "×3); the rewards above hold no rubric scores" in errors[0]
    assert all(json.loads(x)["judge_error"] for x in out.read_text().splitlines())


@pytest.mark.parametrize(("args", "expected"), [
    (["--judge-url", "notaurl"], "--judge-url: expected an http(s) base URL"),
    (["--timeout", "-5"], "Invalid value for '--timeout'"),
    (["--timeout", "0"], "Invalid value for '--timeout'"),
    (["--concurrency", "0"], "Invalid value for '--concurrency'"),
    (["--retries", "-3"], "Invalid value for '--retries'"),
    (["--max-tokens", "0"], "Invalid value for '--max-tokens'"),
])
def test_bad_judge_settings_are_refused_before_anything_is_asked(run, tmp_path, args, expected):
    path = tmp_path / "preds.jsonl"
    path.write_text(json.dumps({"sample_id": rows(run, "rl")[0]["sample_id"], "prediction": "x"}) + "\n")
    base = {"--judge-url": "http://127.0.0.1:9/v1", "--judge-model": "j"}
    base.update(dict(zip(args[::2], args[1::2])))
    proc = lwm("reward", str(run), str(path), *[x for kv in base.items() for x in kv])
    assert proc.returncode == 2 and expected in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("weight", [["--rubric-weight", "nan"], ["--rule-weight", "inf"], ["--rubric-weight", "-inf"]])
def test_weights_that_are_not_finite_numbers_are_refused_in_one_line(run, tmp_path, weight):
    """A NaN weight made every reward NaN and the --json report invalid JSON."""
    path = tmp_path / "preds.jsonl"
    path.write_text(json.dumps({"sample_id": rows(run, "rl")[0]["sample_id"], "prediction": "x"}) + "\n")
    with JudgeServer(judge) as server:
        proc = lwm("reward", str(run), str(path), "--judge-url", server.url, "--judge-model", "j", "--json", *weight)
        assert server.requests == []
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"lwm: error: reward weights must be finite, non-negative and not both 0, not rubric "
        f"{float(weight[1]) if weight[0] == '--rubric-weight' else 9.0!r} and rule "
        f"{float(weight[1]) if weight[0] == '--rule-weight' else 1.0!r}"]


def test_an_empty_predictions_file_says_so(run, tmp_path):
    path = tmp_path / "preds.jsonl"
    path.write_text("")
    proc = lwm("reward", str(run), str(path), "--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "j")
    assert proc.returncode == 2 and proc.stderr.strip() == f"lwm: error: {path}: holds no predictions"


def test_a_prediction_holding_a_lone_surrogate_is_scored_like_any_other(run, tmp_path):
    """JSON allows the escape; the surrogate reaches the judge escaped, and the other predictions are scored too."""
    rl = rows(run, "rl")[:2]
    path = tmp_path / "preds.jsonl"
    texts = [target_reply("broken \ud800 output", ""), target_reply(rl[1]["reference"], "")]
    path.write_text("".join(json.dumps({"sample_id": r["sample_id"], "prediction": t}) + "\n" for r, t in zip(rl, texts)))
    for cache in ([], ["--cache", str(tmp_path / "cache")]):
        with JudgeServer(judge) as server:
            proc = lwm("reward", str(run), str(path), "--judge-url", server.url, "--judge-model", "j", "--json", *cache)
            assert proc.returncode == 0, proc.stderr
            assert sum("broken \ud800 output" in b["messages"][1]["content"] for b in server.requests) == 1
        assert json.loads(proc.stdout)["domains"]["all"]["judged"] == 2


@pytest.mark.parametrize(("line", "why"), [
    (b"\xff\xfe", "not UTF-8 (byte 0xff at character 1)"),
    (b'{"sample_id": "a", "prediction": "x", "n": ' + b"9" * 5000 + b"}", "not a JSON object (an integer of more than"),
    (b'{"sample_id": "a", "prediction": "x", "n": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     "not a JSON object (nested too deeply)"),
])
def test_prediction_lines_python_cannot_read_are_one_line_errors(run, tmp_path, line, why):
    path = tmp_path / "preds.jsonl"
    path.write_bytes(json.dumps({"sample_id": rows(run, "rl")[0]["sample_id"], "prediction": "x"}).encode() + b"\n" + line + b"\n")
    proc = lwm("reward", str(run), str(path), "--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "j")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and proc.stderr.startswith(f"lwm: error: {path}:2: {why}")


def test_a_predictions_file_with_a_byte_order_mark_is_read(run, tmp_path):
    rl = rows(run, "rl")[0]
    path = tmp_path / "preds.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"sample_id": rl["sample_id"], "prediction": target_reply(rl["reference"], "")}).encode() + b"\n")
    with JudgeServer(judge) as server:
        proc = lwm("reward", str(run), str(path), "--judge-url", server.url, "--judge-model", "j", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["scored"] == 1


def test_predictions_of_the_other_pool_say_which_pool_holds_them(run, tmp_path):
    path = tmp_path / "preds.jsonl"
    for held, asked in (("eval", "rl"), ("rl", "eval")):
        ids = [r["sample_id"] for r in rows(run, held)]
        path.write_text("".join(json.dumps({"sample_id": i, "prediction": "x"}) + "\n" for i in ids))
        proc = lwm("reward", str(run), str(path), "--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "j",
                   "--pool", asked)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [
            f"lwm: error: {path}: none of its {len(ids)} sample ids is in the {asked} pool of {run}; they are in the "
            f"{held} pool: give --pool {held}"]


def test_the_judge_flags_name_the_environment_variables_that_stand_for_them(run, tmp_path):
    from click.testing import CliRunner

    from pipeline.cli import main

    text = " ".join(CliRunner().invoke(main, ["reward", "--help"]).output.split())
    assert "[env var: LWM_JUDGE_URL; required]" in text and "[env var: LWM_JUDGE_MODEL; required]" in text
    path = tmp_path / "preds.jsonl"
    path.write_text(json.dumps({"sample_id": "nope", "prediction": "x"}) + "\n")
    unset = CliRunner().invoke(main, ["reward", str(run), str(path)], env={"LWM_JUDGE_URL": None, "LWM_JUDGE_MODEL": None})
    assert unset.exit_code == 2 and "Missing option '--judge-url' (env var: 'LWM_JUDGE_URL')" in unset.output
    set_ = CliRunner().invoke(main, ["reward", str(run), str(path)],
                              env={"LWM_JUDGE_URL": "http://127.0.0.1:9/v1", "LWM_JUDGE_MODEL": "j"})
    assert set_.exit_code == 2 and "none of its 1 sample ids is in the rl pool" in set_.output  # past the flags
