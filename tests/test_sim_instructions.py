"""Simulation instructions derived with a model (loopback OpenAI-compatible server answering from a
script): derived, none, kept from the source, re-asked after a spoiler, rejected; the no-spoiler
check; the instruction in the rendered system prompt of the samples and of the reasoning prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.report import print_run_summary
from pipeline.run import run_pipeline
from stages.llm.instructions import parse_instruction, shared_ngram
from tests.helpers import GOOD_INSTRUCTION, SPOILER_OBS, JudgeServer, Script, llm_config, scenario, write_llm_corpus

SOURCE_INSTRUCTION = "Simulate a search API that is rate limited after two calls."
SCENARIOS = ["ierr", "ispoil", "ispoilall", "inone", "imalformed", "isrc"]


def _rows(out: Path, sub: str) -> list[dict]:
    return [r for p in sorted((out / sub).glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def test_the_spoiler_check_finds_long_shared_word_runs_only():
    obs = ["Collecting numpy\nERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"]
    seven = "pip fails: could not install packages due to an error"  # 7 words shared ('could … an')
    eight = "pip says could not install packages due to an OSError"  # 8 words shared
    assert shared_ngram(seven, obs, 8) is None
    assert shared_ngram(eight, obs, 8) == "could not install packages due to an oserror"
    assert shared_ngram("the disk is full", obs, 8) is None
    assert shared_ngram(eight, obs, 0) is None  # 0 turns the check off


def test_instruction_answers_are_parsed_strictly():
    assert parse_instruction("<simulation_instruction>\n  The disk is  full.\n</simulation_instruction>", 600) == (
        "The disk is full.", "")
    assert parse_instruction("<think>maybe <simulation_instruction>x</simulation_instruction></think>"
                             "<simulation_instruction>NONE</simulation_instruction>", 600) == (None, "")
    assert parse_instruction("The disk is full.", 600) == (None, "malformed")
    assert parse_instruction("<simulation_instruction>a</simulation_instruction><simulation_instruction>b"
                             "</simulation_instruction>", 600) == (None, "malformed")
    assert parse_instruction("<simulation_instruction>  </simulation_instruction>", 600) == (None, "malformed")
    assert parse_instruction(f"<simulation_instruction>{'x' * 700}</simulation_instruction>", 600) == (None, "too_long")


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("instr")
    corpus = write_llm_corpus(root / "in.jsonl", SCENARIOS, instruction_for=("isrc",))
    out = root / "out"
    script = Script()
    with JudgeServer(script) as server:
        manifest = run_pipeline(llm_config([corpus], out, server.url, "rl", stages=["instructions"]), echo=lambda m: None)
        requests = list(server.requests)
    return out, manifest, script, requests


def test_instructions_are_derived_reasked_rejected_or_kept(rl_run):
    out, manifest, _, requests = rl_run
    rows = {r["traj_id"].removeprefix("t-"): r for r in _rows(out, "llm/instructions")}
    got = {k: (r["status"], r["reason"], r["instruction"]) for k, r in rows.items()}
    assert got == {
        "ierr": ("derived", "", GOOD_INSTRUCTION),
        "ispoil": ("derived", "", GOOD_INSTRUCTION),  # its first answer copied the observation: re-asked
        "ispoilall": ("rejected", "spoiler", None),
        "inone": ("none", "", None),
        "imalformed": ("rejected", "malformed", None),
        "isrc": ("source", "", None),  # the source's own instruction stays; no request
    }
    asked = sorted(scenario(b["messages"][-1]["content"]) for b in requests)
    assert asked == sorted(["ierr", "ispoil", "ispoil", "ispoilall", "ispoilall", "inone", "imalformed", "imalformed"])
    reasks = [b for b in requests if "previous answer copied text" in b["messages"][-1]["content"]]
    assert sorted(scenario(b["messages"][-1]["content"]) for b in reasks) == ["ispoil", "ispoilall"]
    counts = manifest["llm"]["stages"]["instructions"]["counts"]
    assert counts["status"] == {"derived": 2, "none": 1, "rejected": 2, "source": 1}
    assert counts["rejected_answers"] == {"spoiler": 3, "malformed": 2}


def test_trajectories_without_an_instruction_are_counted_as_going_on_not_as_dropped(rl_run):
    out, manifest, _, _ = rl_run
    counts = manifest["llm"]["stages"]["instructions"]["counts"]
    assert counts["without_instruction"] == {"spoiler": 1, "malformed": 1}
    assert "dropped" not in counts
    # they did go on: each rejected trajectory has its rl sample, without an instruction
    samples = {r["traj_id"].removeprefix("t-") for r in _rows(out, "shards/rl")}
    assert {"ispoilall", "imalformed"} <= samples
    assert manifest["counts"]["samples"]["rl"] == len(SCENARIOS)


def test_the_run_summary_says_which_trajectories_went_on_without_an_instruction(rl_run, capsys):
    _, manifest, _, _ = rl_run
    print_run_summary(manifest, "out")
    line = next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("llm instructions: "))
    assert line.endswith("; without instruction: malformed 1, spoiler 1") and "dropped" not in line


def test_no_kept_instruction_shares_a_long_ngram_with_an_observation(rl_run):
    out, _, _, _ = rl_run
    trajs = {r["traj_id"]: r for r in pq.read_table(next((out / "trajectories").glob("*.parquet"))).to_pylist()}
    kept = [r for r in _rows(out, "llm/instructions") if r["instruction"]]
    assert kept
    for row in kept:
        observations = [t["observation"] for t in trajs[row["traj_id"]]["turns"]]
        assert shared_ngram(row["instruction"], observations, 8) is None
    # the rejected spoiler really did copy the observation (the check is what kept it out)
    assert shared_ngram(f"Say {SPOILER_OBS}", [SPOILER_OBS], 8) is not None


def test_the_instruction_reaches_the_rendered_system_prompt(rl_run):
    out, _, _, _ = rl_run
    systems = {r["traj_id"].removeprefix("t-"): r["messages"][0]["content"] for r in _rows(out, "shards/rl")}
    assert set(systems) == set(SCENARIOS)
    for scn in ("ierr", "ispoil"):
        assert GOOD_INSTRUCTION in systems[scn]
    assert SOURCE_INSTRUCTION in systems["isrc"]
    for scn in ("ispoilall", "inone", "imalformed"):
        assert GOOD_INSTRUCTION not in systems[scn] and SPOILER_OBS not in systems[scn]


def test_the_reasoning_stage_sees_the_derived_instruction(tmp_path):
    corpus = write_llm_corpus(tmp_path / "in.jsonl", ["good", "ierr"])
    with JudgeServer(Script()) as server:
        manifest = run_pipeline(llm_config([corpus], tmp_path / "out", server.url, "sft",
                                           stages=["instructions", "sft_reasoning"]), echo=lambda m: None)
        generation = [b for b in server.requests if "seed" in b]
    assert len(generation) == 2 * 3
    assert all(GOOD_INSTRUCTION in b["messages"][0]["content"] for b in generation)
    assert manifest["llm"]["stages"]["instructions"]["counts"]["status"] == {"derived": 2}
    assert manifest["llm"]["stages"]["sft_reasoning"]["counts"]["kept"] == 2
    assert manifest["counts"]["samples"]["sft"] == 2


def test_trajectories_sharing_an_id_keep_the_answers_to_their_own_requests(tmp_path):
    """Three different trajectories carrying one id (dedup off, so all stay): each is asked for its own
    instruction, its row names its occurrence, and its rendered prompt holds its own answer, not another's."""
    corpus = write_llm_corpus(tmp_path / "in.jsonl", ["ierr", "inone", "ispoilall"])
    lines = [{**json.loads(line), "traj_id": "t-shared"} for line in corpus.read_text().splitlines()]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in lines))
    cfg = llm_config([corpus], tmp_path / "out", "", "rl", stages=["instructions"])
    with JudgeServer(Script()) as server:
        cfg["llm"]["endpoint"] = server.url
        cfg["dedup"].update(exact=False, near=False)
        run_pipeline(cfg, echo=lambda m: None)
    rows = _rows(tmp_path / "out", "llm/instructions")
    assert sorted((r["occurrence"], r["status"], r["instruction"]) for r in rows) == [
        (1, "derived", GOOD_INSTRUCTION), (2, "none", None), (3, "rejected", None)]
    systems = {scenario(json.dumps(r["messages"][1:])): r["messages"][0]["content"]
               for r in _rows(tmp_path / "out", "shards/rl")}
    assert sorted(systems) == ["ierr", "inone", "ispoilall"]
    assert GOOD_INSTRUCTION in systems["ierr"]
    assert GOOD_INSTRUCTION not in systems["inone"] and GOOD_INSTRUCTION not in systems["ispoilall"]
