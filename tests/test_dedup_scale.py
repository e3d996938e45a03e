"""The dedup graph at scale: shared n-gram pairs counted with numpy and clusters found on integer node codes
give what the one-group-at-a-time rules and a Python union-find give, on random inputs."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa
import pytest

from stages import dedup_edges, dedup_graph
from stages.decontam import ROLE_EVAL, ROLE_REFERENCE, ROLE_TRAIN, near_is_contamination, ngram_group_pairs
from stages.dedup import UnionFind, cluster_id, survivor_rank
from stages.dedup_edges import EDGE_SCHEMA, KIND_SHARED, KIND_TOTAL
from stages.dedup_graph import BUCKET_SCHEMA, KIND_NGRAM, bucket_edges
from stages.dedup_removals import VERDICT_SCHEMA, cluster_removals, decontam_verdicts


def _ngram_bucket(rnd: random.Random, n_ids: int, n_groups: int) -> tuple[pa.Table, list[list[tuple[str, int]]]]:
    """Bucket rows of random n-gram groups (ids with a fixed role, some listed twice) and the groups themselves."""
    roles = {f"t{i:03d}": rnd.choice([ROLE_TRAIN] * 3 + [ROLE_EVAL, ROLE_REFERENCE]) for i in range(n_ids)}
    names = sorted(roles)
    rows, groups = [], []
    for g in range(n_groups):
        members = rnd.sample(names, rnd.randint(1, 12))
        members += rnd.sample(members, min(len(members), rnd.randint(0, 2)))  # the same id from two inputs
        rnd.shuffle(members)
        groups.append([(m, roles[m]) for m in members])
        rows += [(KIND_NGRAM, 0, g * 7919 + 1, g, m, roles[m], 0, 0, None) for m in members]
    rnd.shuffle(rows)
    table = pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(zip(*rows), BUCKET_SCHEMA)],
                                 schema=BUCKET_SCHEMA)
    return table, groups


def _reference_evidence(groups: list[list[tuple[str, int]]], limit: int) -> tuple[dict, dict]:
    """Shared counts per (training, evaluation) pair and totals per evaluation record, one group at a time."""
    shared: dict[tuple[str, str], int] = {}
    totals: dict[str, int] = {}
    for members in groups:
        if len(members) > limit:
            continue
        for m, role in members:
            if role != ROLE_TRAIN:
                totals[m] = totals.get(m, 0) + 1
        first: dict[str, int] = {}
        for m, role in members:
            first.setdefault(m, role)
        for pair in ngram_group_pairs(list(first), list(first.values())):
            shared[pair] = shared.get(pair, 0) + 1
    return shared, totals


@pytest.mark.parametrize("step", [1 << 22, 5])
def test_shared_pairs_equal_the_per_group_rule(monkeypatch, step):
    monkeypatch.setattr(dedup_graph, "_PAIRS_PER_STEP", step)  # small steps: counts summed across steps
    rnd = random.Random(step)
    table, groups = _ngram_bucket(rnd, 40, 300)
    limit = 10
    edges = bucket_edges(table, {"ngram_limit": limit, "exact": True, "near": True, "threshold": 0.8})
    rows = edges.to_pylist()
    shared = {(r["a"], r["b"]): r["count"] for r in rows if r["kind"] == KIND_SHARED}
    totals = {r["a"]: r["count"] for r in rows if r["kind"] == KIND_TOTAL}
    expected_shared, expected_totals = _reference_evidence(groups, limit)
    assert len(expected_shared) > 100 and max(expected_shared.values()) > 1
    assert shared == expected_shared
    assert totals == expected_totals
    assert len(shared) == sum(r["kind"] == KIND_SHARED for r in rows)  # each pair once per bucket


def _reference_clusters(edges: list[tuple], contaminated: set[str]) -> list[tuple]:
    """The survivor rule with a Python union-find: (traj_id, reason, cluster_id, survivor) sorted by id."""
    sizes, every, exact = {}, UnionFind(), UnionFind()
    for kind, a, b, at, al, bt, bl in edges:
        if a in contaminated or b in contaminated:
            continue
        sizes[a], sizes[b] = (at, al), (bt, bl)
        every.union(a, b)
        if kind == "exact":
            exact.union(a, b)
    out = []
    for members in every.groups():
        rank = sorted(members, key=lambda n: survivor_rank(n, *sizes[n]))
        firsts: dict[str, str] = {}
        for n in rank:
            firsts.setdefault(exact.find(n), n)
        for n in members:
            if n != rank[0]:
                reason = "exact_duplicate" if firsts[exact.find(n)] != n else "near_duplicate"
                out.append((n, reason, cluster_id(members), rank[0]))
    return sorted(out)


@pytest.mark.parametrize("seed", range(4))
def test_cluster_removals_equal_a_python_union_find(seed):
    rnd = random.Random(seed)
    nodes = [f"n{i:03d}" for i in range(150)]
    size = {n: (rnd.randint(1, 3), rnd.choice([100, 120, 140])) for n in nodes}  # many ties: the id decides
    edges = []
    for _ in range(160):
        a, b = rnd.sample(nodes, 2)
        edges.append((rnd.choice(["exact", "near", "near"]), a, b, *size[a], *size[b]))
    contaminated = set(rnd.sample(nodes, 10))
    table = pa.Table.from_pylist(
        [{"kind": k, "a": a, "b": b, "jaccard": 0.9, "a_turns": at, "a_len": al, "b_turns": bt, "b_len": bl,
          "count": 0} for k, a, b, at, al, bt, bl in edges], schema=EDGE_SCHEMA)
    verdicts = {t: ("decontaminated_near", "ref:x", 0.91) for t in contaminated}
    removed, counts = cluster_removals(table, verdicts)
    got = [(r["traj_id"], r["reason"], r["cluster_id"], r["survivor"]) for r in removed.to_pylist()
           if r["reason"] in ("exact_duplicate", "near_duplicate")]
    expected = _reference_clusters(edges, contaminated)
    assert got == expected
    assert {r["traj_id"] for r in removed.to_pylist()} - {g[0] for g in got} == contaminated
    assert counts["exact_removed"] == sum(e[1] == "exact_duplicate" for e in expected) > 0
    assert counts["near_removed"] == sum(e[1] == "near_duplicate" for e in expected) > 0
    assert counts["clusters"] == len({e[2] for e in expected})


def test_cluster_removals_of_no_edges():
    removed, counts = cluster_removals(EDGE_SCHEMA.empty_table(), {})
    assert removed.num_rows == 0 and counts["clusters"] == 0 and counts["example_clusters"] == []


def test_components_of_a_long_chain_are_one():
    from stages.dedup_removals import _components

    n = 100_000
    labels = _components(np.arange(n - 1), np.arange(1, n), n)
    assert len(np.unique(labels)) == 1


def _reference_verdicts(rows: list[tuple], settings: dict) -> Counter:
    """The verdicts of `decontam_verdicts`, by its rules one row at a time (a multiset: one per near row)."""
    totals: dict[str, int] = defaultdict(int)
    shared: dict[tuple[str, str], int] = defaultdict(int)
    for kind, a, b, _jaccard, count in rows:
        if kind == KIND_TOTAL:
            totals[a] += count
        elif kind == KIND_SHARED:
            shared[(a, b)] += count
    out: Counter = Counter()
    for kind, a, b, jaccard, _count in rows:
        if kind == "decontam_near":
            passes = near_is_contamination(totals.get(b, 0), shared.get((a, b), 0), settings)
            out[("near", a, b, float(np.float32(jaccard)), passes)] += 1
    for (a, b), n in shared.items():
        total = totals.get(b, 0)
        if total > 0 and n >= settings["ngram_min_shared"] and n / total >= settings["ngram_overlap"]:
            out[("ngram", a, b, n / total, True)] += 1
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("encoded", [False, True])
def test_decontam_verdicts_sum_partial_counts_like_the_rules_one_row_at_a_time(seed, encoded):
    """Partial totals and shared counts of one partition, from many buckets, summed over integer codes: the
    verdicts are those of the rules applied to each pair's sums (records without a total, near copies without
    shared counts, an id that is both a training trajectory and a record name, ids read as dictionaries)."""
    rnd = random.Random(seed)
    train = [f"t{i:03d}" for i in range(40)] + ["both"]
    records = [f"e{i:02d}" for i in range(8)] + ["both"]
    rows = []
    for r in records[:-2]:  # the last record has no total
        rows += [(KIND_TOTAL, r, "", None, rnd.randint(0, 30)) for _ in range(rnd.randint(1, 3))]
    for _ in range(rnd.randint(0, 400)):
        rows.append((KIND_SHARED, rnd.choice(train), rnd.choice(records), None, rnd.randint(1, 9)))
    for _ in range(rnd.randint(0, 30)):
        rows.append(("decontam_near", rnd.choice(train), rnd.choice(records), rnd.random(), None))
    rnd.shuffle(rows)
    settings = {"ngram_min_shared": rnd.choice([1, 5, 10]), "ngram_overlap": rnd.choice([0.2, 0.6]),
                "near_specific_share": rnd.choice([0.1, 0.5])}
    full = [(k, a, b, j, 0, 0, 0, 0, c) for k, a, b, j, c in rows]
    table = pa.Table.from_arrays([pa.array(col, type=f.type) for col, f in zip(zip(*full), EDGE_SCHEMA)],
                                 schema=EDGE_SCHEMA) if rows else EDGE_SCHEMA.empty_table()
    if encoded:
        table = pa.concat_tables([table.slice(0, len(rows) // 2), table.slice(len(rows) // 2)])
        table = pa.Table.from_arrays([c.dictionary_encode() if f.name in ("kind", "a", "b") else c
                                      for c, f in zip(table.columns, EDGE_SCHEMA)], names=EDGE_SCHEMA.names)
    got = decontam_verdicts(table, settings)
    assert got.schema.equals(VERDICT_SCHEMA)
    want = _reference_verdicts(rows, settings)
    assert Counter(map(tuple, zip(*(got.column(c).to_pylist() for c in VERDICT_SCHEMA.names)))) == want
    assert sum(want.values()) == got.num_rows


@pytest.mark.parametrize("seed", range(4))
def test_the_totals_as_columns_equal_their_rows(seed):
    # A bucket's `KIND_TOTAL` edges are built as columns (`total_table`); they must be the rows `edge_table`
    # makes of the sorted tuples, sizes included where a record is also the end of a dedup edge.
    rnd = random.Random(seed)
    alphabet = ["a", "B", "z", "0", "_", "é", "ß", "中", "🙂"]
    ids = sorted({"".join(rnd.choices(alphabet, k=rnd.randint(1, 4))) for _ in range(60)})
    rnd.shuffle(ids)
    counts = [rnd.randint(1, 9) for _ in ids]
    values = pa.array(ids).dictionary_encode() if seed % 2 else pa.array(ids)  # the reduce's ids are encoded
    struct = pa.StructArray.from_arrays([values, pa.array(counts, pa.int64())], names=["values", "counts"])
    sizes = {i: (rnd.randint(1, 30), rnd.randint(1, 9999)) for i in rnd.sample(ids, 10)} if seed else {}
    got = dedup_edges.total_table(struct, sizes)
    want = dedup_edges.edge_table(sorted((KIND_TOTAL, i, "", n) for i, n in zip(ids, counts)), sizes)
    assert got.equals(want)
    assert got.column("a").to_pylist() == sorted(ids)  # code point order, as Python sorts the tuples
