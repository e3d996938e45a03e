"""Which (training, evaluation) pairs decontamination counts: a prefix filter over each record's n-gram groups.

A training trajectory t is contaminated by an evaluation record e's n-grams when it holds m of e's T specific
n-grams, m the least count that passes both of `decontam_verdicts`' thresholds (``ngram_min_shared``, and
``ngram_overlap`` of T). Of those n-grams only the r groups that also have training rows can be held by t; if t
holds m of them, it holds one of any r − m + 1 of them (the prefix filter of set-similarity joins; a group whose
only training row is the record's own id, listed twice, counts in r and is chosen first: a slot wasted, the
bound kept). So every pair that can pass is among the training members of r − m + 1 of e's groups:
`select_groups` takes those with the fewest training members, then by n-gram key, so the choice depends on the
n-grams alone, never on how rows were bucketed. The near copies of a record (``decontam_near``) are candidates as well, since their check needs
their shared count. Only candidate pairs are counted (`CandidateIndex`), over every bucket, so each count is
exact; a pair left out could not have passed. The quadratic part of the evidence (every pair of every specific
group, `stages.dedup_graph.bucket_edges`) is never built.

Pure functions over Arrow tables; the dedup stage (`pipeline.decontam_stage`) runs them per evidence
partition (`select_groups`) and per bucket (`candidate_pairs`, `CandidateIndex`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.dedup_edges import EDGE_SCHEMA, KIND_SHARED, KIND_TOTAL, columns_table
from stages.dedup_graph import pair_counts
from stages.distinct import distinct

# A chosen group of a bucket (its number in that bucket's `GROUP_SCHEMA` rows) and the record that chose it.
SELECTED_SCHEMA = pa.schema([("bucket", pa.int32()), ("group", pa.int32()), ("record", pa.string())])
# A (training, evaluation) pair whose shared count is needed.
CANDIDATE_SCHEMA = pa.schema([("train", pa.string()), ("record", pa.string())])


def least_passing(totals: np.ndarray, settings: dict[str, Any]) -> np.ndarray:
    """Per total T > 0, the least shared count that passes the n-gram verdict: at least ``ngram_min_shared``
    and ``shared / T >= ngram_overlap`` in the verdict's own float arithmetic (T + 1 when none can)."""
    total = np.asarray(totals, dtype=np.int64)
    overlap, min_shared = float(settings["ngram_overlap"]), int(settings["ngram_min_shared"])
    least = np.maximum(min_shared, np.floor(overlap * total).astype(np.int64) - 1)
    for _ in range(4):  # from at most one below the rounded product: a few steps reach the least passing count
        passes = least / np.maximum(total, 1) >= overlap
        least = np.where(passes | (least > total), least, least + 1)
    return np.minimum(least, total + 1)


def select_groups(evidence: pa.Table, grams: pa.Table, settings: dict[str, Any]) -> pa.Table:
    """`SELECTED_SCHEMA` rows: for each evaluation record of one partition, the r − m + 1 of its r groups with
    training members that the prefix filter keeps (fewest training members, then the n-gram key).

    `evidence`: the partition's `KIND_TOTAL` rows (partial totals of every bucket, summed here) and others;
    `grams`: its `GRAM_SCHEMA` rows with a ``bucket`` column.
    """
    if not grams.num_rows:
        return SELECTED_SCHEMA.empty_table()
    is_total = pc.equal(evidence.column("kind"), KIND_TOTAL)
    totals = evidence.filter(is_total).group_by("a").aggregate([("count", "sum")])
    records = grams.column("record").combine_chunks().dictionary_encode()
    code = records.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n = len(records.dictionary)
    total = np.zeros(n, np.int64)
    at = pc.index_in(totals.column("a"), value_set=records.dictionary)
    known = at.is_valid().to_numpy(zero_copy_only=False)  # a record with a total but no group with training members
    total[at.fill_null(0).to_numpy(zero_copy_only=False)[known]] = totals.column("count_sum").to_numpy()[known]
    rows = np.bincount(code, minlength=n)
    need = rows - least_passing(total, settings) + 1  # r − m + 1 (nothing when m > r: no pair can pass)
    order = np.lexsort((grams.column("key2").to_numpy(), grams.column("key").to_numpy(),
                        grams.column("trains").to_numpy(), code))
    ranked = code[order]
    first = np.searchsorted(ranked, np.arange(n))
    rank = np.arange(len(order)) - first[ranked]
    keep = order[rank < need[ranked]]
    keep.sort()
    return columns_table({"bucket": grams.column("bucket").take(pa.array(keep)),
                          "group": grams.column("group").take(pa.array(keep)),
                          "record": records.dictionary.take(pa.array(code[keep]))}, SELECTED_SCHEMA)


def candidate_pairs(groups: pa.Table, selected: pa.Table) -> pa.Table:
    """`CANDIDATE_SCHEMA` rows (distinct): every training member of each selected group of one bucket, with the
    record that selected it. `groups`: the bucket's `GROUP_SCHEMA` rows; `selected`: its `SELECTED_SCHEMA` rows."""
    trains = groups.filter(groups.column("train")).select(["group", "traj_id"])
    joined = trains.join(selected.select(["group", "record"]), keys="group", join_type="inner")
    pairs = pa.table({"train": joined.column("traj_id"), "record": joined.column("record")})
    return distinct_pairs(pairs)


def distinct_pairs(pairs: pa.Table) -> pa.Table:
    """`CANDIDATE_SCHEMA` rows without repeats, sorted (train, record)."""
    if not pairs.num_rows:
        return CANDIDATE_SCHEMA.empty_table()
    unique = pairs.group_by(["train", "record"]).aggregate([])
    return unique.sort_by([("train", "ascending"), ("record", "ascending")]).select(CANDIDATE_SCHEMA.names).cast(
        CANDIDATE_SCHEMA)


class CandidateIndex:
    """The candidate pairs as integer codes over their ids, built once for the groups of many buckets."""

    def __init__(self, candidates: pa.Table) -> None:
        train, record = candidates.column("train").combine_chunks(), candidates.column("record").combine_chunks()
        self.names = pa.concat_arrays([train, record]).unique()
        n = self.n_codes = len(self.names)
        t = pc.index_in(train, value_set=self.names).to_numpy(zero_copy_only=False).astype(np.int64)
        e = pc.index_in(record, value_set=self.names).to_numpy(zero_copy_only=False).astype(np.int64)
        self.wanted = distinct(t * n + e)
        self.train_ok, self.record_ok = np.zeros(n, bool), np.zeros(n, bool)
        self.train_ok[t] = True
        self.record_ok[e] = True

    def shared(self, groups: pa.Table) -> pa.Table:
        """`KIND_SHARED` edge rows of one bucket: for each candidate (training, evaluation) pair, the number of
        the bucket's groups (`GROUP_SCHEMA`) holding both (partial counts, summed over the buckets by
        `decontam_verdicts`)."""
        if not groups.num_rows or not len(self.wanted):
            return EDGE_SCHEMA.empty_table()
        member = pc.index_in(groups.column("traj_id"), value_set=self.names)
        is_train = groups.column("train").to_numpy(zero_copy_only=False)
        valid = member.is_valid().to_numpy(zero_copy_only=False)
        codes = member.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        # only members some candidate names on their side take part; the pairs they make are then filtered
        keep = valid & np.where(is_train, self.train_ok[codes], self.record_ok[codes])
        group = groups.column("group").to_numpy().astype(np.int64)[keep]
        keys, counts = pair_counts(group, codes[keep], is_train[keep], self.n_codes)
        at = np.searchsorted(self.wanted, keys)
        hit = at < len(self.wanted)
        hit[hit] = self.wanted[at[hit]] == keys[hit]
        keys, counts = keys[hit], counts[hit]
        train, record = np.divmod(keys, self.n_codes)
        n = len(keys)
        return columns_table({
            "kind": pa.array(np.full(n, KIND_SHARED, dtype=object), pa.string()),
            "a": self.names.take(pa.array(train)), "b": self.names.take(pa.array(record)),
            "jaccard": np.zeros(n, np.float32), "a_turns": np.zeros(n, np.int32), "a_len": np.zeros(n, np.int64),
            "b_turns": np.zeros(n, np.int32), "b_len": np.zeros(n, np.int64), "count": counts,
        }, EDGE_SCHEMA)
