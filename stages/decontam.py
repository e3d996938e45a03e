"""Decontamination: training trajectories must not contain what the model is evaluated on.

A training-pool (cpt, sft, rl) trajectory is removed when it

- near-duplicates an evaluation record: MinHash of its action/observation words (the same signatures and
  LSH bands as near-duplicate removal, stages/dedup.py) reaches the threshold and it also holds
  ``near_specific_share`` of the record's specific n-grams (below) — reason ``decontaminated_near`` (an exact
  copy counts as near, Jaccard 1); the overlap figure is that Jaccard;
- or holds a substantial share of an evaluation record's task-specific content — reason
  ``decontaminated_ngram``: of the record's distinct word n-grams (default 13 words, lowercased,
  normalized as for dedup) that are **specific** — found in at most ``max(ngram_common_min_docs,
  ngram_common_share × N)`` of the N trajectories compared (the run's, every pool, plus the reference
  records) — at least ``ngram_overlap`` (and at least ``ngram_min_shared`` of them) occur in the training
  trajectory; the overlap figure is that share. Common n-grams are a framework's fixed prompts, a harness's
  commands, a shell banner: they say nothing about the task, so they count neither way.

The defaults were measured (README, "Decontamination"): distinct tasks sharing one framework's
boilerplate keep at least 95% of their training trajectories, and lightly edited copies of evaluation
records (a rephrased task, a few words changed in some observations) are all removed.

Evaluation records are (1) the eval pool of the same run — always protected; eval-pool trajectories are
never removed by decontamination — and (2) the paths in ``dedup.decontaminate``:

- a directory holding another lwmkit run (``manifest.json`` + ``trajectories/``): its eval pool, chosen
  with that run's own pool ratios and seed from its manifest (the trajectories layer keeps the full text;
  shards are tokenized and templated);
- any input the ingest adapters read, e.g. AgentWorldBench JSONL, whose rows are rebuilt into whole
  trajectories by the ``agentworldbench`` adapter (so the benchmark's prompt markup is not compared) — or
  ``lwm-jsonl``. Every trajectory of such a file is an evaluation record.

Reference ids are ``ref:<uri>#<locator>`` for a file (``ref:bench.jsonl#line 7, line 8``: the rows the
record was rebuilt from) and ``ref:<run dir>#<traj_id>`` for another run's eval pool, so they never
collide with the run's own ids and say where to look.
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Iterator
from functools import partial
from typing import Any

import pyarrow.parquet as pq

from schemas.errors import ConfigError, InvalidRecord
from schemas.stats import Stats
from stages.ingest.reading import InputUnit, expand_inputs, filesystem
from stages.ingest.registry import claims_dir, get_adapter, resolve_opts, sniff
from stages.pools import pool_of

ROLE_TRAIN, ROLE_EVAL, ROLE_REFERENCE = 0, 1, 2
TRAJECTORY_COLUMNS = ["traj_id", "domain", "split_key", "system", "turns"]


def role_of(split_key: str, pools: dict[str, Any]) -> int:
    """`ROLE_EVAL` for a trajectory in the run's eval pool, else `ROLE_TRAIN`."""
    return ROLE_EVAL if pool_of(split_key, pools["ratios"], pools["seed"]) == "eval" else ROLE_TRAIN


def is_active(cfg: dict[str, Any]) -> bool:
    """Whether any evaluation record can exist: an eval pool, or paths to decontaminate against."""
    return cfg["pools"]["ratios"].get("eval", 0) > 0 or bool(cfg["dedup"]["decontaminate"])


def reference_id(uri: str, traj_id: str) -> str:
    return f"ref:{uri}#{traj_id}"


def is_run_directory(uri: str) -> bool:
    """Whether `uri` is the output of another lwmkit run."""
    fs, path = filesystem(uri)
    return fs.isdir(path) and fs.exists(posixpath.join(path, "manifest.json")) and fs.isdir(
        posixpath.join(path, "trajectories")
    )


def _unfinished_run(uri: str) -> bool:
    """Whether `uri` is the output folder of an lwmkit run that has not finished (stopped, or running again): its
    task markers or manifest, but no ``_SUCCESS``. Its eval pool may be partial, and its files are no input."""
    fs, path = filesystem(uri)
    if not fs.isdir(path) or fs.exists(posixpath.join(path, "_SUCCESS")):
        return False
    return fs.isdir(posixpath.join(path, "_tasks")) or fs.exists(posixpath.join(path, "manifest.json"))


def reference_units(specs: list[str]) -> list[str]:
    """The reference sources of ``dedup.decontaminate``: run directories whole, other paths expanded to files. A
    run's folder without ``_SUCCESS`` is a `ConfigError`."""
    out = []
    for spec in specs:
        if _unfinished_run(spec):
            raise ConfigError(f"dedup.decontaminate: {spec}: not a finished run (no _SUCCESS); run `lwm run` to "
                              "completion first")
        if is_run_directory(spec):
            out.append(spec.rstrip("/"))
        else:
            out.extend(u.uri for u in expand_inputs([spec], claims_dir=partial(claims_dir, fmt=None)))
    return sorted(set(out))


def _run_eval_pool(uri: str, stats: Stats) -> Iterator[tuple[str, dict]]:
    fs, root = filesystem(uri)
    with fs.open(posixpath.join(root, "manifest.json"), "rb") as f:
        pools = json.loads(f.read())["config"]["pools"]
    for path in sorted(p for p in fs.find(posixpath.join(root, "trajectories")) if p.endswith(".parquet")):
        with fs.open(path, "rb") as f:
            table = pq.read_table(f, columns=TRAJECTORY_COLUMNS)
        for row in table.to_pylist():
            if role_of(row["split_key"], pools) == ROLE_EVAL:
                stats.add("decontam.references")
                yield reference_id(uri, row["traj_id"]), row


def _adapter_records(uri: str, stats: Stats) -> Iterator[tuple[str, dict]]:
    fs, path = filesystem(uri)
    unit = InputUnit(uri, is_dir=fs.isdir(path))  # a directory here is a session an adapter claimed
    fmt = sniff(unit)[0]
    if not fmt:
        raise ConfigError(f"dedup.decontaminate: no adapter recognizes {uri} (expected AgentWorldBench JSONL, "
                          "lwm-jsonl or an lwmkit run directory)")
    adapter = get_adapter(fmt)
    opts = resolve_opts(adapter, {})
    seen: set[str] = set()
    for item in adapter.read(unit, opts):
        if isinstance(item, InvalidRecord):
            stats.add("decontam.references_invalid")
            continue
        try:
            trajs = list(adapter.normalize(item, opts))
        except InvalidRecord:
            # Counted and reported in the manifest: an unreadable evaluation row cannot be compared.
            stats.add("decontam.references_invalid")
            continue
        for traj in trajs:
            stats.add("decontam.references")
            # Named by where it is in the file (e.g. the AgentWorldBench rows it was rebuilt from), so a
            # removal can be checked by opening that line; the trajectory id when the locator is taken.
            name = traj.source.locator if traj.source.locator and traj.source.locator not in seen else traj.traj_id
            seen.add(name)
            yield reference_id(uri, name), traj.to_dict()


def iter_references(uri: str, stats: Stats) -> Iterator[tuple[str, dict]]:
    """``(reference_id, trajectory dict)`` of every evaluation record of one reference source."""
    if is_run_directory(uri):
        yield from _run_eval_pool(uri, stats)
    else:
        yield from _adapter_records(uri, stats)


def common_limit(n_trajectories: int, share: float, min_docs: int) -> int:
    """The most trajectories a specific n-gram may be found in; in more, it is common (boilerplate)."""
    return max(int(min_docs), math.floor(float(share) * n_trajectories))


def ngram_group_pairs(ids: list[str], roles: list[int]) -> list[tuple[str, str]]:
    """``(training id, evaluation id)`` of every training and evaluation member of one specific n-gram's
    group (`ids` distinct); each pair's count over all n-grams is the shared-content figure."""
    train = sorted(i for i, r in zip(ids, roles) if r == ROLE_TRAIN)
    refs = sorted(i for i, r in zip(ids, roles) if r != ROLE_TRAIN)
    return [(t, e) for t in train for e in refs]


def near_is_contamination(total: int, shared: int, settings: dict[str, Any]) -> bool:
    """Whether a training trajectory that near-duplicates an evaluation record (MinHash) is contaminated by it:
    it must also hold ``near_specific_share`` of the record's specific n-grams — unless the record has fewer
    than ``ngram_min_shared`` of them (nothing task-specific to check, the near copy decides). Two distinct
    tasks on the same screens (turning a setting on, turning it off) are near copies of each other that
    share none of each other's task-specific n-grams."""
    if total < settings["ngram_min_shared"]:
        return True
    return shared / total >= settings["near_specific_share"]


def ngram_verdicts(totals: dict[str, int], shared: dict[tuple[str, str], int], overlap: float,
                   min_shared: int) -> dict[str, tuple[float, str, int]]:
    """Training id → ``(share, evaluation id, shared n-grams)`` of its best-matching evaluation record, for
    the trajectories that hold at least `overlap` of a record's specific n-grams (and `min_shared` of them).

    `totals`: specific n-grams per evaluation record; `shared`: specific n-grams of the record found in the
    training trajectory. The best match is the largest share, then the smallest evaluation id.
    """
    best: dict[str, tuple[float, str, int]] = {}
    for (t, e), n in shared.items():
        total = totals.get(e, 0)
        if not total or n < min_shared or n / total < overlap:
            continue
        verdict = (n / total, e, n)
        old = best.get(t)
        if old is None or (-verdict[0], verdict[1]) < (-old[0], old[1]):
            best[t] = verdict
    return best


def exact_group_edges(ids: list[str], roles: list[int], exact: bool) -> list[tuple]:
    """Edges of trajectories with one exact key: copies within the training or the eval side (``exact``,
    a star from the smallest id) and training copies of an eval trajectory (``decontam_near``)."""
    edges = []
    by_role = {r: sorted(i for i, rr in zip(ids, roles) if rr == r) for r in (ROLE_TRAIN, ROLE_EVAL)}
    if exact:
        for members in by_role.values():
            edges += [("exact", members[0], other, 1.0) for other in members[1:]]
    refs = [i for i, r in zip(ids, roles) if r != ROLE_TRAIN]
    if refs:
        witness = min(refs)
        edges += [("decontam_near", t, witness, 1.0) for t in by_role[ROLE_TRAIN]]
    return edges
