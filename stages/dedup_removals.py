"""Removals from the edges of the dedup graph: decontamination verdicts, then clusters and the survivor rule.

Pure functions over Arrow tables, used by the dedup stage (`pipeline.dedup_stage`): `decontam_verdicts` in
each task of one partition of evaluation records, `contaminated_of` and `cluster_removals` in the one
clusters task. `removed_rows` is the whole computation over the edges of a run in one table.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.decontam import near_is_contamination
from stages.dedup import cluster_id
from stages.dedup_edges import KIND_SHARED, KIND_TOTAL, columns_table
from stages.distinct import distinct_first
from stages.sample_rows import key_parts

# Decontamination evidence of one evaluation record (its total, the shared counts and near copies that name it)
# lives in one partition: every such row is routed by the record's id.
DECONTAM_KINDS = (KIND_TOTAL, KIND_SHARED, "decontam_near")
DEDUP_KINDS = ("exact", "near")
# A training trajectory's evidence against one evaluation record, as one partition's verdict task found it:
# ``near`` (figure: the Jaccard estimate; passes: it also holds enough of the record's specific n-grams) or
# ``ngram`` (figure: the share of the record's specific n-grams it holds, already past the thresholds).
VERDICT_SCHEMA = pa.schema(
    [("kind", pa.string()), ("traj_id", pa.string()), ("record", pa.string()), ("figure", pa.float64()),
     ("passes", pa.bool_())]
)
# matched / overlap: for a decontamination removal, the evaluation record it matched and the overlap figure
# (the share of the record's specific n-grams found, or the estimated Jaccard of a near copy); null otherwise.
# occurrence: which of the run's trajectories carrying traj_id (1 for the first, in input order; see
# `pipeline.occurrences`); survivor and matched name a trajectory by its id alone.
REMOVED_SCHEMA = pa.schema(
    [("traj_id", pa.string()), ("occurrence", pa.int32()), ("reason", pa.string()), ("cluster_id", pa.string()), ("survivor", pa.string()),
     ("matched", pa.string()), ("overlap", pa.float64())]
)


def evidence_key(edges: pa.Table) -> pa.ChunkedArray:
    """The evaluation record each decontamination row is about: ``a`` of a total, ``b`` of the others."""
    return pc.if_else(pc.equal(edges.column("kind"), KIND_TOTAL), edges.column("a"), edges.column("b"))


def of_kinds(edges: pa.Table, kinds: tuple[str, ...]) -> pa.Table:
    return edges.filter(pc.is_in(edges.column("kind"), pa.array(kinds, pa.string())))


def _codes(column: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A string column (plain or dictionary-encoded) as its distinct values and one int64 code per row."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    return column.dictionary, column.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def decontam_verdicts(evidence: pa.Table, settings: dict[str, Any]) -> pa.Table:
    """`VERDICT_SCHEMA` rows from the decontamination rows of some evaluation records (all rows of each:
    partial totals and shared counts are summed here): every near copy, with whether it also holds
    ``near_specific_share`` of the record's specific n-grams (`near_is_contamination`), and every training
    trajectory that holds ``ngram_overlap`` of a record's specific n-grams, at least ``ngram_min_shared``.

    The sums run over integer codes of the ids in numpy (``kind``, ``a`` and ``b`` may come
    dictionary-encoded): one partition's evidence grows with the input (millions of rows at 2 GB), and
    grouping and joining its strings held several times their size. Rows come near copies first; their
    order within each kind is not part of the result (`contaminated_of` reads them as a set).
    """
    kinds, kind = _codes(evidence.column("kind"))
    kind_names = kinds.to_pylist()

    def of_kind(name: str) -> np.ndarray:
        return kind == kind_names.index(name) if name in kind_names else np.zeros(len(kind), bool)

    a_names, a = _codes(evidence.column("a"))
    b_names, b = _codes(evidence.column("b"))
    # one code space for both ends: a total names its record in ``a``, the other rows in ``b``
    names = pa.concat_arrays([a_names.cast(pa.string()), b_names.cast(pa.string())]).unique()
    a = pc.index_in(a_names.cast(pa.string()), value_set=names).to_numpy(zero_copy_only=False).astype(np.int64)[a]
    b = pc.index_in(b_names.cast(pa.string()), value_set=names).to_numpy(zero_copy_only=False).astype(np.int64)[b]
    n_names = max(len(names), 1)
    count = evidence.column("count").fill_null(0).to_numpy().astype(np.int64)

    is_total = of_kind(KIND_TOTAL)
    totals = np.zeros(n_names, np.int64)
    np.add.at(totals, a[is_total], count[is_total])
    is_shared = of_kind(KIND_SHARED)
    pairs, at = np.unique(a[is_shared] * n_names + b[is_shared], return_inverse=True)
    shared = np.zeros(len(pairs), np.int64)
    np.add.at(shared, at.ravel(), count[is_shared])
    pair_a, pair_b = pairs // n_names, pairs % n_names
    total = totals[pair_b]
    share = np.divide(shared, total, out=np.zeros(len(shared)), where=total > 0)
    hit = (total > 0) & (shared >= int(settings["ngram_min_shared"])) & (share >= float(settings["ngram_overlap"]))
    ngram = {"kind": pa.array(["ngram"] * int(hit.sum()), pa.string()), "traj_id": names.take(pair_a[hit]),
             "record": names.take(pair_b[hit]), "figure": share[hit], "passes": np.ones(int(hit.sum()), bool)}

    is_near = of_kind("decontam_near")
    near_a, near_b = a[is_near], b[is_near]
    where = np.searchsorted(pairs, near_a * n_names + near_b)
    found = where < len(pairs)
    found[found] = pairs[where[found]] == (near_a * n_names + near_b)[found]
    near_shared = np.where(found, shared[np.minimum(where, max(len(pairs) - 1, 0))] if len(pairs) else 0, 0)
    near_total = totals[near_b]
    passes = [near_is_contamination(t, s, settings) for t, s in zip(near_total.tolist(), near_shared.tolist())]
    jaccard = evidence.column("jaccard").to_numpy(zero_copy_only=False)[is_near].astype(np.float64)
    near_rows = {"kind": pa.array(["near"] * len(near_a), pa.string()), "traj_id": names.take(near_a),
                 "record": names.take(near_b), "figure": jaccard, "passes": passes}
    return pa.concat_tables([columns_table(near_rows, VERDICT_SCHEMA), columns_table(ngram, VERDICT_SCHEMA)])


def contaminated_of(verdicts: pa.Table) -> dict[str, tuple[str, str, float]]:
    """Training id → ``(reason, evaluation id, figure)``: the closest near copy decides first (when it passes the
    n-gram check), then the best n-gram share (the largest share, then the smallest evaluation id)."""
    near: dict[str, tuple[str, float, bool]] = {}
    best: dict[str, tuple[float, str]] = {}
    cols = (verdicts.column(c).to_pylist() for c in VERDICT_SCHEMA.names)
    for kind, t, w, figure, passes in zip(*cols):
        if kind == "near":
            old = near.get(t)
            if old is None or (-figure, w) < (-old[1], old[0]):  # the closest record, then the smallest id
                near[t] = (w, figure, passes)
        else:
            old = best.get(t)
            if old is None or (-figure, w) < (-old[0], old[1]):
                best[t] = (figure, w)
    out = {t: ("decontaminated_near", w, j) for t, (w, j, ok) in near.items() if ok}
    for t, (share, w) in best.items():
        out.setdefault(t, ("decontaminated_ngram", w, share))
    return out


def cluster_removals(edges: pa.Table, contaminated: dict[str, tuple[str, str, float]]
                     ) -> tuple[pa.Table, dict[str, Any]]:
    """`REMOVED_SCHEMA` rows (sorted by traj_id, then occurrence) and the counts: the decontaminated trajectories, then the
    clusters of the dedup edges (``exact`` and ``near``) between the others and the survivor rule.

    Components and ranks are numpy arrays over integer node codes: no Python object per edge.
    """
    rows = [{"traj_id": t, "reason": reason, "cluster_id": cluster_id([w]), "survivor": w, "matched": w,
             "overlap": round(float(figure), 4)} for t, (reason, w, figure) in contaminated.items()]
    edges = of_kinds(edges, DEDUP_KINDS)
    if contaminated:
        out = pa.array(sorted(contaminated), pa.string())
        edges = edges.filter(pc.invert(pc.or_(pc.is_in(edges.column("a"), out), pc.is_in(edges.column("b"), out))))
    ends = pa.chunked_array(edges.column("a").chunks + edges.column("b").chunks, pa.string()).combine_chunks()
    encoded = ends.dictionary_encode()
    names = encoded.dictionary
    n_nodes, n_edges = len(names), edges.num_rows
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    a, b = codes[:n_edges], codes[n_edges:]
    turns, lengths = np.zeros(n_nodes, np.int64), np.zeros(n_nodes, np.int64)
    for side, ids in (("a", a), ("b", b)):
        turns[ids] = np.asarray(edges.column(f"{side}_turns"))
        lengths[ids] = np.asarray(edges.column(f"{side}_len"))
    every = _components(a, b, n_nodes)
    is_exact = np.asarray(pc.equal(edges.column("kind"), "exact"), dtype=bool)
    exact = _components(a[is_exact], b[is_exact], n_nodes)
    name_rank = np.empty(n_nodes, np.int64)
    name_rank[pc.sort_indices(names).to_numpy()] = np.arange(n_nodes)
    by_rank = np.lexsort((name_rank, -lengths, -turns))  # survivor_rank: most turns, longest text, smallest id
    survivor = np.full(n_nodes, -1)
    firsts = np.full(n_nodes, -1)
    _, at = distinct_first(every[by_rank])
    survivor[every[by_rank[at]]] = by_rank[at]
    _, at = distinct_first(exact[by_rank])
    firsts[exact[by_rank[at]]] = by_rank[at]
    # Members of each cluster in id order: the cluster id hashes them.
    by_name = np.lexsort((name_rank, every))
    starts = np.flatnonzero(np.r_[True, every[by_name][1:] != every[by_name][:-1]]) if n_nodes else np.zeros(0, int)
    bounds = np.r_[starts, n_nodes]
    name_list = names.to_pylist()
    cluster_ids, largest = {}, []
    for s, e in itertools.pairwise(bounds):
        members = [name_list[i] for i in by_name[s:e]]
        cid = cluster_id(members)
        cluster_ids[int(every[by_name[s]])] = cid
        largest.append((-(e - s), cid))
    removed = np.flatnonzero(survivor[every] != np.arange(n_nodes))
    for n in removed.tolist():
        c = int(every[n])
        rows.append({"traj_id": name_list[n],
                     "reason": "exact_duplicate" if firsts[exact[n]] != n else "near_duplicate",
                     "cluster_id": cluster_ids[c], "survivor": name_list[int(survivor[c])], "matched": None,
                     "overlap": None})
    for r in rows:  # the graph's nodes are occurrence keys (`stages.sample_rows.sample_key`)
        r["traj_id"], r["occurrence"] = key_parts(r["traj_id"])
        for name in ("survivor", "matched"):
            if r[name] is not None:
                r[name] = key_parts(r[name])[0]
    rows.sort(key=lambda r: (r["traj_id"], r["occurrence"]))
    reasons = [r["reason"] for r in rows]
    counts = {
        "exact_removed": reasons.count("exact_duplicate"),
        "near_removed": reasons.count("near_duplicate"),
        "decontaminated_near": reasons.count("decontaminated_near"),
        "decontaminated_ngram": reasons.count("decontaminated_ngram"),
        "clusters": len(cluster_ids),
        "example_clusters": [cid for _, cid in sorted(largest)[:3]],
    }
    return pa.Table.from_pylist(rows, schema=REMOVED_SCHEMA), counts


def _components(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """The connected component of each of `n` nodes (a label per component) of the undirected edges a[i]–b[i]."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(a), np.int8), (a, b)), shape=(n, n)).tocsr()
    return connected_components(graph, directed=False)[1].astype(np.int64)


def removed_rows(edges: pa.Table, settings: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
    """Removed trajectories from all the edges of a run in one table: decontamination first (`settings` holds
    the n-gram thresholds ``ngram_overlap``, ``ngram_min_shared`` and ``near_specific_share``), then clusters
    and the survivor rule. The dedup stage computes the same in parts: the verdicts per partition of
    evaluation records, then the clusters."""
    contaminated = contaminated_of(decontam_verdicts(of_kinds(edges, DECONTAM_KINDS), settings))
    table, counts = cluster_removals(edges, contaminated)
    return table.to_pylist(), counts
