"""The dedup graph: keyed rows of each trajectory, verified edges of one bucket of rows, then removals.

Pure functions over Arrow tables (no files, no executor), used by the dedup stage
(`pipeline.dedup_stage`): `bucket_evidence` in each reduce task (`bucket_edges`, every pair counted, is the
whole computation it stands for), `removed_rows` in the one clusters task
(decontamination first, then union-find clusters and the survivor rule).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.decontam import (
    ROLE_REFERENCE,
    ROLE_TRAIN,
    exact_group_edges,
)
from stages.dedup import (
    Signer,
    band_group_edges,
    band_keys,
    exact_content,
    exact_key,
    ngram_keys_many,
    normalize_text,
    system_texts,
    text_word_hashes_many,
    turn_texts,
)
from stages.dedup_edges import EDGE_SCHEMA, KIND_SHARED, KIND_TOTAL, columns_table, edge_table, total_table
from stages.distinct import distinct_first
from stages.gram_filter import GramFilter

# Row kinds of the bucket files (key rows of the dedup map).
KIND_EXACT, KIND_BAND, KIND_NGRAM = 0, 1, 2


BUCKET_SCHEMA = pa.schema(
    [("kind", pa.int8()), ("band", pa.int16()), ("key", pa.uint64()), ("key2", pa.uint64()), ("traj_id", pa.string()),
     ("role", pa.int8()), ("turns", pa.int32()), ("text_len", pa.int64()), ("sig", pa.binary())]
)
BUCKET_ROWS_SCHEMA = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in ("traj_id", "sig")
                                else f for f in BUCKET_SCHEMA])  # a map's rows (`BucketRows`): id and signature encoded
# The bucket files: the id encoded (a trajectory's n-gram rows repeat it); a signature is in a bucket about once.
BUCKET_FILE_SCHEMA = BUCKET_ROWS_SCHEMA.set(BUCKET_SCHEMA.get_field_index("sig"), BUCKET_SCHEMA.field("sig"))


class BucketRows:
    """Bucket rows of many trajectories, gathered column by column and built into one table.

    The key columns are gathered as arrays; the columns that hold one value per `put` (kind, role, turns,
    length, and the trajectory id and signature, as indices into their distinct values) are gathered as one
    number per `put` and repeated once, in `table`: a trajectory adds three `put`s, so building small arrays
    per call cost more than the repeat. The id and signature stay dictionary-encoded (`BUCKET_ROWS_SCHEMA`).
    """

    _PER_PUT = ("kind", "role", "turns", "text_len", "traj_id", "sig")

    def __init__(self) -> None:
        self.cols: dict[str, list] = {name: [] for name in ("band", "key", "key2")}
        self.scalars: dict[str, list[int]] = {name: [] for name in self._PER_PUT}
        self.sizes: list[int] = []
        self.values: dict[str, list] = {"traj_id": [], "sig": []}
        self.count = 0

    def put(self, kind: int, band: np.ndarray, key: np.ndarray, key2: np.ndarray, traj_id: str, role: int,
            turns: int, text_len: int, sig: bytes | None) -> None:
        n = len(key)
        cols, scalars = self.cols, self.scalars
        cols["band"].append(band)
        cols["key"].append(key)
        cols["key2"].append(key2)
        scalars["kind"].append(kind)
        scalars["role"].append(role)
        scalars["turns"].append(turns)
        scalars["text_len"].append(text_len)
        for name, value in (("traj_id", traj_id), ("sig", sig)):
            values = self.values[name]
            if value is None:
                scalars[name].append(-1)
                continue
            if not values or values[-1] != value:
                values.append(value)
            scalars[name].append(len(values) - 1)
        self.sizes.append(n)
        self.count += n

    def table(self) -> pa.Table:
        arrays, sizes = [], np.asarray(self.sizes, dtype=np.int64)
        for field in BUCKET_ROWS_SCHEMA:
            # the id columns hold indices into their distinct values; the others the schema's own numbers
            dtype = np.int32 if field.name in self.values else field.type.to_pandas_dtype()
            if field.name in self.scalars:
                values = np.repeat(np.asarray(self.scalars[field.name], dtype=dtype), sizes)
            else:
                parts = self.cols[field.name]
                values = np.concatenate([p.astype(dtype, copy=False) for p in parts]) if parts else np.zeros(0, dtype)
            if field.name in self.values:
                indices = pa.array(values, mask=values < 0, type=pa.int32())
                dictionary = pa.array(self.values[field.name], type=field.type.value_type)
                arrays.append(pa.DictionaryArray.from_arrays(indices, dictionary))
            else:
                arrays.append(pa.array(values, type=field.type))
        return pa.Table.from_arrays(arrays, schema=BUCKET_ROWS_SCHEMA)


def _normalized_together(normalize: Callable[[str], str], texts: list[str]) -> Callable[[str], str]:
    """`normalize` of the `texts`, computed together where `normalize` can (a `stages.dedup.NormalizeMemo`'s
    ``many``), as a lookup; `normalize` itself otherwise."""
    many = getattr(normalize, "many", None)
    return dict(zip(texts, many(texts), strict=True)).__getitem__ if many is not None else normalize


def _normalized_turns(row: dict, normalize: Callable[[str], str] = normalize_text) -> list[str]:
    """The turn texts the keys of a trajectory row are taken from, normalized."""
    return [normalize(t) for t in turn_texts(row.get("turns") or [])]


def gram_keys(rows: list[dict], n: int, normalize: Callable[[str], str] = normalize_text) -> list[np.ndarray]:
    """Per trajectory row, the first halves of its distinct n-gram keys: those of the n-gram rows that
    `add_trajectory_rows` gives it (what `stages.gram_filter` is built from). `normalize`: as in
    `add_trajectory_rows`."""
    normalize = _normalized_together(normalize, [t for row in rows for t in turn_texts(row.get("turns") or [])])
    texts = [_normalized_turns(row, normalize) for row in rows]
    return [keys[:, 0] for keys in ngram_keys_many(text_word_hashes_many(texts, normalized=True), n)]


def add_trajectory_rows(out: BucketRows, items: list[tuple[str, int, dict]], signer: Signer,
                        settings: dict[str, Any], grams: GramFilter | None = None,
                        normalize: Callable[[str], str] = normalize_text) -> None:
    """The bucket rows of trajectories ``(traj_id, role, row)``, in their order: each one's exact key (run
    trajectories only), band keys and n-gram keys. Signatures and band keys of all of them are computed together.

    With `grams` (the keys of every evaluation record), a training trajectory's n-gram rows are only those
    whose key the filter may hold: the others could only form groups without an evaluation member, which no
    decontamination check reads (`stages.gram_filter`). `normalize`: `normalize_text` or a function equal to
    it (the map task's `stages.dedup.NormalizeMemo`).
    """
    normalize = _normalized_together(normalize, [
        t for _, role, row in items for t in (
            *turn_texts(row.get("turns") or []),
            *(system_texts(row.get("system") or {}) if role != ROLE_REFERENCE else ()))])
    prepared = []
    for traj_id, role, row in items:
        turns = row.get("turns") or []
        norm = _normalized_turns(row, normalize)
        text_len, key = 0, None
        if role != ROLE_REFERENCE:
            content = exact_content(row.get("domain") or "", row.get("system") or {}, turns, norm, normalize)
            text_len, key = len(content), exact_key(content)
        prepared.append((traj_id, role, len(turns), text_len, key, norm))
    word_hashes_of = text_word_hashes_many([p[5] for p in prepared], normalized=True)  # all items' words at once
    prepared = [(*p[:5], h) for p, h in zip(prepared, word_hashes_of, strict=True)]
    signed = [i for i, p in enumerate(prepared) if len(p[5])]
    sigs = signer.signatures([prepared[i][5] for i in signed])
    keys = band_keys(sigs, signer.bands, signer.rows) if signed else None
    row_of = {i: n for n, i in enumerate(signed)}
    bands = np.arange(signer.bands)
    # a training trajectory's n-gram rows: only the keys the filter may hold
    filtered = [grams is not None and p[1] == ROLE_TRAIN for p in prepared]
    grams_of = ngram_keys_many(word_hashes_of, settings["ngram"], grams, filtered) if settings["decontam"] else None
    for i, (traj_id, role, n_turns, text_len, key, _) in enumerate(prepared):
        if key is not None:
            out.put(KIND_EXACT, np.zeros(1), np.array([key[0]], np.uint64), np.array([key[1]], np.uint64), traj_id,
                    role, n_turns, text_len, None)
        if i in row_of:
            n = row_of[i]
            out.put(KIND_BAND, bands, keys[n], np.zeros(signer.bands), traj_id, role, n_turns, text_len,
                    sigs[n].tobytes())
        if settings["decontam"]:
            found = grams_of[i]
            out.put(KIND_NGRAM, np.zeros(len(found)), found[:, 0], found[:, 1], traj_id, role, 0, 0, None)


def bucket_edges(table: pa.Table, settings: dict[str, Any]) -> pa.Table:
    """The edges of one bucket's rows (`EDGE_SCHEMA`, without repeats; the sizes of both ends are set on the
    dedup edges ``exact`` and ``near``).

    ``jaccard`` holds the Jaccard estimate of a ``near`` or ``decontam_near`` edge and ``count`` the n-gram
    count of a `KIND_TOTAL` / `KIND_SHARED` row. An n-gram group is specific when it has at most
    ``settings["ngram_limit"]`` members (set on the driver once the number of trajectories is known).
    Every (training, evaluation) pair of a specific group gets its `KIND_SHARED` count here: the whole
    computation, which the dedup stage replaces by `bucket_evidence` and candidate pairs.
    """
    return _bucket_edges(table, settings, None)


def bucket_evidence(table: pa.Table, settings: dict[str, Any]) -> tuple[pa.Table, pa.Table, pa.Table]:
    """The edges of `bucket_edges` without the `KIND_SHARED` counts, and instead the specific n-gram groups
    that hold both kinds of member: their members (`GROUP_SCHEMA`) and one row per (group, evaluation
    member) (`GRAM_SCHEMA`), from which `stages.decontam_select` chooses the pairs worth counting."""
    groups: list[pa.Table] = []
    edges = _bucket_edges(table, settings, groups)
    return (edges, *groups) if groups else (edges, GROUP_SCHEMA.empty_table(), GRAM_SCHEMA.empty_table())


def _bucket_edges(table: pa.Table, settings: dict[str, Any], groups: list[pa.Table] | None) -> pa.Table:
    if not table.num_rows:
        return EDGE_SCHEMA.empty_table()
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
    parts = []
    totals = None
    if is_ngram.any():
        specific = is_ngram & (sizes <= int(settings.get("ngram_limit", 0)))
        # Every specific n-gram of an evaluation record counts towards its total, shared or not.
        counted = np.repeat(specific, sizes) & (role != ROLE_TRAIN)
        if counted.any():
            totals = pc.value_counts(table.column("traj_id").take(pa.array(order[counted])))
        trains = np.add.reduceat((role == ROLE_TRAIN).astype(np.int64), starts)
        pair_groups = specific & (trains > 0) & (trains < sizes)
        if pair_groups.any() and groups is not None:
            groups.extend(_pair_groups(table, order, role, starts[pair_groups], sizes[pair_groups], k1, k2))
        elif pair_groups.any():
            parts.append(_shared_pairs(table, order, role, starts[pair_groups], sizes[pair_groups]))
    big = (sizes > 1) & ~is_ngram
    dedup_groups = [(int(s), int(e)) for s, e in zip(starts[big], ends[big])]
    if dedup_groups:
        _dedup_group_edges(table, order, k, role, dedup_groups, settings, edges)
    rows = sorted(edges)
    ends = {x for e in rows if e[0] in ("exact", "near") for x in e[1:3]}
    sizes_of = node_sizes(table, ends) if ends else {}
    if totals is None:
        parts.insert(0, edge_table(rows, sizes_of))
    else:  # the totals (most of a bucket's edges) as columns, in their place in the sorted rows (by kind, then id)
        cut = bisect.bisect_left(rows, (KIND_TOTAL,))
        parts[:0] = [edge_table(rows[:cut], sizes_of), total_table(totals, sizes_of), edge_table(rows[cut:], sizes_of)]
    return pa.concat_tables(parts)


def _dedup_group_edges(table: pa.Table, order: np.ndarray, k: np.ndarray, role: np.ndarray,
                       groups: list[tuple[int, int]], settings: dict[str, Any], edges: set[tuple]) -> None:
    """The edges of exact-key and LSH band groups (`order` positions ``[s, e)``), added to `edges`."""
    # One gather per column for all candidate groups (per-group takes on chunked columns dominated the stage).
    sel = np.concatenate([order[s:e] for s, e in groups])
    all_ids = table.column("traj_id").take(pa.array(sel)).to_pylist()
    band_rows = np.concatenate([order[s:e] for s, e in groups if k[s] == KIND_BAND] or [np.zeros(0, np.int64)])
    sig_at = {}
    if len(band_rows):
        raw_sigs = table.column("sig").take(pa.array(band_rows)).to_pylist()
        sig_at = dict(zip(band_rows.tolist(), raw_sigs))
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
        if int(k[s]) == KIND_EXACT:
            edges.update(exact_group_edges(ids, roles, settings["exact"]))
        else:
            sigs = np.stack([np.frombuffer(sig_at[int(rows[i])], dtype=np.uint32) for i in pick])
            edges.update(band_group_edges(ids, roles, sigs, settings["threshold"], settings["near"]))


# The specific n-gram groups with both kinds of member, as `bucket_evidence` gives them: each group's distinct
# members (``group`` numbers the groups of one bucket), and per (group, evaluation member) the group's count of
# training members and its n-gram key (the order in which a record's groups are chosen: fewest training members,
# then the key).
GROUP_SCHEMA = pa.schema([("group", pa.int32()), ("traj_id", pa.string()), ("train", pa.bool_())])
GRAM_SCHEMA = pa.schema([("record", pa.string()), ("group", pa.int32()), ("trains", pa.int32()),
                         ("key", pa.uint64()), ("key2", pa.uint64())])


def _group_members(table: pa.Table, order: np.ndarray, role: np.ndarray, starts: np.ndarray, sizes: np.ndarray
                   ) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct members of groups (`order` positions ``[start, start + size)``), group by group: the id
    dictionary, and per member its group number, id code and role. A trajectory id seen twice in a group (the
    same id in two inputs) is one member, with its first role."""
    encoded = table.column("traj_id").combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n_codes = len(encoded.dictionary)
    positions = np.repeat(starts - np.r_[0, np.cumsum(sizes)[:-1]], sizes) + np.arange(int(sizes.sum()))
    group = np.repeat(np.arange(len(starts)), sizes)
    member = codes[order[positions]]
    _, first = distinct_first(group * n_codes + member)
    first.sort()
    return encoded.dictionary, group[first], member[first], role[positions[first]]


def _pair_groups(table: pa.Table, order: np.ndarray, role: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                 k1: np.ndarray, k2: np.ndarray) -> list[pa.Table]:
    """`GROUP_SCHEMA` and `GRAM_SCHEMA` rows of specific groups with both kinds of member."""
    names, group, member, roles = _group_members(table, order, role, starts, sizes)
    is_train = roles == ROLE_TRAIN
    ids = names.take(pa.array(member))
    members = pa.Table.from_arrays([pa.array(group, pa.int32()), ids, pa.array(is_train)], schema=GROUP_SCHEMA)
    # the distinct training members of each group (``trains`` counts rows, which may repeat an id)
    n_train = np.bincount(group[is_train], minlength=len(starts))
    g = group[~is_train]
    grams = pa.Table.from_arrays([ids.filter(pa.array(~is_train)), pa.array(g, pa.int32()),
                                  pa.array(n_train[g], pa.int32()), pa.array(k1[starts[g]], pa.uint64()),
                                  pa.array(k2[starts[g]], pa.uint64())], schema=GRAM_SCHEMA)
    return [members, grams]


_PAIRS_PER_STEP = 1 << 22  # (training, evaluation) pairs expanded at once before they are counted


def _shared_pairs(table: pa.Table, order: np.ndarray, role: np.ndarray, starts: np.ndarray,
                  sizes: np.ndarray) -> pa.Table:
    """`KIND_SHARED` rows of specific n-gram groups (`order` positions ``[start, start + size)``): for every
    (training, evaluation) pair of distinct members, the number of the groups that hold both.

    The pairs of a group are the product of its training and its evaluation members; they are expanded and
    counted with numpy, a bounded number at a time (`ngram_group_pairs` is the rule, one group at a time).
    """
    names, group, member, roles = _group_members(table, order, role, starts, sizes)
    n_codes = len(names)
    keys, counts = pair_counts(group, member, roles == ROLE_TRAIN, n_codes)
    if not len(keys):
        return EDGE_SCHEMA.empty_table()
    train, evaluation = np.divmod(keys, n_codes)
    n = len(keys)
    columns = {
        "kind": pa.array(np.full(n, KIND_SHARED, dtype=object), pa.string()),
        "a": names.take(pa.array(train)), "b": names.take(pa.array(evaluation)),
        "jaccard": np.zeros(n, np.float32), "a_turns": np.zeros(n, np.int32), "a_len": np.zeros(n, np.int64),
        "b_turns": np.zeros(n, np.int32), "b_len": np.zeros(n, np.int64), "count": counts,
    }
    return columns_table(columns, EDGE_SCHEMA)


def pair_counts(group: np.ndarray, member: np.ndarray, is_train: np.ndarray, n_codes: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """For distinct members (`group` numbers, id codes below `n_codes`, kind), every (training, evaluation)
    pair that shares a group, as ``train * n_codes + evaluation`` (sorted) and the number of groups it shares."""
    if not len(group):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    by_group = np.argsort(group, kind="stable")
    group, member, is_train = group[by_group], member[by_group], is_train[by_group]
    n_groups = int(group.max()) + 1
    t_group, t_member = group[is_train], member[is_train]
    e_member = member[~is_train]
    e_count = np.bincount(group[~is_train], minlength=n_groups)
    e_start = np.r_[0, np.cumsum(e_count)[:-1]]
    reps = e_count[t_group]  # each training member pairs with every evaluation member of its group
    keys, counts = [], []
    bounds = np.searchsorted(np.cumsum(reps), np.arange(_PAIRS_PER_STEP, int(reps.sum()), _PAIRS_PER_STEP))
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(reps)]):
        r = reps[lo:hi]
        n = int(r.sum())
        if not n:
            continue
        t_at = np.repeat(np.arange(lo, hi), r)
        offset = np.arange(n) - np.repeat(np.cumsum(r) - r, r)
        e_at = e_start[t_group[t_at]] + offset
        step_keys, step_counts = np.unique(t_member[t_at] * n_codes + e_member[e_at], return_counts=True)
        keys.append(step_keys)
        counts.append(step_counts)
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys, inverse = np.unique(np.concatenate(keys), return_inverse=True)
    return keys, np.bincount(inverse, weights=np.concatenate(counts)).astype(np.int64)


def node_sizes(table: pa.Table, ids: set[str]) -> dict[str, tuple[int, int]]:
    """(turns, text length) of the trajectories `ids` from their exact-key and band rows."""
    sub = table.select(["kind", "traj_id", "turns", "text_len"])  # the few key rows first, then their ids
    sub = sub.filter(pa.array(sub.column("kind").to_numpy() != KIND_NGRAM))
    sub = sub.filter(pc.is_in(sub.column("traj_id"), pa.array(sorted(ids), pa.string())))
    return {t: (n, ln) for t, n, ln in zip(*(sub.column(c).to_pylist() for c in ("traj_id", "turns", "text_len")))}
