"""Decontamination: training trajectories must not contain what the model is evaluated on.

A training-pool (cpt, sft, rl) trajectory is removed when it

- near-duplicates an evaluation record: MinHash of its action/observation words (the same signatures and
  LSH bands as near-duplicate removal, stages/dedup.py) reaches the threshold — reason
  ``decontaminated_near`` (an exact copy counts as near, Jaccard 1);
- or shares a word n-gram (default 13 words, lowercased, normalized as for dedup) with one — reason
  ``decontaminated_ngram``. An n-gram found in more than `DEFAULT_NGRAM_MAX_DOCS` training trajectories is
  boilerplate (a shell banner, a license header, a tool's help text), not a leak, and is ignored: without
  that bound one common banner in an eval trajectory would empty the training pools.

Evaluation records are (1) the eval pool of the same run — always protected; eval-pool trajectories are
never removed by decontamination — and (2) the paths in ``dedup.decontaminate``:

- a directory holding another lwmkit run (``manifest.json`` + ``trajectories/``): its eval pool, chosen
  with that run's own pool ratios and seed from its manifest (the trajectories layer keeps the full text;
  shards are tokenized and templated);
- any input the ingest adapters read, e.g. AgentWorldBench JSONL, whose rows are rebuilt into whole
  trajectories by the ``agentworldbench`` adapter (so the benchmark's prompt markup is not compared) — or
  ``lwm-jsonl``. Every trajectory of such a file is an evaluation record.

Reference ids are ``ref:<uri>#<traj_id>`` so they never collide with the run's own ids.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from functools import partial
from typing import Any

import pyarrow.parquet as pq

from pipeline.stats import Stats
from schemas.errors import ConfigError, InvalidRecord
from stages.ingest.reading import InputUnit, expand_inputs, filesystem
from stages.ingest.registry import claims_dir, get_adapter, resolve_opts, sniff
from stages.pools import pool_of

ROLE_TRAIN, ROLE_EVAL, ROLE_REFERENCE = 0, 1, 2
DEFAULT_NGRAM_MAX_DOCS = 20
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


def reference_units(specs: list[str]) -> list[str]:
    """The reference sources of ``dedup.decontaminate``: run directories whole, other paths expanded to files."""
    out = []
    for spec in specs:
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
            yield reference_id(uri, traj.traj_id), traj.to_dict()


def iter_references(uri: str, stats: Stats) -> Iterator[tuple[str, dict]]:
    """``(reference_id, trajectory dict)`` of every evaluation record of one reference source."""
    if is_run_directory(uri):
        yield from _run_eval_pool(uri, stats)
    else:
        yield from _adapter_records(uri, stats)


def ngram_group_edges(ids: list[str], roles: list[int], max_docs: int = DEFAULT_NGRAM_MAX_DOCS) -> list[tuple]:
    """Edges of the trajectories sharing one n-gram: each training member → the smallest evaluation member.

    Nothing when no evaluation record holds the n-gram, or when more than `max_docs` training trajectories
    do (boilerplate). `ids` are distinct.
    """
    train = sorted(i for i, r in zip(ids, roles) if r == ROLE_TRAIN)
    refs = [i for i, r in zip(ids, roles) if r != ROLE_TRAIN]
    if not train or not refs or len(train) > max_docs:
        return []
    witness = min(refs)
    return [("decontam_ngram", t, witness, 1.0) for t in train]


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
