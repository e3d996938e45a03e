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
from stages.dedup_graph import KIND_SHARED, KIND_TOTAL, columns_table

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
REMOVED_SCHEMA = pa.schema(
    [("traj_id", pa.string()), ("reason", pa.string()), ("cluster_id", pa.string()), ("survivor", pa.string()),
     ("matched", pa.string()), ("overlap", pa.float64())]
)


def evidence_key(edges: pa.Table) -> pa.ChunkedArray:
    """The evaluation record each decontamination row is about: ``a`` of a total, ``b`` of the others."""
    return pc.if_else(pc.equal(edges.column("kind"), KIND_TOTAL), edges.column("a"), edges.column("b"))


def of_kinds(edges: pa.Table, kinds: tuple[str, ...]) -> pa.Table:
    return edges.filter(pc.is_in(edges.column("kind"), pa.array(kinds, pa.string())))


def decontam_verdicts(evidence: pa.Table, settings: dict[str, Any]) -> pa.Table:
    """`VERDICT_SCHEMA` rows from the decontamination rows of some evaluation records (all rows of each:
    partial totals and shared counts are summed here): every near copy, with whether it also holds
    ``near_specific_share`` of the record's specific n-grams (`near_is_contamination`), and every training
    trajectory that holds ``ngram_overlap`` of a record's specific n-grams, at least ``ngram_min_shared``.
    """
    kind = evidence.column("kind")
    totals = (evidence.filter(pc.equal(kind, KIND_TOTAL)).group_by("a").aggregate([("count", "sum")])
              .rename_columns(["b", "total"]))
    shared = (evidence.filter(pc.equal(kind, KIND_SHARED)).group_by(["a", "b"]).aggregate([("count", "sum")])
              .rename_columns(["a", "b", "shared"]))
    shared = shared.join(totals, "b", join_type="left outer")
    n = shared.column("shared").to_numpy().astype(np.int64)
    total = shared.column("total").fill_null(0).to_numpy().astype(np.int64)
    share = np.divide(n, total, out=np.zeros(len(n)), where=total > 0)
    hit = (total > 0) & (n >= int(settings["ngram_min_shared"])) & (share >= float(settings["ngram_overlap"]))
    ngram = {"kind": pa.array(["ngram"] * int(hit.sum()), pa.string()),
             "traj_id": shared.column("a").filter(pa.array(hit)), "record": shared.column("b").filter(pa.array(hit)),
             "figure": share[hit], "passes": np.ones(int(hit.sum()), bool)}
    near = evidence.filter(pc.equal(kind, "decontam_near")).select(["a", "b", "jaccard"])
    near = near.join(shared.select(["a", "b", "shared"]), ["a", "b"], join_type="left outer")
    near = near.join(totals, "b", join_type="left outer")
    n = near.column("shared").fill_null(0).to_numpy().astype(np.int64)
    total = near.column("total").fill_null(0).to_numpy().astype(np.int64)
    passes = [near_is_contamination(t, s, settings) for t, s in zip(total.tolist(), n.tolist())]
    near_rows = {"kind": pa.array(["near"] * near.num_rows, pa.string()), "traj_id": near.column("a"),
                 "record": near.column("b"), "figure": near.column("jaccard").cast(pa.float64()), "passes": passes}
    return pa.concat_tables([columns_table(_chunks(near_rows), VERDICT_SCHEMA), columns_table(_chunks(ngram), VERDICT_SCHEMA)])


def _chunks(columns: dict[str, Any]) -> dict[str, Any]:
    return {k: v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v for k, v in columns.items()}


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
    """`REMOVED_SCHEMA` rows (sorted by traj_id) and the counts: the decontaminated trajectories, then the
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
    _, at = np.unique(every[by_rank], return_index=True)
    survivor[every[by_rank[at]]] = by_rank[at]
    _, at = np.unique(exact[by_rank], return_index=True)
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
    rows.sort(key=lambda r: r["traj_id"])
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
