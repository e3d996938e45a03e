"""All of ../shared/data, sniffed, runs through to shards with default settings; validate agrees per folder."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tests.helpers import lwm_in_process

# What each shared folder normalizes to, counted by hand from the files (see the adapter tests):
# (records, trajectories with turns, readable records without any (action, observation) pair).
EXPECTED = {
    "aitw-aitz": (1, 1, 0),
    "atif": (7, 6, 1),  # streaming .atif.jsonl = 1 document (an orchestrator log without agent actions)
    "magentic-one": (3, 3, 0),
    "mini-swe-agent": (1, 1, 0),
    "openai-messages": (10, 10, 0),
    "openai-messages-typed": (8, 4, 4),  # lines 1, 4, 6 answer without a tool; line 8's calls get no result
    "opencua-raw": (1, 1, 0),
    "openhands": (2, 2, 0),
    "openhands-v1": (2, 2, 0),
    "sharegpt-glaive": (30, 15, 15),  # 15 ordinary chats never call a function
    "swe-agent": (4, 4, 0),
    "uiautomator-xml": (21, 0, 21),  # single screens without an action log
    "webvoyager": (1, 1, 0),
}


def lwm(*args: str, check: bool = True, process: bool = False) -> subprocess.CompletedProcess:
    """`lwm ARGS` in this process, or as its own process with `process` (the Ray run starts its own Ray)."""
    if process:
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, timeout=600)
    else:
        proc = lwm_in_process(*args)
    if check:
        assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_validate_json_on_each_shared_folder(shared_data, folder):
    report = json.loads(lwm("validate", str(shared_data / folder), "--json").stdout)
    assert set(report) == {"format", "records", "trajectories", "with_turns", "turns", "filtered", "quarantined",
                           "reasons", "skipped", "left_out", "unread", "input_bytes"}
    assert report["skipped"] == {} and report["unread"] == {"files": 0, "bytes": 0}
    records, trajectories, without_turns = EXPECTED[folder]
    assert report["quarantined"] == 0, report["reasons"]
    assert (report["records"], report["with_turns"]) == (records, trajectories)
    assert report["trajectories"] == trajectories + without_turns  # every one read, as `lwm run`'s filter line
    assert report["filtered"] == ({"no_turns": without_turns} if without_turns else {})


def test_every_shared_folder_is_listed(shared_data):
    folders = {p.name for p in shared_data.iterdir() if p.is_dir()}
    assert folders == set(EXPECTED)


@pytest.fixture(scope="module")
def shared_run(shared_data, tmp_path_factory):
    """``lwm run`` over all of ../shared/data at once: formats sniffed, default settings on the Ray executor."""
    out = tmp_path_factory.mktemp("shared") / "run"
    proc = lwm("run", "--executor", "ray", "-i", str(shared_data), "-o", str(out), "--progress", "off", process=True)
    return out, proc


def test_shared_data_reaches_shards(shared_run):
    out, proc = shared_run
    assert proc.returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["records"].get("quarantined", 0) == 0
    assert counts["records"]["read"] == sum(r for r, _, _ in EXPECTED.values())
    assert counts["filtered"]["no_turns"] == sum(n for _, _, n in EXPECTED.values())
    rows = sum(pq.read_metadata(out / s["path"]).num_rows for s in manifest["shards"])
    assert rows == sum(s["rows"] for s in manifest["shards"]) and rows > 0
    domains = {r["domain"] for r in manifest["histogram"]["records"]}
    assert {"mcp", "swe", "android", "web", "os", "search", "terminal"} <= domains
    sniffed = next(line for line in proc.stderr.splitlines() if line.startswith("sniffed format:"))
    assert "(unrecognized)" not in sniffed and "droidbot" not in sniffed


def test_run_summary_counts_are_the_numbers_after_each_step(shared_run):
    out, proc = shared_run
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]
    lines = {line.split(":", 1)[0]: line for line in proc.stderr.splitlines()
             if line.split(":", 1)[0] in ("ingest", "filter", "dedup", "samples", "shards")}
    kept = counts["trajectories"]["kept"]
    removed = counts.get("dedup", {}).get("removed", 0)
    assert lines["ingest"].startswith(f"ingest: {counts['records']['read']} records read, 0 quarantined")
    # SWE-agent, ATIF and OpenHands V1 samples repeat a failing command: the retry-cycle filter strips the repeats
    stripped = counts["turns_stripped"]["retry_cycle"]
    assert stripped > 0
    assert lines["filter"].endswith(f"→ {kept} kept; {stripped} turns stripped (retry_cycle {stripped})")
    assert f"no_turns {sum(n for _, _, n in EXPECTED.values())}" in lines["filter"]
    assert lines["dedup"].endswith(f"→ {kept - removed} trajectories")
    # The last line is what reached the shards: distinct trajectories and rows actually in the files.
    tables = [pq.read_table(out / s["path"], columns=["traj_id"]) for s in manifest["shards"]]
    shipped = {t for table in tables for t in table.column("traj_id").to_pylist()}
    samples = sum(table.num_rows for table in tables)
    assert lines["shards"].startswith(f"shards: {len(shipped)} trajectories, {samples} samples in ")
    assert len(shipped) <= kept - removed


def test_hist_png_and_show(shared_run, tmp_path):
    shared_run, _ = shared_run
    png = tmp_path / "hist.png"
    lwm("hist", str(shared_run), "--png", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000
    shown = lwm("show", str(shared_run), "--index", "0", "--plain").stdout
    assert "⟦w=0⟧<|im_start|>system" in shown and "observations:" in shown
    colored = lwm("show", str(shared_run), "--index", "0", "--color").stdout
    assert "\x1b[90m" in colored


def test_validate_single_screens_are_filtered_not_quarantined(shared_data):
    """The uiautomator-xml samples are single screens without actions: readable, so filtered, not quarantined."""
    report = json.loads(lwm("validate", str(shared_data / "uiautomator-xml"), "--json").stdout)
    assert {k: v for k, v in report.items() if k != "input_bytes"} == {
        "format": "uiautomator", "quarantined": 0, "reasons": {}, "records": 21, "trajectories": 21, "with_turns": 0,
        "turns": 0, "filtered": {"no_turns": 21}, "skipped": {}, "left_out": 0, "unread": {"files": 0, "bytes": 0}}


def test_the_agents_recorded_reasoning_stays_out_of_world_model_targets(shared_data, tmp_path):
    """mini-swe-agent, swe-agent and openai-messages logs record the agent's thought before each action
    (``Turn.reasoning``). That is the agent's plan, not a prediction of the environment: every sft and eval
    target is the tagged observation alone, while the trajectories layer keeps the reasoning (WMAT's policy
    segments use it)."""
    from stages.tokenizer import load_tokenizer

    config = tmp_path / "sft.toml"
    config.write_text('[pools]\nsft_turns = "all"\neval_subsample = 1.0\n'
                      'ratios = {cpt = 0.0, sft = 0.5, rl = 0.0, eval = 0.5}\n')
    out = tmp_path / "out"
    args = ["run", "--executor", "local", "--progress", "off", "--config", str(config), "-o", str(out)]
    for folder in ("mini-swe-agent", "swe-agent", "openai-messages"):
        args += ["-i", str(shared_data / folder)]
    lwm(*args)
    reasoning = {}
    for p in (out / "trajectories").glob("*.parquet"):
        for traj in pq.read_table(p, columns=["traj_id", "turns"]).to_pylist():
            for t, turn in enumerate(traj["turns"], 1):
                if (turn["reasoning"] or "").strip():
                    reasoning[(traj["traj_id"], t)] = turn
    tok = load_tokenizer()
    checked = 0
    for pool in ("sft", "eval"):
        for p in (out / "shards" / pool).glob("*.parquet"):
            for row in pq.read_table(p, columns=["traj_id", "turn_idx", "input_ids", "turn_spans"]).to_pylist():
                turn = reasoning.get((row["traj_id"], row["turn_idx"]))
                if turn is None:
                    continue
                span = row["turn_spans"][-1]
                target = tok.decode(row["input_ids"][span["start"]:span["end"]])
                assert target.startswith("<predicted_observation>\n"), (pool, target[:200])
                assert turn["reasoning"].strip()[:40] not in tok.decode(row["input_ids"])
                checked += 1
    assert checked >= 20, checked
