"""Decontamination measured on real-shaped corpora: distinct tasks keep their training trajectories,
lightly edited copies of evaluation records are all removed (precision and recall in one run).

The corpus (tests/helpers.py): the demo corpora of every domain (240 trajectories each), and
the ../shared/data sources replicated with distinct tasks (60 trajectories each: one framework's
prompts, harness commands and listings shared across different tasks). Planted in it:

- a lightly edited copy (task rephrased, a few words changed in every other observation) of up to five
  eval-pool trajectories of every corpus, in a training pool;
- a lightly edited copy of each of 28 demo trajectories that are not in the run but in an AgentWorldBench
  file (official rows, one per trajectory) given through ``dedup.decontaminate``.

With the default settings at most 5% of each corpus's training trajectories are removed as contaminated,
and every planted copy is removed, naming the record it copies.
"""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest

from pipeline.demo import generate
from schemas.trajectory import DOMAINS
from stages.pools import pool_of
from tests.helpers import lightly_edited, lwm_in_process, replicate, shared_trajectories, write_jsonl

RATIOS = {"cpt": 0.80, "sft": 0.10, "rl": 0.05, "eval": 0.05}  # the defaults
SOURCES = ("magentic-one", "mini-swe-agent", "swe-agent", "openhands", "webvoyager", "openai-messages", "atif",
           "opencua-raw")
PER_SOURCE = 60
DECONTAM = ("decontaminated_near", "decontaminated_ngram")


def pool(split_key: str) -> str:
    return pool_of(split_key, RATIOS, 0)


def training_key(prefix: str) -> str:
    return next(k for k in (f"{prefix}-{i}" for i in range(1000)) if pool(k) != "eval")


def official_row(traj: dict, row_id: str) -> dict:
    """One AgentWorldBench row evaluating the last turn, in the official layout (written out here)."""
    prompts = [f"### Turn {n}\n**Action:**\n```json\n{t['action']}\n```" for n, t in enumerate(traj["turns"], 1)]
    last = len(prompts)
    return {"task": traj["domain"], "id": row_id,
            "prompt": prompts[:-1] + [prompts[-1] + "\n\nPredict the observation in <predicted_observation> tags."],
            "response": [f"**Environment Observation:**\n{t['observation']}" for t in traj["turns"]],
            "current_prompt": prompts[-1], "system_str": "You are the environment.", "turn_idx": last,
            "total_turns": last}


@pytest.fixture(scope="module")
def measured(shared_data, tmp_path_factory):
    base = tmp_path_factory.mktemp("decontam-corpora")
    corpus: dict[str, str] = {}  # traj_id → corpus name
    trajs: list[dict] = []
    for domain in DOMAINS:
        for t in generate(domain):
            trajs.append(t)
            corpus[t["traj_id"]] = f"demo-{domain}"
    for source in SOURCES:
        originals = shared_trajectories(shared_data / source)
        assert originals, source
        copies = -(-PER_SOURCE // len(originals))
        for i, t in enumerate(originals):
            for r in replicate(t, copies, 0, f"{source}-{i}"):
                if sum(c == source for c in corpus.values()) < PER_SOURCE:
                    trajs.append(r)
                    corpus[r["traj_id"]] = source
    # Evaluation records outside the run: four training-pool demo trajectories of every domain, moved to a
    # benchmark file (their actions are one-line JSON, as the turn prompt layout needs).
    bench = []
    for domain in DOMAINS:
        bench += sorted((t for t in trajs if corpus[t["traj_id"]] == f"demo-{domain}" and pool(t["split_key"]) != "eval"),
                        key=lambda t: t["traj_id"])[:4]
    bench_ids = {t["traj_id"] for t in bench}
    trajs = [t for t in trajs if t["traj_id"] not in bench_ids]
    (base / "bench.jsonl").write_text("".join(json.dumps(official_row(t, f"b{i}")) + "\n" for i, t in enumerate(bench)))
    planted: dict[str, str] = {}  # planted id → the record it copies (as removed.parquet names it)
    for i, t in enumerate(bench):
        tid = f"planted-ref-{i:02d}"
        trajs.append(lightly_edited(t, tid, training_key(tid)))
        planted[tid] = f"ref:{base / 'bench.jsonl'}#line {i + 1}"
    per_corpus = Counter()
    same_task: dict[str, str] = {}  # copied eval-pool record → its split key (its task)
    for t in sorted(trajs, key=lambda t: t["traj_id"]):
        name = corpus.get(t["traj_id"])
        if name and pool(t["split_key"]) == "eval" and per_corpus[name] < 5:
            per_corpus[name] += 1
            tid = f"planted-own-{t['traj_id']}"
            trajs.append(lightly_edited(t, tid, training_key(tid)))
            planted[tid] = t["traj_id"]
            same_task[t["traj_id"]] = t["split_key"]
    write_jsonl(base / "corpus.jsonl", trajs)
    (base / "cfg.toml").write_text(f'[dedup]\ndecontaminate = ["{base / "bench.jsonl"}"]\n')
    proc = lwm_in_process("run", "--executor", "local", "--format", "lwm-jsonl", "--config", str(base / "cfg.toml"),
                          "-i", str(base / "corpus.jsonl"), "-o", str(base / "run"), "--progress", "off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    kept = {r["traj_id"]: r["split_key"] for p in (base / "run" / "trajectories").glob("*.parquet")
            for r in pq.read_table(p, columns=["traj_id", "split_key"]).to_pylist()}
    removed = {r["traj_id"]: r for r in pq.read_table(base / "run" / "dedup" / "removed.parquet").to_pylist()}
    manifest = json.loads((base / "run" / "manifest.json").read_text())
    return corpus, planted, per_corpus, kept, removed, manifest, same_task


def test_distinct_tasks_lose_at_most_five_percent(measured):
    corpus, _, _, kept, removed, _, _ = measured
    training = Counter(corpus[t] for t, key in kept.items() if t in corpus and pool(key) != "eval")
    lost = Counter(corpus[t] for t, r in removed.items() if t in corpus and r["reason"] in DECONTAM)
    assert set(training) == {f"demo-{d}" for d in DOMAINS} | set(SOURCES)
    for name, n in training.items():
        assert n >= 40, name
        assert lost[name] <= 0.05 * n, (name, lost[name], n)
    assert sum(lost.values()) <= 0.02 * sum(training.values()), lost


def test_every_lightly_edited_copy_is_removed_naming_its_record(measured):
    _, planted, per_corpus, kept, removed, manifest, same_task = measured
    assert len(planted) == 28 + sum(per_corpus.values()) and sum(per_corpus.values()) >= 40
    assert manifest["dedup"]["references"] == 28 and manifest["dedup"]["references_invalid"] == 0
    present = [t for t in planted if t in kept]
    assert len(present) >= len(planted) - 2  # a copy may fall to the filters (e.g. a retry cycle), not more
    for tid in present:
        row = removed.get(tid)
        assert row is not None and row["reason"] in DECONTAM, tid
        # The record it copies — or, as good a match, another episode of the same task in the eval pool.
        assert row["matched"] == planted[tid] or kept.get(row["matched"]) == same_task.get(planted[tid]), tid
        assert 0.5 <= row["overlap"] <= 1.0, (tid, row["overlap"])
