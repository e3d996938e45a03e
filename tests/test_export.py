"""``lwm export agentworldbench``: official-layout rows that match the shards and round-trip through ingest.

What round-trips (official AgentWorldBench rows → ``lwm run --format agentworldbench`` with every trajectory
in eval and a template that is just ``{simulation_instruction}`` → export): the rows themselves (same count,
task, prompt lists, response lists, current prompts, turn_idx, total_turns), when the input rows follow
lwmkit's conventions (its prediction instruction on the evaluated entry, marker-prefixed responses) and
cover every eval turn (trajectories of at most five turns; eval_subsample 1.0). What does not: ``id`` (a
new sample id), and ``system_str`` whenever the first turn carries a Current State or Task Instruction that
the system prompt does not already hold — ingest turns those into ``initial_state`` / ``task_description``,
and the template appends a non-empty field it does not mention, so the exported system prompt gains an
``## Initial state`` (``## Task``) section (ingest drops that section again). Rows lwmkit exported itself
hold them already and come back unchanged but for ``id`` (tests/test_agentworldbench_eval.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import unicodedata
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.cli.export import EXPORT_FIELDS
from stages.render import PREDICT_INSTRUCTION
from stages.tokenizer import load_tokenizer
from tests.helpers import lwm_in_process

with open(Path(__file__).resolve().parents[1] / "stages" / "templates" / "domains" / "terminal.toml", "rb") as _f:
    TERMINAL_ACTION_SPACE = tomllib.load(_f)["action_space"].strip()
EVAL_ONLY = '[pools]\nratios = {cpt = 0.0, sft = 0.0, rl = 0.0, eval = 1.0}\neval_subsample = 1.0\n'


def lwm(*args: str, check: bool = True, process: bool = False) -> subprocess.CompletedProcess:
    """`lwm ARGS` in this process, or as its own process with `process`."""
    if process:
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, timeout=300)
    else:
        proc = lwm_in_process(*args)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def shard_rows(run: Path) -> list[dict]:
    rows = []
    for path in sorted((run / "shards" / "eval").glob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def chatml(role: str, content: str) -> str:
    return f"<|im_start|>{role}\n{content}<|im_end|>\n"


# ------------------------------------------------------------------ a hand-written AgentWorldBench file

def turn_prompt(n: int, action: str, state: str | None = None) -> str:
    """The turn prompt layout of SPEC §7, written out independently of the renderer."""
    head = f"### Turn {n}\n" + (f"**Current State:**\n{state}\n\n" if state is not None else "")
    return head + f"**Action:**\n```json\n{action}\n```"


TRAJECTORIES = {
    # name: (task, system_str, first-turn state, [(action, observation)])
    "notes": ("mcp", "You simulate an MCP server that stores notes. Reply with the tool result as JSON.", None, [
        ('{"name": "list_notes", "arguments": {}}', '{"notes": ["groceries", "trip plan"]}'),
        ('{"name": "read_note", "arguments": {"title": "groceries"}}', '{"title": "groceries", "body": "eggs, flour"}'),
        ('{"name": "delete_note", "arguments": {"title": "trip plan"}}', '{"deleted": true}'),
    ]),
    "lighthouse": ("search", "You simulate a web search engine. Return ranked result lists.", None, [
        ('{"tool": "search", "query": "tallest lighthouse europe"}', "1. Ile Vierge lighthouse - 82.5 m, Brittany"),
        ('{"tool": "open", "id": 1}', "Ile Vierge: built 1902, granite, the tallest stone lighthouse"),
        ('{"tool": "search", "query": "Ile Vierge visiting hours"}', "1. Visits April to September by boat"),
        ('{"tool": "open", "id": 1}', "Boats leave Lilia harbour at 10:00 and 14:00."),
    ]),
    "srv": ("terminal", "You simulate a Linux shell. Print exactly what the terminal shows.", "root@box:/srv# ", [
        ('[{"keystrokes": "pwd\\n", "duration": 0.1}]', "/srv\nroot@box:/srv# "),
        ('[{"keystrokes": "ls -1\\n", "duration": 0.1}]', "backup.tar\nlogs\nroot@box:/srv# "),
    ]),
}


def awb_rows() -> list[dict]:
    """One official row per turn of every trajectory (all of them are eval turns at five turns or fewer)."""
    rows = []
    for name, (task, system_str, state, turns) in TRAJECTORIES.items():
        bare = [turn_prompt(n, a, state if n == 1 else None) for n, (a, _) in enumerate(turns, 1)]
        for t in range(1, len(turns) + 1):
            rows.append({
                "task": task, "id": f"{name}-{t}",
                "prompt": [p + PREDICT_INSTRUCTION if n == t else p for n, p in enumerate(bare, 1)],
                "response": ["**Environment Observation:**\n" + o for _, o in turns],
                "current_prompt": bare[t - 1], "system_str": system_str, "turn_idx": t, "total_turns": len(turns),
            })
    return rows


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory):
    base = tmp_path_factory.mktemp("awb")
    rows = awb_rows()
    (base / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (base / "tpl").mkdir()
    (base / "tpl" / "echo.txt").write_text("{simulation_instruction}\n")
    (base / "cfg.toml").write_text(EVAL_ONLY + f'[templates]\ndirs = ["{base / "tpl"}"]\nmapping = {{eval = ["echo"]}}\n')
    lwm("run", "--executor", "local", "-i", str(base / "in.jsonl"), "-o", str(base / "run"),
        "--format", "agentworldbench", "--config", str(base / "cfg.toml"))
    proc = lwm("export", "agentworldbench", str(base / "run"), str(base / "out.jsonl"))
    return base, rows, read_jsonl(base / "out.jsonl"), proc


def test_a_name_the_evaluator_would_not_load_is_written_with_a_warning(round_trip):
    base, _, exported, proc = round_trip
    # out.jsonl: fine to read back (--format agentworldbench), but eval.py loads only *_test.jsonl
    assert proc.stderr.splitlines()[-1] == (f"warning: {base / 'out.jsonl'}: AgentWorldBench's eval.py reads only the "
                                           "*_test.jsonl files of its --data-dir; name the file NAME_test.jsonl for it")
    assert proc.returncode == 0 and exported
    kept = lwm("export", "agentworldbench", str(base / "run"), str(base / "lwm_test.jsonl"))
    assert "warning" not in kept.stderr
    assert read_jsonl(base / "lwm_test.jsonl") == exported


def test_round_trip_reproduces_every_row(round_trip):
    _, rows, exported, _ = round_trip
    assert len(exported) == len(rows) == 9
    by_turn = {(r["task"], r["prompt"][r["turn_idx"] - 1]): r for r in exported}
    assert len(by_turn) == 9
    states = {task: (system_str, state) for task, system_str, state, _ in TRAJECTORIES.values()}
    exact = 0
    for row in rows:
        out = by_turn[(row["task"], row["prompt"][row["turn_idx"] - 1])]
        for field in ("prompt", "response", "current_prompt", "turn_idx", "total_turns"):
            assert out[field] == row[field], (row["id"], field)
        system_str, state = states[row["task"]]
        # The first turn's state became initial_state; the echo template appends it (module docstring). The
        # terminal domain's fixed action space (its actions are keystroke JSON; SPEC §4) fills a template's
        # {action_space} only: the trajectory declares none, so a template without the slot does not append it.
        expected = system_str
        assert TERMINAL_ACTION_SPACE not in out["system_str"]
        if state is not None:
            expected += f"\n\n## Initial state\n{state}"
        assert out["system_str"] == expected
        exact += out["system_str"] == row["system_str"]
    assert exact == 7  # the mcp and search rows; the two terminal rows gained the initial state


def test_export_fields_ids_and_order(round_trip):
    base, _, exported, proc = round_trip
    assert all(tuple(r) == EXPORT_FIELDS for r in exported)
    ids = [r["id"] for r in exported]
    assert ids == sorted(ids)
    assert ids == sorted(s["sample_id"] for s in shard_rows(base / "run"))
    assert sorted((r["task"], r["turn_idx"]) for r in exported) == sorted(
        [("mcp", t) for t in (1, 2, 3)] + [("search", t) for t in (1, 2, 3, 4)] + [("terminal", 1), ("terminal", 2)]
    )
    assert "wrote 9 AgentWorldBench rows" in proc.stderr


def test_export_is_byte_identical_when_repeated(round_trip):
    base, _, _, _ = round_trip
    lwm("export", "agentworldbench", str(base / "run"), str(base / "again.jsonl"), process=True)  # another process
    assert (base / "again.jsonl").read_bytes() == (base / "out.jsonl").read_bytes()


def test_unfinished_run_is_one_clear_error(round_trip, tmp_path):
    base, _, _, _ = round_trip
    run = tmp_path / "run"
    run.mkdir()
    for name in ("manifest.json", "shards", "trajectories"):
        src = base / "run" / name
        (run / name).symlink_to(src, target_is_directory=src.is_dir())
    proc = lwm("export", "agentworldbench", str(run), str(tmp_path / "x.jsonl"), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"lwm: error: {run}: not a finished run (no _SUCCESS); "
                                                "run `lwm run` to completion first"]
    assert not (tmp_path / "x.jsonl").exists()


def test_a_directory_as_the_target_is_one_line_and_nothing_is_written_into_it(round_trip, tmp_path):
    base, _, _, _ = round_trip
    target = tmp_path / "data"
    target.mkdir()
    proc = lwm("export", "agentworldbench", str(base / "run"), str(target), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"lwm: error: {target} is a directory; give the file to write, e.g. {target / 'lwm_test.jsonl'} "
        "(the evaluator reads every *_test.jsonl of its --data-dir)"]
    assert list(target.iterdir()) == []


# ------------------------------------------------------------------ the rows match what the shards were rendered from

@pytest.fixture(scope="module")
def mixed_templates(tmp_path_factory, fixtures_dir):
    base = tmp_path_factory.mktemp("tpl")
    (base / "cfg.toml").write_text(EVAL_ONLY + '[templates]\nmapping = {eval = ["v0", "v4", "v11"]}\n')
    lwm("run", "--executor", "local", "-i", str(fixtures_dir / "agentworldbench" / "eval.jsonl"), "-o",
        str(base / "run"), "--config", str(base / "cfg.toml"))
    lwm("export", "agentworldbench", str(base / "run"), str(base / "out.jsonl"))
    return base, read_jsonl(base / "out.jsonl"), shard_rows(base / "run")


def test_evaluator_messages_equal_the_tokenized_samples(mixed_templates):
    _, exported, shards = mixed_templates
    tok = load_tokenizer()
    by_id = {s["sample_id"]: s for s in shards}
    assert len(exported) == len(shards) == 9
    assert len({s["template"] for s in shards}) > 1  # the export must follow each row's own template
    for row in exported:
        # The official evaluator's message list (eval.py infer): system, then prompt[i] / response[i] for
        # i < turn_idx - 1, then prompt[turn_idx - 1].
        t = row["turn_idx"] - 1
        messages = [{"role": "system", "content": row["system_str"]}]
        for p, r in zip(row["prompt"][:t], row["response"][:t]):
            messages += [{"role": "user", "content": p}, {"role": "assistant", "content": r}]
        messages.append({"role": "user", "content": row["prompt"][t]})
        prompt_text = "".join(chatml(m["role"], m["content"]) for m in messages)
        # The default vocabulary normalizes to NFC before encoding.
        decoded = tok.decode(by_id[row["id"]]["input_ids"])
        assert decoded.startswith(unicodedata.normalize("NFC", prompt_text)), row["id"]
        # The judge's reference: response[turn_idx - 1] without the evaluator's response marker.
        reference = row["response"][t].removeprefix("**Environment Observation:**\n")
        reply = "<predicted_observation>\n" + reference + "\n</predicted_observation>"
        assert decoded[len(prompt_text):] == chatml("assistant", reply)



# ------------------------------------------------------------------ truncated samples still export whole histories

def test_history_truncated_in_the_shard_is_whole_in_the_export(round_trip, tmp_path):
    base, _, exported, _ = round_trip
    longest = max(shard_rows(base / "run"), key=lambda s: s["num_tokens"])
    assert longest["turn_idx"] > 1
    cfg = (base / "cfg.toml").read_text().replace("eval_subsample = 1.0\n", "eval_subsample = 1.0\n"
                                                  f"context_limit = {longest['num_tokens'] - 1}\n")
    (tmp_path / "cfg.toml").write_text(cfg)
    lwm("run", "--executor", "local", "-i", str(base / "in.jsonl"), "-o", str(tmp_path / "run"),
        "--format", "agentworldbench", "--config", str(tmp_path / "cfg.toml"))
    proc = lwm("export", "agentworldbench", str(tmp_path / "run"), str(tmp_path / "out.jsonl"))
    assert "(1 with history the shard sample truncated)" in proc.stderr
    truncated = [s for s in shard_rows(tmp_path / "run") if len(s["turn_spans"]) < s["turn_idx"]]
    assert [s["sample_id"] for s in truncated] == [longest["sample_id"]]
    again = read_jsonl(tmp_path / "out.jsonl")
    assert again == exported


# ------------------------------------------------------------------ ingest → export → ingest on hand-made rows

def trajectory_content(run: Path) -> list[str]:
    """Domain, the five system fields and every turn of each trajectory (ids and provenance differ by design)."""
    out = []
    for path in sorted((run / "trajectories").glob("*.parquet")):
        for t in pq.read_table(path).to_pylist():
            system = {k: t["system"][k] for k in ("task_description", "action_space", "initial_state",
                                                  "demonstrations", "simulation_instruction")}
            out.append(json.dumps([t["domain"], system, [(x["action"], x["observation"]) for x in t["turns"]]]))
    return sorted(out)


def test_ingest_export_ingest_is_the_identity_on_hand_made_rows(round_trip, tmp_path):
    base, _, _, _ = round_trip
    lwm("run", "--executor", "local", "-i", str(base / "out.jsonl"), "-o", str(tmp_path / "again"),
        "--format", "agentworldbench", "--config", str(base / "cfg.toml"))
    first, second = trajectory_content(base / "run"), trajectory_content(tmp_path / "again")
    assert len(first) == 3
    assert first == second
    # The terminal trajectory's state is a field again, not a second copy inside the instruction.
    terminal = next(json.loads(c) for c in second if json.loads(c)[0] == "terminal")
    assert terminal[1]["initial_state"] == "root@box:/srv# "
    assert terminal[1]["simulation_instruction"] == TRAJECTORIES["srv"][1]


def test_templates_named_relative_to_the_run_and_edited_later(tmp_path, monkeypatch):
    """A template folder given by a relative path is recorded by its whole path, so the export works from any
    folder; a template edited in place renders the samples again on the next run, and an export after such an
    edit is refused instead of writing system prompts the samples were not trained with."""
    rows = awb_rows()
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "tpl").mkdir()
    template = tmp_path / "tpl" / "mine.txt"
    template.write_text("First text. {simulation_instruction}\n")
    (tmp_path / "cfg.toml").write_text(EVAL_ONLY + '[templates]\ndirs = ["tpl"]\nmapping = {eval = ["mine"]}\n')
    monkeypatch.chdir(tmp_path)
    args = ["run", "--executor", "local", "-i", "in.jsonl", "-o", "run", "--format", "agentworldbench",
            "--config", "cfg.toml"]
    lwm(*args)
    tok = load_tokenizer()

    def system_texts() -> set[str]:
        return {tok.decode(r["input_ids"]).split("<|im_end|>")[0] for r in shard_rows(tmp_path / "run")}

    assert all(t.startswith("<|im_start|>system\nFirst text.") for t in system_texts())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    lwm("export", "agentworldbench", str(tmp_path / "run"), "out.jsonl")
    assert all(r["system_str"].startswith("First text.") for r in read_jsonl(elsewhere / "out.jsonl"))

    template.write_text("Second text. {simulation_instruction}\n")
    proc = lwm("export", "agentworldbench", str(tmp_path / "run"), "again.jsonl", check=False)
    assert proc.returncode == 2 and "changed since" in proc.stderr and not (elsewhere / "again.jsonl").exists()
    monkeypatch.chdir(tmp_path)
    lwm(*args)  # the edited template is read again: the samples are rendered with it
    assert all(t.startswith("<|im_start|>system\nSecond text.") for t in system_texts())
    lwm("export", "agentworldbench", "run", "out.jsonl")
    assert all(r["system_str"].startswith("Second text.") for r in read_jsonl(tmp_path / "out.jsonl"))


def test_trajectories_sharing_an_id_each_give_their_own_rows_and_references(tmp_path):
    """Two rollouts of one task under one ``traj_id`` (both reach the shards): each eval row, and each reference
    `lwm reward --pool eval` scores against, comes from the sample's own trajectory, not the last one read."""
    from pipeline.cli.reward import eval_inputs

    def act(command):
        return json.dumps([{"keystrokes": command + "\n", "duration": 0.1}])

    src = tmp_path / "dup.jsonl"
    with src.open("w") as f:
        for k, words in enumerate([("alpha", "bravo", "charlie"), ("delta", "echo", "foxtrot", "golf")]):
            turns = [{"action": act(f"cat {w}.txt"), "observation": f"{w} of rollout {k}\nroot@box:/app# "} for w in words]
            f.write(json.dumps({"traj_id": "dup", "domain": "terminal", "split_key": "task-dup", "turns": turns,
                                "system": {"task_description": "read the files", "initial_state": "root@box:/app# "}})
                    + "\n")
    cfg = tmp_path / "eval.toml"
    cfg.write_text(EVAL_ONLY)
    run = tmp_path / "run"
    lwm("run", "--executor", "local", "-i", str(src), "-o", str(run), "--config", str(cfg))
    samples = {r["sample_id"]: r for r in shard_rows(run)}
    assert len(samples) == 7
    out = tmp_path / "awb" / "lwm_test.jsonl"
    lwm("export", "agentworldbench", str(run), str(out))
    rows = read_jsonl(out)
    assert len(rows) == 7
    tok = load_tokenizer()
    for row in rows:
        sample = samples[row["id"]]
        ids, weights = sample["input_ids"], sample["loss_weight"]
        target = tok.decode([i for i, w in zip(ids, weights) if w > 0])
        observation = row["response"][row["turn_idx"] - 1]
        assert observation.split("\n", 1)[1].split("\n")[0] in target  # "<word> of rollout <k>"
        assert row["total_turns"] == sample["total_turns"] == len(row["response"])
    assert {len(r["response"]) for r in rows} == {3, 4}
    for sid, inputs in eval_inputs(str(run)).items():
        sample = samples[sid]
        target = tok.decode([i for i, w in zip(sample["input_ids"], sample["loss_weight"]) if w > 0])
        assert inputs.reference.split("\n")[0] in target
