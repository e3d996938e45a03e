"""Decontamination counts only candidate pairs (the prefix filter of stages/decontam_select.py): the verdicts
equal those of counting every (training, evaluation) pair of every specific n-gram group, on random inputs
built to put many pairs at and around the thresholds, split over several buckets and evidence partitions."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline.decontam_stage import GRAM_FILE_SCHEMA
from pipeline.dedup_stage import evidence_parts, record_parts
from stages.decontam import ROLE_EVAL, ROLE_REFERENCE, ROLE_TRAIN
from stages.decontam_select import CandidateIndex, candidate_pairs, distinct_pairs, least_passing, select_groups
from stages.dedup_edges import EDGE_SCHEMA, KIND_SHARED
from stages.dedup_graph import BUCKET_SCHEMA, KIND_NGRAM, bucket_edges, bucket_evidence
from stages.dedup_removals import VERDICT_SCHEMA, decontam_verdicts, of_kinds

LIMIT = 12  # groups of more members are common, not specific
TRAIN = 120


def _corpus(rnd: random.Random) -> tuple[list[tuple], list[tuple]]:
    """Bucket rows (kind, band, key, key2, traj_id, role, ...) of n-gram groups, and near-copy rows.

    Ten evaluation records (some references) hold 12-60 n-grams each; every fourth of 120 training
    trajectories copies a random share of one record's n-grams (many near the 0.6 overlap threshold), and each
    holds a few n-grams of three records and a few of its own; some n-grams are common (more than `LIMIT` members); some ids are listed twice
    in a group (the same trajectory from two inputs). Near copies: six of the copies and six random pairs."""
    records = {f"e{i:02d}": rnd.choice([ROLE_EVAL, ROLE_REFERENCE]) for i in range(10)}
    grams = {r: list(range(i * 1000, i * 1000 + rnd.randint(12, 60))) for i, r in enumerate(records)}
    members: dict[int, list[tuple[str, int]]] = {}
    for r, keys in grams.items():
        for k in keys:
            members.setdefault(k, []).append((r, records[r]))
    names = list(records)
    copies = []
    for i in range(TRAIN):
        t = f"t{i:03d}"
        held = [50_000 + i * 10 + j for j in range(rnd.randint(0, 5))]
        if i % 4 == 0:  # a copy of much of one record
            first = rnd.choice(names)
            share = rnd.choice([rnd.uniform(0.5, 0.7), rnd.random(), 1.0])
            held += rnd.sample(grams[first], round(share * len(grams[first])))
            copies.append((t, first))
        for r in rnd.sample(names, 3):  # a few n-grams of other records, as unrelated tasks share phrases
            held += rnd.sample(grams[r], rnd.randint(1, 4))
        for k in held:
            members.setdefault(k, []).append((t, ROLE_TRAIN))
    for k in rnd.sample(sorted(members), 15):  # common n-grams
        members[k] += [(f"c{j:02d}", ROLE_TRAIN) for j in range(LIMIT)]
    for k in rnd.sample(sorted(members), 20):  # an id listed twice
        members[k].append(members[k][0])
    rows = [(KIND_NGRAM, 0, k * 7919 + 3, k, m, role, 0, 0, None) for k, ms in members.items() for m, role in ms]
    rnd.shuffle(rows)
    pairs = rnd.sample(copies, 6) + [(f"t{rnd.randrange(TRAIN):03d}", rnd.choice(names)) for _ in range(6)]
    near = [("decontam_near", t, r, round(rnd.uniform(0.8, 1), 3)) for t, r in pairs]
    return rows, near


def _table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(zip(*rows), schema)], schema=schema)


def _near_edges(near: list[tuple]) -> pa.Table:
    return _table([(k, a, b, j, 0, 0, 0, 0, 0) for k, a, b, j in near], EDGE_SCHEMA)


def _verdicts(table: pa.Table) -> Counter:
    return Counter(map(tuple, zip(*(table.column(c).to_pylist() for c in VERDICT_SCHEMA.names))))


def _rounds(buckets: list[pa.Table], near: pa.Table, settings: dict, parts: int) -> tuple[pa.Table, int]:
    """The stage's rounds as pure functions: per bucket the reduce, per partition the selection, per bucket the
    candidates, one gather, per bucket the counts; returns all evidence and the number of candidate pairs."""
    reduced = [bucket_evidence(b, settings) for b in buckets]
    evidence = pa.concat_tables([of_kinds(e, ("decontam_total", "decontam_near")) for e, _, _ in reduced] + [near])
    grams = pa.concat_tables([g.append_column("bucket", pa.array(np.full(g.num_rows, n, np.int32)))
                              for n, (_, _, g) in enumerate(reduced)]).cast(GRAM_FILE_SCHEMA)
    evidence_part = evidence_parts(evidence, parts)
    gram_part = record_parts(grams.column("record"), parts)
    selected = pa.concat_tables([select_groups(evidence.filter(pa.array(evidence_part == q)),
                                               grams.filter(pa.array(gram_part == q)), settings)
                                 for q in range(parts)])
    candidates = [candidate_pairs(groups, selected.filter(pa.array(selected.column("bucket").to_numpy() == n)))
                  for n, (_, groups, _) in enumerate(reduced)]
    near_pairs = distinct_pairs(pa.table({"train": near.column("a"), "record": near.column("b")}))
    gathered = distinct_pairs(pa.concat_tables([*candidates, near_pairs]))
    index = CandidateIndex(gathered)
    shared = [index.shared(groups) for _, groups, _ in reduced]
    return pa.concat_tables([evidence, *shared]), gathered.num_rows


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("thresholds", [(10, 0.6), (1, 0.2), (5, 0.7), (3, 1.0)])
def test_candidate_pairs_give_the_verdicts_of_all_pairs(seed, thresholds):
    rnd = random.Random(seed)
    rows, near_rows = _corpus(rnd)
    settings = {"ngram_limit": LIMIT, "ngram_min_shared": thresholds[0], "ngram_overlap": thresholds[1],
                "near_specific_share": 0.5, "exact": True, "near": True, "threshold": 0.8}
    near = _near_edges(near_rows)
    whole = bucket_edges(_table(rows, BUCKET_SCHEMA), settings)  # every pair, one bucket
    all_pairs = whole.filter(pc.equal(whole.column("kind"), KIND_SHARED)).num_rows
    want = _verdicts(decontam_verdicts(pa.concat_tables([whole, near]), settings))
    n_buckets = 1 + seed % 4
    buckets = []
    for b in range(n_buckets):  # rows of one n-gram meet in one bucket, as the map routes them
        sub = [r for r in rows if r[3] % n_buckets == b]
        buckets.append(_table(sub, BUCKET_SCHEMA) if sub else BUCKET_SCHEMA.empty_table())
    evidence, n_candidates = _rounds(buckets, near, settings, parts=1 + seed % 3)
    got = _verdicts(decontam_verdicts(evidence, settings))
    assert got == want
    passing = sum(n for v, n in want.items() if v[0] == "ngram")
    assert passing >= 3 and sum(v[0] == "near" and v[4] for v in want) >= 1  # verdicts of both kinds pass
    if thresholds == (10, 0.6):  # the default thresholds: fewer pairs counted than all (on real data, ~1/90)
        assert n_candidates < all_pairs


def test_least_passing_is_the_least_count_the_verdict_accepts():
    for overlap in (0.2, 0.3, 0.6, 0.7, 0.9, 1.0):
        for min_shared in (1, 3, 10):
            settings = {"ngram_overlap": overlap, "ngram_min_shared": min_shared}
            totals = np.arange(1, 400)
            got = least_passing(totals, settings)
            for total, least in zip(totals.tolist(), got.tolist()):
                passing = [s for s in range(total + 1) if s >= min_shared and np.float64(s) / total >= overlap]
                assert least == (passing[0] if passing else total + 1), (overlap, min_shared, total)


def test_a_record_with_too_few_groups_selects_none():
    """m > r: no training trajectory can hold enough of the record's n-grams, so none of its groups is kept."""
    settings = {"ngram_overlap": 0.6, "ngram_min_shared": 10}
    evidence = _table([("decontam_total", "e1", "", 0.0, 0, 0, 0, 0, 30)], EDGE_SCHEMA)
    grams = _table([("e1", g, 1, g, g, 0) for g in range(9)], GRAM_FILE_SCHEMA)
    assert select_groups(evidence, grams, settings).num_rows == 0
    grams = _table([("e1", g, 1 + g % 3, g, g, 0) for g in range(25)], GRAM_FILE_SCHEMA)
    chosen = select_groups(evidence, grams, settings)  # m = 18 of T = 30, r = 25: r - m + 1 = 8 groups
    assert chosen.num_rows == 8
    assert sorted(chosen.column("group").to_pylist()) == sorted(g for g in range(25) if g % 3 == 0)[:8]
