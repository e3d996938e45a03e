"""The official AgentWorldBench evaluator, run unchanged, reads ``lwm export agentworldbench``.

The vendored ``eval/eval.py`` (../shared/vendor/agentworldbench-eval, or ``LWM_AWB_EVAL``) runs as
subprocesses — ``infer``, ``judge``, ``score`` — on the export of (small) demo corpora of every domain,
against a loopback OpenAI-compatible server started here. Its "models":

- ``oracle``: answers with the ground truth it finds for the request's last user message, looked up in
  an index built from the run's trajectories layer (not from the export): the actions of the user
  messages and the observations of the assistant messages name one turn of one trajectory;
- ``wrong``: the same lookup, but answers with the observation of another turn;
- ``judge``: reads the prediction and the ground truth out of the judge prompt and returns a
  well-formed evaluation, all fives when they are equal and all ones when not.

The rows then also go back through ``--format agentworldbench``: ingest → export → ingest is the
identity on the trajectories layer (here, on the demo eval pools).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from schemas.trajectory import DOMAINS
from tests.helpers import lwm_in_process

ROOT = Path(__file__).resolve().parent.parent
EVALUATOR = Path(os.environ.get("LWM_AWB_EVAL", ROOT.parent / "shared" / "vendor" / "agentworldbench-eval"))
MARKER = "**Environment Observation:**"
INSTRUCTION_TAG = "<predicted_observation>"
_TURN = re.compile(r"### Turn (\d+)\n")
_ACTION = "**Action:**\n```json\n"


def lwm(*args: str) -> subprocess.CompletedProcess:
    """`lwm ARGS` in this process (the evaluator, not our command line, is what runs as its own process here)."""
    proc = lwm_in_process(*args)
    assert proc.returncode == 0, proc.stderr
    return proc


def trajectories(run: Path) -> list[dict]:
    rows = []
    for path in sorted((run / "trajectories").glob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def eval_turns(run: Path) -> dict[str, set[int]]:
    """The turns the eval shards sample, by trajectory id."""
    turns: dict[str, set[int]] = {}
    for path in sorted((run / "shards" / "eval").glob("*.parquet")):
        for row in pq.read_table(path, columns=["traj_id", "turn_idx"]).to_pylist():
            turns.setdefault(row["traj_id"], set()).add(row["turn_idx"])
    return turns


# ------------------------------------------------------------------ the loopback server


def action_of(user_message: str) -> tuple[int, str]:
    """Turn number and action of a turn prompt, read with the SPEC §7 layout written out here."""
    head = _TURN.match(user_message)
    assert head, user_message[:80]
    start = user_message.rindex(_ACTION) + len(_ACTION)
    return int(head.group(1)), user_message[start : user_message.index("\n```", start - 1)]


class Oracle:
    """Ground truth of the turns the eval shards sample, keyed by what a request shows of them.

    The actions (user messages) and observations (assistant messages) name the turn; trajectories that
    start alike are told apart by their task, action space, initial state, demonstrations and simulation
    instruction, which
    the request's system prompt or first turn prompt states verbatim (SPEC §7: every non-empty field
    appears in the prompt).
    """

    def __init__(self, trajs: list[dict], sampled: dict[str, set[int]]) -> None:
        self.truth: dict[tuple, list[tuple[tuple[str, ...], str, str]]] = {}
        for t in trajs:
            if t["traj_id"] not in sampled:
                continue
            actions = [turn["action"] for turn in t["turns"]]
            observations = [turn["observation"] for turn in t["turns"]]
            fields = tuple(t["system"][f] for f in ("task_description", "action_space", "initial_state",
                                                    "simulation_instruction") if (t["system"][f] or "").strip())
            fields += tuple(d[k] for d in t["system"]["demonstrations"] or [] for k in ("action", "observation"))
            for n in sorted(sampled[t["traj_id"]]):
                key = (tuple(actions[:n]), tuple(observations[: n - 1]))
                # Deliberately wrong: the observation of the turn before (of the next one on turn 1).
                wrong = observations[n - 2] if n > 1 else observations[min(1, len(observations) - 1)] + " x"
                self.truth.setdefault(key, []).append((fields, observations[n - 1], wrong))
        self.requests: Counter = Counter()

    def key(self, messages: list[dict]) -> tuple | None:
        users = [m["content"] for m in messages if m["role"] == "user"]
        assistants = [m["content"] for m in messages if m["role"] == "assistant"]
        roles = [m["role"] for m in messages if m["role"] != "system"]
        if roles != ["user", "assistant"] * len(assistants) + ["user"]:
            return None
        parsed = [action_of(u) for u in users]
        if [n for n, _ in parsed] != list(range(1, len(users) + 1)):
            return None
        if any(INSTRUCTION_TAG in u for u in users[:-1]) or INSTRUCTION_TAG not in users[-1]:
            self.requests["instruction_misplaced"] += 1
        if not all(a.startswith(MARKER + "\n") for a in assistants):
            return None
        return tuple(a for _, a in parsed), tuple(a[len(MARKER) + 1 :] for a in assistants)

    def answer(self, model: str, messages: list[dict]) -> str:
        if model == "judge":
            self.requests["judge"] += 1
            return judge(messages[-1]["content"])
        self.requests[model] += 1
        key = self.key(messages)
        shown = "\n".join(m["content"] for m in messages[:2])  # the system prompt and the first turn prompt
        fits = [(sum(map(len, fields)), obs, wrong) for fields, obs, wrong in self.truth.get(key, [])
                if all(f in shown for f in fields)]
        # A task can be a prefix of another's: the candidate whose fields cover the most of the prompt wins.
        found = {(obs, wrong) for size, obs, wrong in fits if size == max(f[0] for f in fits)}
        if len({obs for obs, _ in found}) != 1:
            self.requests["unmatched"] += 1
            return "no match"
        observation, wrong = min(found)
        return f"Reasoning: the action is applied.\n{INSTRUCTION_TAG}\n{observation if model == 'oracle' else wrong}\n" \
               "</predicted_observation>"


def judge(prompt: str) -> str:
    predicted = prompt.split("**World Model Output (Simulated):**\n```\n", 1)[1]
    predicted, truth = predicted.split("\n```\n\n**Ground Truth (Real Output):**\n```\n", 1)
    truth = truth.rsplit("\n```\n\nPlease evaluate", 1)[0]
    score = 5 if predicted == truth else 1
    body = {"strengths": ["compared"], "weaknesses": [], "scores": {d: score for d in (
        "format", "factuality", "consistency", "realism", "quality")}}
    return f"Compared.\n<final_evaluation>\n```json\n{json.dumps(body)}\n```\n</final_evaluation>"


def serve(oracle: Oracle) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path.rstrip("/") != "/v1/chat/completions":
                self.send_error(404)
                return
            content = oracle.answer(body["model"], body["messages"])
            reply = json.dumps({
                "id": "chatcmpl-loopback", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def evaluate(data_dir: Path, out: Path, base_url: str, model: str) -> tuple[str, list[dict]]:
    """``eval.py infer``, ``judge`` and ``score``, unchanged; the score report and the judged rows."""
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
           "OPENAI_API_KEY": "EMPTY"}
    env.pop("PYTHONPATH", None)  # the evaluator imports only its own package
    script = str(EVALUATOR / "eval" / "eval.py")

    def step(*args: str) -> str:
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    step("infer", "--data-dir", str(data_dir), "--model-base-url", base_url, "--model-name", model,
         "--output-dir", str(out))
    step("judge", "--predictions", str(out / "predictions.jsonl"), "--judge-base-url", base_url, "--judge-model",
         "judge", "--output-dir", str(out), "--max-retries", "1")
    report = step("score", "--predictions", str(out / "judged.jsonl"))
    judged = [json.loads(line) for line in (out / "judged.jsonl").read_text().splitlines()]
    return report, judged


# ------------------------------------------------------------------ fixtures

# A small demo corpus per domain with a large eval pool sampling a quarter of its turns: about 45 rows,
# every domain among them (the layout and the scores do not depend on how many rows there are).
DEMO_N = 12
EVAL_POOL_CFG = """[pools]
ratios = {cpt = 0.35, sft = 0.1, rl = 0.05, eval = 0.5}
eval_subsample = 0.25
"""


@pytest.fixture(scope="module")
def demo_export(tmp_path_factory):
    if not (EVALUATOR / "eval" / "eval.py").is_file():
        pytest.skip(f"the AgentWorldBench evaluator is not at {EVALUATOR} (set LWM_AWB_EVAL)")
    pytest.importorskip("openai")
    from pipeline.demo import write_demo

    base = tmp_path_factory.mktemp("awb-eval")
    for domain in DOMAINS:
        write_demo(domain, str(base / "demo" / domain), seed=0, n=DEMO_N)
    (base / "run.toml").write_text(EVAL_POOL_CFG)
    lwm("run", "--executor", "local", "-i", str(base / "demo"), "-o", str(base / "run"), "--config", str(base / "run.toml"))
    (base / "data").mkdir()
    lwm("export", "agentworldbench", str(base / "run"), str(base / "data" / "demo_test.jsonl"))
    rows = [json.loads(line) for line in (base / "data" / "demo_test.jsonl").read_text().splitlines()]
    return base, rows


@pytest.fixture(scope="module")
def loopback(demo_export):
    base, _ = demo_export
    oracle = Oracle(trajectories(base / "run"), eval_turns(base / "run"))
    server = serve(oracle)
    yield oracle, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


# ------------------------------------------------------------------ the evaluator reads the export


def test_rows_have_the_official_layout(demo_export):
    _, rows = demo_export
    assert {r["task"] for r in rows} == set(DOMAINS)
    for r in rows:
        t = r["turn_idx"]
        assert len(r["prompt"]) == len(r["response"]) == r["total_turns"] >= t >= 1
        assert all(isinstance(p, str) for p in r["prompt"]) and all(isinstance(x, str) for x in r["response"])
        assert [action_of(p)[0] for p in r["prompt"]] == list(range(1, r["total_turns"] + 1))
        # Only the evaluated entry carries the instruction; current_prompt is that entry without it.
        assert [INSTRUCTION_TAG in p for p in r["prompt"]] == [n == t for n in range(1, r["total_turns"] + 1)]
        assert INSTRUCTION_TAG not in r["current_prompt"]
        assert r["prompt"][t - 1].startswith(r["current_prompt"] + "\n\n")
        assert all(x.startswith(MARKER + "\n") for x in r["response"])


def test_official_evaluator_scores_the_oracle_100(demo_export, loopback, tmp_path):
    base, rows = demo_export
    oracle, url = loopback
    oracle.requests.clear()
    report, judged = evaluate(base / "data", tmp_path / "oracle", url, "oracle")
    assert oracle.requests == Counter({"oracle": len(rows), "judge": len(rows)})  # 0 unmatched, 0 misplaced
    assert [j["failed"] for j in judged] == [0.0] * len(rows)  # 0 judge parse failures
    assert "Overall: 100.00" in report
    assert f"Total samples: {len(rows)}, Valid: {len(rows)}, Failed: 0" in report
    per_domain = Counter(r["task"] for r in rows)
    for name, domain in (("MCP", "mcp"), ("Search", "search"), ("Terminal", "terminal"), ("SWE", "swe"),
                         ("Android", "android"), ("Web", "web"), ("OS", "os")):
        n = per_domain[domain]
        assert f"--- {name} ({n}/{n} valid, 0 failed) ---" in report


def test_a_wrong_oracle_scores_lower(demo_export, loopback, tmp_path):
    base, rows = demo_export
    oracle, url = loopback
    oracle.requests.clear()
    report, judged = evaluate(base / "data", tmp_path / "wrong", url, "wrong")
    assert oracle.requests["unmatched"] == 0
    overall = float(re.search(r"Overall: ([\d.]+)", report).group(1))
    assert overall < 50.0, report
    assert sum(j["total_score"] == 5 for j in judged) < len(rows) / 4


# ------------------------------------------------------------------ ingest → export → ingest

ROUND_TRIP_CFG = """[pools]
ratios = {cpt = 0.0, sft = 0.0, rl = 0.0, eval = 1.0}
eval_subsample = 1.0
[dedup]
exact = false
near = false
[templates]
dirs = ["%s"]
mapping = {eval = ["echo"]}
"""


def content(traj: dict) -> str:
    """A trajectory as the identity compares it: domain, the five system fields, every turn's action and
    observation (ids, source and meta say where a trajectory was read from, so they differ)."""
    system = {k: traj["system"][k] for k in ("task_description", "action_space", "initial_state",
                                              "demonstrations", "simulation_instruction")}
    return json.dumps([traj["domain"], system, [(t["action"], t["observation"]) for t in traj["turns"]]])


def test_ingest_export_ingest_is_the_identity_on_the_demo_eval_pools(demo_export):
    base, rows = demo_export
    (base / "tpl").mkdir(exist_ok=True)
    (base / "tpl" / "echo.txt").write_text("{simulation_instruction}\n")
    (base / "rt.toml").write_text(ROUND_TRIP_CFG % (base / "tpl"))
    first = base / "first"
    lwm("run", "--executor", "local", "--format", "agentworldbench", "-i", str(base / "data" / "demo_test.jsonl"),
        "-o", str(first), "--config", str(base / "rt.toml"), "--progress", "off")
    (base / "again").mkdir()
    lwm("export", "agentworldbench", str(first), str(base / "again" / "x_test.jsonl"))
    second = base / "second"
    lwm("run", "--executor", "local", "--format", "agentworldbench", "-i", str(base / "again" / "x_test.jsonl"),
        "-o", str(second), "--config", str(base / "rt.toml"), "--progress", "off")
    a, b = trajectories(first), trajectories(second)
    # re-exported rows are the rows read, but for their id: also those of GUI domains, whose system prompt
    # already holds the initial screen (and android's task) that the echo template would append again
    again = [json.loads(line) for line in (base / "again" / "x_test.jsonl").read_text().splitlines()]

    def turn_of(r: dict) -> str:  # the pools pick the turns of a trajectory by its id, which the export renews
        return json.dumps([r["task"], [action_of(p) for p in r["prompt"]], r["response"], r["turn_idx"]])

    def without_id(r: dict) -> dict:
        return {k: v for k, v in r.items() if k != "id"}

    before = {turn_of(r): without_id(r) for r in rows}
    same_turns = [r for r in again if turn_of(r) in before]
    assert {r["task"] for r in same_turns} >= {"android", "web", "os"} and len(same_turns) >= len(rows) // 3
    for r in same_turns:
        assert without_id(r) == before[turn_of(r)], r["task"]
    exported = {json.dumps([r["system_str"], r["response"], [action_of(p) for p in r["prompt"]]]) for r in rows}
    assert len(a) == len(exported)  # the rows of one trajectory are grouped back into it
    assert sorted(map(content, a)) == sorted(map(content, b))
    # The rows' turns are the eval pool's trajectories, every turn of them.
    pool = {t["traj_id"]: t for t in trajectories(base / "run")}
    turns = sorted(json.dumps([(t["action"], t["observation"]) for t in pool[k]["turns"]]) for k in eval_turns(base / "run"))
    assert sorted(json.dumps([(t["action"], t["observation"]) for t in x["turns"]]) for x in a) == turns
