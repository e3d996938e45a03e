"""WMAT end to end through `lwm run` on the search demo corpus, against a scripted loopback writer.

The writer answers by a scenario per (task, step) (`tests.helpers.BlockWriter`): valid blocks, spoilers
(fixed on the re-ask, or never), malformed tags, a missing q (fixed on the re-ask). The tests
check what the stage kept and why, both pools and their spans, caching and determinism, and that
a run without the stage is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline.outputs import out_fs
from stages.pools import pool_of
from stages.reward import wmat_frameworks
from stages.reward.wmat_format import check_output
from stages.tokenizer import load_tokenizer
from tests.helpers import BlockWriter, JudgeServer, lwm_in_process, scenario_of, valid_block

ROOT = Path(__file__).resolve().parent.parent
N_TRAJ = 16


def _lwm(*args: str, process: bool = False) -> subprocess.CompletedProcess:
    """`lwm ARGS`, in this process unless `process` (the Ray run: its workers get a fresh environment)."""
    if process:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=600)
    else:
        proc = lwm_in_process(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _run(corpus: Path, out: Path, url: str | None, *flags: str, ray: bool = False) -> dict:
    executor = ["--executor", "ray", "--num-cpus", "2"] if ray else ["--executor", "local"]
    args = ["run", "--input", str(corpus), "--out", str(out), *executor, "--progress", "off", *flags]
    if url is not None:
        cfg = out.parent / f"{out.name}.toml"
        cfg.write_text('[llm]\nmodel = "writer"\nstages = ["wmat_blocks"]\nconcurrency = 4\n', encoding="utf-8")
        args += ["--config", str(cfg), "--llm-endpoint", url]
    proc = _lwm(*args, process=ray)
    if "--llm-dry-run" in flags:
        return {"stderr": proc.stderr}
    return {**json.loads((out / "manifest.json").read_text()), "stderr": proc.stderr}


def _rows(out: Path, sub: str) -> list[dict]:
    files = sorted((out / sub).glob("*.parquet"))
    return [r for f in files for r in pq.read_table(f).to_pylist()]


def _digests(out: Path, sub: str) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / sub).rglob("*.parquet"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("wmat")
    corpus = base / "demo"
    _lwm("demo", "--domain", "search", "--out", str(corpus), "-n", str(N_TRAJ))
    writer = BlockWriter()
    with JudgeServer(writer) as server:
        on = _run(corpus, base / "on", server.url)
        first_calls = len(writer.calls)
        # files of a part that no longer exists (another input or task layout) must not survive a run
        stale = base / "on" / "wmat" / "midtrain" / "part-00000000deadbeef.parquet"  # a part id no task has
        stale.write_bytes((base / "on" / on["wmat"]["shards"][0]["path"]).read_bytes())
        again = _run(corpus, base / "on", server.url)  # same output directory: resumes, all cached
        resent = len(writer.calls) - first_calls
        fresh = _run(corpus, base / "fresh", server.url)  # new directory: asked again, same answers
        before_ray = len(writer.calls)
        ray = _run(corpus, base / "ray", server.url, ray=True)
        before_dry = len(writer.calls)
        dry = _run(corpus, base / "dry", server.url, "--llm-dry-run")
        dry_sent = len(writer.calls) - before_dry
    off = _run(corpus, base / "off", None)
    return {"base": base, "writer": writer, "first_calls": first_calls, "resent": resent, "stale": stale,
            "ray_calls": before_dry - before_ray, "dry_sent": dry_sent,
            "manifests": {"on": on, "again": again, "fresh": fresh, "ray": ray, "dry": dry, "off": off}}


def _trajs(out: Path) -> dict[str, dict]:
    return {d["traj_id"]: d for d in _rows(out, "trajectories")}


def test_each_scenario_ends_as_scripted(runs):
    out = runs["base"] / "on"
    trajs = _trajs(out)
    rows = _rows(out, "llm/wmat_blocks")
    outcome = Counter()
    for r in rows:
        d = trajs[r["traj_id"]]
        name = scenario_of(d["system"]["task_description"], r["step"], len(d["turns"]))
        outcome[name] += 1
        expected = {
            "valid": ("kept", "", 1),
            "spoiler_then_valid": ("kept", "", 2),
            "missing_q": ("kept", "", 2),
            "spoiler": ("rejected", "spoiler", 2),
            "malformed": ("rejected", "malformed", 2),
        }[name]
        assert (r["status"], r["reason"], r["attempts"]) == expected, (name, r)
        if r["status"] == "kept":
            success = bool((d["outcome"] or {}).get("success"))
            assert r["block"] == valid_block(d["system"]["task_description"], success)
            assert r["confidence"] == pytest.approx(0.8 if success else 0.2)
    # every scenario occurred, so every branch above was exercised
    assert set(outcome) == {"valid", "spoiler_then_valid", "missing_q", "spoiler", "malformed"}
    counts = runs["manifests"]["on"]["llm"]["stages"]["wmat_blocks"]["counts"]
    assert counts["rejected_answers"] == {
        "spoiler": outcome["spoiler_then_valid"] + 2 * outcome["spoiler"],
        "malformed": 2 * outcome["malformed"],
        "no_confidence": outcome["missing_q"],
    }
    assert counts["rejected"] == outcome["spoiler"] + outcome["malformed"]
    assert counts["kept"] == len(rows) - counts["rejected"]
    # re-asks say why the first answer was refused
    reasks = [c for c in runs["writer"].calls[: runs["first_calls"]] if c[3]]
    assert len(reasks) == outcome["spoiler_then_valid"] + outcome["missing_q"] + outcome["spoiler"] + outcome["malformed"]


def test_blocks_go_to_cpt_and_sft_trajectories_at_two_steps_each(runs):
    out = runs["base"] / "on"
    trajs = _trajs(out)
    by_traj = Counter(r["traj_id"] for r in _rows(out, "llm/wmat_blocks"))
    wanted = {t for t, d in trajs.items() if pool_of(d["split_key"], {"cpt": 0.8, "sft": 0.1, "rl": 0.05, "eval": 0.05})
              in ("cpt", "sft")}
    assert set(by_traj) == wanted and len(wanted) < len(trajs)
    for tid, n in by_traj.items():
        assert n == min(2, len(trajs[tid]["turns"]))


def test_both_pools_are_written_with_separate_world_model_and_policy_spans(runs):
    out = runs["base"] / "on"
    tok = load_tokenizer("default")
    trajs = _trajs(out)
    kept = [r for r in _rows(out, "llm/wmat_blocks") if r["status"] == "kept"]
    fesft, midtrain = _rows(out, "wmat/fesft"), _rows(out, "wmat/midtrain")
    assert len(fesft) == len(kept) > 0
    assert len(midtrain) == len({r["traj_id"] for r in kept}) > 0
    blocks = {(r["traj_id"], r["step"]): r["block"] for r in kept}
    for row in fesft:
        assert row["pool"] == "fesft" and row["turn_category"] == ["world_model", "policy"]
        ids, weights = row["input_ids"], row["loss_weight"]
        (wa, wb), (pa, pb) = ((s["start"], s["end"]) for s in row["turn_spans"])
        assert tok.decode(ids[wa:wb]) == blocks[(row["traj_id"], row["turn_idx"])]
        action = trajs[row["traj_id"]]["turns"][row["turn_idx"] - 1]["action"]
        assert tok.decode(ids[pa:pb]).endswith(f"<action>{action}</action><|im_end|>")
        assert row["num_loss_tokens"] == (wb - wa) + (pb - pa) == sum(w > 0 for w in weights)
        reply = tok.decode(ids).split("<|im_start|>assistant\n")[-1].removesuffix("<|im_end|>\n")
        assert check_output(reply).ok
    for row in midtrain:
        cats = row["turn_category"]
        n_blocks = sum(1 for k in blocks if k[0] == row["traj_id"])
        assert cats.count("world_model") == n_blocks
        assert cats.count("policy") == len(trajs[row["traj_id"]]["turns"])
        text = tok.decode(row["input_ids"])
        assert text.count("<imaginary>") == n_blocks
    manifest = runs["manifests"]["on"]
    assert manifest["wmat"]["pools"]["fesft"]["samples"] == len(fesft)
    assert {f["path"]: f["sha256"] for f in manifest["wmat"]["shards"]} == _digests(out, "wmat")


def test_the_trainer_reads_a_wmat_pool_and_reweights_one_kind_of_span(runs):
    pytest.importorskip("torch")
    from training.dataset import ShardDataset

    source = str(runs["base"] / "on" / "wmat" / "midtrain")
    rows = {r["sample_id"]: r for r in _rows(runs["base"] / "on", "wmat/midtrain")}
    plain = {s["sample_id"]: s for s in ShardDataset(source, shuffle=False, rank=0, world_size=1)}
    zeroed = {s["sample_id"]: s for s in ShardDataset(source, shuffle=False, rank=0, world_size=1,
                                                      category_weights={"world_model": 0.0})}
    assert set(plain) == set(zeroed) == set(rows)
    for sid, row in rows.items():
        w, z = plain[sid]["loss_weight"].numpy(), zeroed[sid]["loss_weight"].numpy()
        assert np.array_equal(w, np.asarray(row["loss_weight"], dtype=np.float32))
        for span, cat in zip(row["turn_spans"], row["turn_category"]):
            a, b = span["start"], span["end"]
            if cat == "world_model":
                assert (w[a:b] > 0).all() and (z[a:b] == 0).all()
            else:
                assert np.array_equal(z[a:b], w[a:b])


def test_check_format_on_the_fesft_replies_reports_full_adherence(runs, tmp_path):
    tok = load_tokenizer("default")
    lines = []
    for row in _rows(runs["base"] / "on", "wmat/fesft"):
        reply = tok.decode(row["input_ids"]).split("<|im_start|>assistant\n")[-1].removesuffix("<|im_end|>\n")
        lines.append(json.dumps({"output": reply}))
    lines.append(json.dumps({"output": "<think>t</think><action>a</action>"}))
    path = tmp_path / "replies.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = json.loads(_lwm("check-format", str(path), "--json").stdout)
    assert report["outputs"] == len(lines) and report["in_format"] == len(lines) - 1
    assert report["reasons"] == {"missing_tag:imaginary": 1}


def test_a_resumed_run_sends_nothing_and_a_fresh_run_is_byte_identical(runs):
    base = runs["base"]
    assert runs["resent"] == 0
    assert not runs["stale"].exists()
    assert runs["manifests"]["again"]["wmat"] == runs["manifests"]["on"]["wmat"]
    assert _digests(base / "on", "wmat") == _digests(base / "fresh", "wmat")
    usage = runs["manifests"]["on"]["llm"]["stages"]["wmat_blocks"]["usage"]
    assert usage["requests"] == runs["first_calls"] and usage["failures"] == 0


def test_without_the_stage_the_run_is_unchanged(runs):
    base = runs["base"]
    off = runs["manifests"]["off"]
    assert "wmat" not in off and "llm" not in off and "llm" not in off["config"]
    assert not (base / "off" / "wmat").exists()
    # the world-model pools do not depend on whether blocks were written
    assert _digests(base / "on", "shards") == _digests(base / "off", "shards")
    fs, root = out_fs(str(base / "off"))
    assert fs.exists(f"{root}/_SUCCESS")


def test_the_ray_executor_writes_the_same_pools(runs):
    base = runs["base"]
    assert runs["ray_calls"] == runs["first_calls"]
    assert _digests(base / "ray", "wmat") == _digests(base / "on", "wmat")
    assert runs["manifests"]["ray"]["wmat"]["shards"] == runs["manifests"]["on"]["wmat"]["shards"]


def test_the_run_summary_names_the_wmat_pools(runs):
    m = runs["manifests"]["on"]
    pools = m["wmat"]["pools"]
    line = (f"wmat: fesft: {pools['fesft']['samples']} samples, midtrain: {pools['midtrain']['samples']} samples, "
            f"rl: {pools['rl']['samples']} samples")
    assert line in m["stderr"]
    assert "wmat:" not in runs["manifests"]["off"]["stderr"]
    c = m["llm"]["stages"]["wmat_blocks"]["counts"]
    assert f"; kept {int(c['kept'])}; dropped: malformed {int(c['dropped']['malformed'])}" in m["stderr"]


def test_a_dry_run_projects_the_block_requests_and_sends_nothing(runs):
    out = runs["base"] / "on"
    steps = len(_rows(out, "llm/wmat_blocks"))
    items = len({r["traj_id"] for r in _rows(out, "llm/wmat_blocks")})
    assert runs["dry_sent"] == 0
    text = runs["manifests"]["dry"]["stderr"]
    assert f"stage wmat_blocks: {items} item(s), projected {steps:,}–{2 * steps:,} calls (model writer)\n" in text
    assert "judge" not in text.split("stage wmat_blocks: ")[1].splitlines()[0]  # the stage asks no judge
    assert "# Ground truth, do not reveal" in text  # the first rendered request is shown
    assert not (runs["base"] / "dry" / "wmat").exists()


def test_rl_prompts_carry_what_the_wmat_reward_needs(runs):
    out = runs["base"] / "on"
    tok = load_tokenizer("default")
    trajs = _trajs(out)
    kept = [r for r in _rows(out, "llm/wmat_blocks") if r["status"] == "kept"]
    with_outcome = [r for r in kept if (trajs[r["traj_id"]]["outcome"] or {}).get("success") is not None]
    rl = {(r["traj_id"], r["turn_idx"]): r for r in _rows(out, "wmat/rl")}
    assert set(rl) == {(r["traj_id"], r["step"]) for r in with_outcome} and 0 < len(with_outcome) < len(kept)
    replies = {(r["traj_id"], r["turn_idx"]): tok.decode(r["input_ids"]).split("<|im_start|>assistant\n")[-1]
               .removesuffix("<|im_end|>\n") for r in _rows(out, "wmat/fesft")}
    for key, row in rl.items():
        d = trajs[key[0]]
        assert row["correct"] == d["outcome"]["success"] and row["omega"] == pytest.approx(0.2)
        assert [m["role"] for m in row["messages"]] == ["system", "user"]
        assert row["messages"][1]["content"] in tok.decode(
            next(r for r in _rows(out, "wmat/fesft") if (r["traj_id"], r["turn_idx"]) == key)["input_ids"])
        # the future starts with the observation of the step and ends with the last one
        assert row["future"].startswith(d["turns"][key[1] - 1]["observation"])
        assert row["future"].endswith(d["turns"][-1]["observation"])
        # the recorded reply, scored: q = 80% on success, 20% else (the script's blocks)
        got = wmat_frameworks.compute_score("lwm/search", replies[key], row["future"], {"correct": row["correct"]})
        assert got["r_calib"] == pytest.approx(0.96 if row["correct"] else -0.04)
        assert 0.0 <= got["r_ground"] <= 1.0 and got["score"] == pytest.approx(got["r_calib"] + got["r_ground"])
        assert wmat_frameworks.trl_reward([row["messages"]], [replies[key]], [row["future"]], [row["correct"]]) == \
            [pytest.approx(got["score"])]


def test_a_task_result_of_an_earlier_version_gets_its_files_hashed_in_the_manifest(tmp_path):
    """Tasks now hash their files as they write them; a run resumed from a task an earlier version finished (its
    result has no sha256) still records each file's digest, read from the file."""
    from types import SimpleNamespace

    from pipeline.wmat_pools import WMAT_POOLS_STAGE

    fs, root = out_fs(str(tmp_path))
    rel = "wmat/midtrain/part-0000aaaa0000bbbb.parquet"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_bytes(b"PAR1 stands in for a shard")
    ctx = SimpleNamespace(fs=fs, root=root, manifest={}, stage_runs={"wmat_pools": {}})
    results = [{"task_id": "0000aaaa0000bbbb", "stats": {},
                "files": [{"path": rel, "rows": 1, "bytes": 26}]}]
    WMAT_POOLS_STAGE.finish(ctx, results)
    (entry,) = ctx.manifest["wmat"]["shards"]
    assert entry["sha256"] == hashlib.sha256((tmp_path / rel).read_bytes()).hexdigest()


def test_lwm_train_takes_a_wmat_span_as_its_category_weight(runs):
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from training.cli import train as train_command

    source = str(runs["base"] / "on" / "wmat" / "fesft")
    # the tiny model embeds the default vocabulary (248k ids): a step of its few weighted tokens takes a second
    tiny = ["--tiny-dim", "16", "--tiny-layers", "1", "--tiny-heads", "2", "--max-steps", "1",
            "--micro-batch-tokens", "8192", "--long-samples", "drop"]
    result = CliRunner().invoke(train_command, ["--shards", source, *tiny, "--category-weight", "world_model=0.5"])
    assert result.exit_code == 0, result.output  # the README's command
    typo = CliRunner().invoke(train_command, ["--shards", source, *tiny, "--category-weight", "world_modle=0.5"])
    assert typo.exit_code == 2 and "no such category" in typo.output


def test_trajectories_sharing_an_id_get_their_own_wmat_sample_ids(runs, tmp_path):
    """The demo corpus given twice (dedup off, so both copies stay): every WMAT row of each pool has its own
    sample id, as the other pools' rows do."""
    src = tmp_path / "twice"
    for name in ("a", "b"):
        shutil.copytree(runs["base"] / "demo", src / name)
    cfg = tmp_path / "no-dedup.toml"
    cfg.write_text('[llm]\nmodel = "writer"\nstages = ["wmat_blocks"]\n[dedup]\nexact = false\nnear = false\n')
    with JudgeServer(BlockWriter()) as server:
        _lwm("run", "--input", str(src), "--out", str(tmp_path / "out"), "--executor", "local", "--progress", "off",
             "--config", str(cfg), "--llm-endpoint", server.url)
    for pool in ("midtrain", "fesft", "rl"):
        ids = [r["sample_id"] for r in _rows(tmp_path / "out", f"wmat/{pool}")]
        assert ids and len(ids) == len(set(ids)), pool
        by_traj = Counter(r["traj_id"] for r in _rows(tmp_path / "out", f"wmat/{pool}"))
        assert max(by_traj.values()) >= 2  # a trajectory id that both copies carry


def test_different_trajectories_sharing_an_id_get_their_own_blocks(runs, tmp_path):
    """Two different trajectories carrying one id (dedup off, so both stay): each one's pool rows hold the
    blocks written for its own steps and task, and each block row names its occurrence."""
    out = runs["base"] / "on"
    trajs = _trajs(out)
    kept_ids = sorted({r["traj_id"] for r in _rows(out, "llm/wmat_blocks") if r["status"] == "kept"})

    def keyword(tid: str) -> str:
        return re.search(r"<keyword>.*?</keyword>", valid_block(trajs[tid]["system"]["task_description"], True))[0]

    pick = [kept_ids[0], next(t for t in kept_ids if keyword(t) != keyword(kept_ids[0]))]
    tasks = [trajs[t]["system"]["task_description"] for t in pick]
    keywords = [keyword(t) for t in pick]
    corpus = tmp_path / "shared.jsonl"
    corpus.write_text("".join(json.dumps({**trajs[t], "traj_id": "shared"}) + "\n" for t in pick))
    cfg = tmp_path / "no-dedup.toml"
    cfg.write_text('[llm]\nmodel = "writer"\nstages = ["wmat_blocks"]\n[dedup]\nexact = false\nnear = false\n')
    with JudgeServer(BlockWriter()) as server:
        _lwm("run", "--input", str(corpus), "--out", str(tmp_path / "out"), "--executor", "local", "--progress",
             "off", "--config", str(cfg), "--llm-endpoint", server.url)
    rows = _rows(tmp_path / "out", "llm/wmat_blocks")
    assert {r["traj_id"] for r in rows} == {"shared"} and {r["occurrence"] for r in rows} == {1, 2}
    tok = load_tokenizer("default")
    midtrain = [tok.decode(r["input_ids"]) for r in _rows(tmp_path / "out", "wmat/midtrain")]
    assert len(midtrain) == 2
    for text in midtrain:
        own = 0 if tasks[0] in text else 1
        assert tasks[1 - own] not in text
        kept = sum(1 for r in rows if r["occurrence"] == own + 1 and r["status"] == "kept")
        assert text.count(keywords[own]) == kept > 0 and keywords[1 - own] not in text
