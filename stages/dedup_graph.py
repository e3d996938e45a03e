"""The dedup graph: keyed rows of each trajectory, verified edges of one bucket of rows, then removals.

Pure functions over Arrow tables (no files, no executor), used by the dedup stage
(`pipeline.dedup_stage`): `bucket_edges` in each reduce task, `removed_rows` in the one clusters task
(decontamination first, then union-find clusters and the survivor rule).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.decontam import (
    ROLE_REFERENCE,
    ROLE_TRAIN,
    exact_group_edges,
    near_is_contamination,
    ngram_group_pairs,
    ngram_verdicts,
)
from stages.dedup import (
    Signer,
    UnionFind,
    band_group_edges,
    band_keys,
    cluster_id,
    exact_content,
    exact_key,
    ngram_keys,
    normalize_text,
    survivor_rank,
    text_word_hashes_many,
    turn_texts,
)

# Row kinds of the bucket files (key rows of the dedup map).
KIND_EXACT, KIND_BAND, KIND_NGRAM = 0, 1, 2
# Edge kinds of the n-gram measure: specific n-grams of an evaluation record (a, count) and those of them a
# training trajectory holds (a = training id, b = evaluation id, count); summed over the buckets.
KIND_TOTAL, KIND_SHARED = "decontam_total", "decontam_shared"


BUCKET_SCHEMA = pa.schema(
    [
        ("kind", pa.int8()),
        ("band", pa.int16()),
        ("key", pa.uint64()),
        ("key2", pa.uint64()),
        ("traj_id", pa.string()),
        ("role", pa.int8()),
        ("turns", pa.int32()),
        ("text_len", pa.int64()),
        ("sig", pa.binary()),
    ]
)
EDGE_SCHEMA = pa.schema(
    [("kind", pa.string()), ("a", pa.string()), ("b", pa.string()), ("jaccard", pa.float32()),
     ("a_turns", pa.int32()), ("a_len", pa.int64()), ("b_turns", pa.int32()), ("b_len", pa.int64()),
     ("count", pa.int64())]
)


class BucketRows:
    """Bucket rows of many trajectories, gathered column by column and built into one table."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {name: [] for name in BUCKET_SCHEMA.names}
        self.count = 0

    def put(self, kind: int, band: np.ndarray, key: np.ndarray, key2: np.ndarray, traj_id: str, role: int,
            turns: int, text_len: int, sig: bytes | None) -> None:
        n = len(key)
        cols = self.cols
        cols["kind"].append(np.full(n, kind, np.int8))
        cols["band"].append(band.astype(np.int16))
        cols["key"].append(key.astype(np.uint64))
        cols["key2"].append(key2.astype(np.uint64))
        cols["traj_id"] += [traj_id] * n
        cols["role"].append(np.full(n, role, np.int8))
        cols["turns"].append(np.full(n, turns, np.int32))
        cols["text_len"].append(np.full(n, text_len, np.int64))
        cols["sig"] += [sig] * n
        self.count += n

    def table(self) -> pa.Table:
        arrays = []
        for name in BUCKET_SCHEMA.names:
            values = self.cols[name]
            if name not in ("traj_id", "sig"):
                values = np.concatenate(values) if values else []
            arrays.append(pa.array(values, type=BUCKET_SCHEMA.field(name).type))
        return pa.Table.from_arrays(arrays, schema=BUCKET_SCHEMA)


def add_trajectory_rows(out: BucketRows, items: list[tuple[str, int, dict]], signer: Signer,
                        settings: dict[str, Any]) -> None:
    """The bucket rows of trajectories ``(traj_id, role, row)``, in their order: each one's exact key (run
    trajectories only), band keys and n-gram keys. Signatures and band keys of all of them are computed together.
    """
    prepared = []
    for traj_id, role, row in items:
        turns = row.get("turns") or []
        norm = [normalize_text(t) for t in turn_texts(turns)]
        text_len, key = 0, None
        if role != ROLE_REFERENCE:
            content = exact_content(row.get("domain") or "", row.get("system") or {}, turns, norm)
            text_len, key = len(content), exact_key(content)
        prepared.append((traj_id, role, len(turns), text_len, key, norm))
    word_hashes_of = text_word_hashes_many([p[5] for p in prepared], normalized=True)  # all items' words at once
    prepared = [(*p[:5], h) for p, h in zip(prepared, word_hashes_of, strict=True)]
    signed = [i for i, p in enumerate(prepared) if len(p[5])]
    sigs = signer.signatures([prepared[i][5] for i in signed])
    keys = band_keys(sigs, signer.bands, signer.rows) if signed else None
    row_of = {i: n for n, i in enumerate(signed)}
    bands = np.arange(signer.bands)
    for i, (traj_id, role, n_turns, text_len, key, hashes) in enumerate(prepared):
        if key is not None:
            out.put(KIND_EXACT, np.zeros(1), np.array([key[0]], np.uint64), np.array([key[1]], np.uint64), traj_id,
                    role, n_turns, text_len, None)
        if i in row_of:
            n = row_of[i]
            out.put(KIND_BAND, bands, keys[n], np.zeros(signer.bands), traj_id, role, n_turns, text_len,
                    sigs[n].tobytes())
        if settings["decontam"]:
            grams = ngram_keys(hashes, settings["ngram"])
            out.put(KIND_NGRAM, np.zeros(len(grams)), grams[:, 0], grams[:, 1], traj_id, role, 0, 0, None)


def bucket_edges(table: pa.Table, settings: dict[str, Any]) -> list[tuple]:
    """Edges ``(kind, a, b, value)`` of one bucket's rows, sorted and without repeats.

    ``value`` is the Jaccard estimate of a dedup or ``decontam_near`` edge and the n-gram count of a
    `KIND_TOTAL` / `KIND_SHARED` row. An n-gram group is specific when it has at most
    ``settings["ngram_limit"]`` members (set on the driver once the number of trajectories is known).
    """
    if not table.num_rows:
        return []
    kind = table.column("kind").to_numpy()
    band = table.column("band").to_numpy()
    key = table.column("key").to_numpy()
    key2 = table.column("key2").to_numpy()
    order = np.lexsort((key2, key, band, kind))
    k, bd, k1, k2 = kind[order], band[order], key[order], key2[order]
    change = (k[1:] != k[:-1]) | (bd[1:] != bd[:-1]) | (k1[1:] != k1[:-1]) | (k2[1:] != k2[:-1])
    starts = np.flatnonzero(np.r_[True, change])
    ends = np.r_[starts[1:], len(order)]
    sizes = ends - starts
    role = table.column("role").to_numpy()[order]
    is_ngram = k[starts] == KIND_NGRAM
    edges: set[tuple] = set()
    pair_groups = np.zeros(len(starts), dtype=bool)
    if is_ngram.any():
        specific = is_ngram & (sizes <= int(settings.get("ngram_limit", 0)))
        # Every specific n-gram of an evaluation record counts towards its total, shared or not.
        counted = np.repeat(specific, sizes) & (role != ROLE_TRAIN)
        if counted.any():
            ids = pc.value_counts(table.column("traj_id").take(pa.array(order[counted])))
            edges.update((KIND_TOTAL, v["values"], "", int(v["counts"])) for v in ids.to_pylist())
        trains = np.add.reduceat((role == ROLE_TRAIN).astype(np.int64), starts)
        pair_groups = specific & (trains > 0) & (trains < sizes)
    big = (sizes > 1) & (~is_ngram | pair_groups)
    groups = [(int(s), int(e)) for s, e in zip(starts[big], ends[big])]
    if not groups:
        return sorted(edges)
    # One gather per column for all candidate groups (per-group takes on chunked columns dominated the stage).
    sel = np.concatenate([order[s:e] for s, e in groups])
    all_ids = table.column("traj_id").take(pa.array(sel)).to_pylist()
    band_rows = np.concatenate([order[s:e] for s, e in groups if k[s] == KIND_BAND] or [np.zeros(0, np.int64)])
    sig_at = {}
    if len(band_rows):
        raw_sigs = table.column("sig").take(pa.array(band_rows)).to_pylist()
        sig_at = dict(zip(band_rows.tolist(), raw_sigs))
    shared: dict[tuple[str, str], int] = {}
    offset = 0
    for s, e in groups:
        ids = all_ids[offset : offset + (e - s)]
        rows = order[s:e]
        offset += e - s
        roles = role[s:e].tolist()
        first = {}
        for i, t in enumerate(ids):
            first.setdefault(t, i)  # a traj_id seen twice (the same id in two inputs) is one node
        if len(first) < 2:
            continue
        pick = list(first.values())
        ids, roles = [ids[i] for i in pick], [roles[i] for i in pick]
        group_kind = int(k[s])
        if group_kind == KIND_EXACT:
            edges.update(exact_group_edges(ids, roles, settings["exact"]))
        elif group_kind == KIND_BAND:
            sigs = np.stack([np.frombuffer(sig_at[int(rows[i])], dtype=np.uint32) for i in pick])
            edges.update(band_group_edges(ids, roles, sigs, settings["threshold"], settings["near"]))
        else:
            for pair in ngram_group_pairs(ids, roles):
                shared[pair] = shared.get(pair, 0) + 1
    edges.update((KIND_SHARED, t, e, n) for (t, e), n in shared.items())
    return sorted(edges)


def node_sizes(table: pa.Table) -> dict[str, tuple[int, int]]:
    mask = pc.not_equal(table.column("kind"), pa.scalar(KIND_NGRAM, pa.int8()))
    sub = table.filter(mask).select(["traj_id", "turns", "text_len"])
    return {t: (n, ln) for t, n, ln in zip(*(sub.column(c).to_pylist() for c in ("traj_id", "turns", "text_len")))}


def removed_rows(edges: pa.Table, settings: dict[str, Any] | None = None) -> tuple[list[dict], dict[str, Any]]:
    """Removed trajectories from all edges: decontamination first, then clusters and the survivor rule.

    `settings` holds the n-gram thresholds (``ngram_overlap``, ``ngram_min_shared``); without them no
    trajectory is removed for shared n-grams.
    """
    near: dict[str, tuple[str, float]] = {}  # train id → (evaluation id, Jaccard) of its closest record
    totals: dict[str, int] = {}
    shared: dict[tuple[str, str], int] = {}
    dedup_edges = []
    sizes: dict[str, tuple[int, int]] = {}
    cols = ("kind", "a", "b", "jaccard", "a_turns", "a_len", "b_turns", "b_len", "count")
    counts_col = edges.column("count").to_pylist() if "count" in edges.column_names else [0] * edges.num_rows
    for kind, a, b, jac, at, al, bt, bl, n in zip(*(edges.column(c).to_pylist() for c in cols[:-1]), counts_col):
        if kind == KIND_TOTAL:
            totals[a] = totals.get(a, 0) + n
        elif kind == KIND_SHARED:
            shared[(a, b)] = shared.get((a, b), 0) + n
        elif kind.startswith("decontam"):
            old = near.get(a)
            if old is None or (-jac, b) < (-old[1], old[0]):  # the closest record, then the smallest id
                near[a] = (b, jac)
        else:
            dedup_edges.append((kind, a, b))
            sizes[a], sizes[b] = (at, al), (bt, bl)
    contaminated: dict[str, tuple[str, str, float]] = {}
    if settings:
        by_ngram = ngram_verdicts(totals, shared, settings["ngram_overlap"], settings["ngram_min_shared"])
        for t, (w, j) in near.items():
            if near_is_contamination(totals.get(w, 0), shared.get((t, w), 0), settings):
                contaminated[t] = ("decontaminated_near", w, j)
        for t, (share, w, _) in by_ngram.items():
            contaminated.setdefault(t, ("decontaminated_ngram", w, share))
    else:
        contaminated = {t: ("decontaminated_near", w, j) for t, (w, j) in near.items()}
    rows = [{"traj_id": t, "reason": reason, "cluster_id": cluster_id([w]), "survivor": w, "matched": w,
             "overlap": round(float(figure), 4)} for t, (reason, w, figure) in contaminated.items()]
    every, exact = UnionFind(), UnionFind()
    for kind, a, b in dedup_edges:
        if a in contaminated or b in contaminated:
            continue
        every.union(a, b)
        if kind == "exact":
            exact.union(a, b)

    def rank(n: str) -> tuple:
        return survivor_rank(n, *sizes[n])

    clusters = every.groups()
    for members in clusters:
        survivor = min(members, key=rank)
        cid = cluster_id(members)
        # The first of each exact class (same normalized content) stands for it; the others are exact copies.
        firsts: dict[str, str] = {}
        for n in sorted(members, key=rank):
            firsts.setdefault(exact.find(n), n)
        for n in members:
            if n != survivor:
                reason = "exact_duplicate" if firsts[exact.find(n)] != n else "near_duplicate"
                rows.append({"traj_id": n, "reason": reason, "cluster_id": cid, "survivor": survivor, "matched": None,
                             "overlap": None})
    rows.sort(key=lambda r: r["traj_id"])
    reasons = [r["reason"] for r in rows]
    largest = sorted(clusters, key=lambda m: (-len(m), cluster_id(m)))[:3]
    counts = {
        "exact_removed": reasons.count("exact_duplicate"),
        "near_removed": reasons.count("near_duplicate"),
        "decontaminated_near": reasons.count("decontaminated_near"),
        "decontaminated_ngram": reasons.count("decontaminated_ngram"),
        "clusters": len(clusters),
        "example_clusters": [cluster_id(m) for m in largest],
    }
    return rows, counts


def edge_table(edges: list[tuple], sizes: dict[str, tuple[int, int]]) -> pa.Table:
    """The edge file rows of `bucket_edges`' edges, with the (turns, text length) of both ends from `sizes`."""
    counted = [kind in (KIND_TOTAL, KIND_SHARED) for kind, *_ in edges]
    a_sizes = [sizes.get(e[1], (0, 0)) for e in edges]
    b_sizes = [sizes.get(e[2], (0, 0)) for e in edges]
    columns = {
        "kind": [e[0] for e in edges], "a": [e[1] for e in edges], "b": [e[2] for e in edges],
        "jaccard": [0.0 if c else e[3] for e, c in zip(edges, counted)],
        "a_turns": [x[0] for x in a_sizes], "a_len": [x[1] for x in a_sizes],
        "b_turns": [x[0] for x in b_sizes], "b_len": [x[1] for x in b_sizes],
        "count": [int(e[3]) if c else 0 for e, c in zip(edges, counted)],
    }
    return pa.Table.from_arrays([pa.array(columns[f.name], type=f.type) for f in EDGE_SCHEMA], schema=EDGE_SCHEMA)
