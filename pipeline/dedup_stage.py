"""The dedup stage: exact and near-duplicate removal and decontamination over the trajectories layer.

Runs after ingest and before the sample stage; its one output, ``dedup/removed.parquet`` (traj_id, reason,
cluster_id, survivor; sorted by traj_id), is what the sample stage drops from every pool.

1. **map** (``dedup-map``, one task per trajectories part, task id = the ingest task id, plus one per
   reference source of ``dedup.decontaminate``): per trajectory an exact key row, one row per LSH band
   (carrying the MinHash signature, so the reduce can verify candidates without another lookup) and, when
   decontamination is active, one row per distinct word n-gram. Rows are hashed by key into B bucket files
   ``_work/dedup/b<NNNNN>/<task_id>.parquet``. B comes from input-derived counts (or ``dedup.buckets``),
   never from the executor, and the result does not depend on B anyway: equal keys always meet.
2. **reduce** (``dedup-reduce``, one task per bucket): rows with equal (kind, band, key) form a group;
   groups become verified edges (stages/dedup.py, stages/decontam.py), written to
   ``_work/dedup/edges/b<NNNNN>.parquet``. An n-gram group is specific when it has at most the common
   limit of members (from the number of trajectories the map saw, set on the driver between the two
   steps); it adds one to its evaluation members' totals and to each (training, evaluation) pair's
   shared count — partial counts, summed on the driver.
3. **clusters** on the driver: union-find over the edge list, then the survivor rule. This holds the
   duplicate pairs in memory — it grows with the number of duplicates (the edges are a spanning forest per
   band group), not with the corpus, which is why it is acceptable on one machine.

Reasons: ``exact_duplicate`` (same normalized content as a kept trajectory of its cluster),
``near_duplicate``, ``decontaminated_near``, ``decontaminated_ngram`` (stages/decontam.py); a
decontamination row also names the evaluation record it ``matched`` and the ``overlap``. Decontaminated
trajectories leave the dedup graph first, so a cluster never mixes eval-pool and training-pool
trajectories.
"""

from __future__ import annotations

import hashlib
import math
import posixpath
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.config import output_config
from pipeline.outputs import AtomicParquetWriter, out_fs, write_json_atomic
from pipeline.stats import Stats, merge_all
from schemas.errors import ConfigError
from stages.decontam import (
    ROLE_REFERENCE,
    ROLE_TRAIN,
    TRAJECTORY_COLUMNS,
    common_limit,
    exact_group_edges,
    is_active,
    is_run_directory,
    iter_references,
    near_is_contamination,
    ngram_group_pairs,
    ngram_verdicts,
    reference_units,
    role_of,
)
from stages.dedup import (
    Signer,
    UnionFind,
    band_group_edges,
    band_keys,
    cluster_id,
    exact_content,
    exact_key,
    lsh_params,
    ngram_keys,
    normalize_text,
    survivor_rank,
    turn_texts,
    word_hashes,
    words_of,
)

KIND_EXACT, KIND_BAND, KIND_NGRAM = 0, 1, 2
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
# matched / overlap: for a decontamination removal, the evaluation record it matched and the overlap figure
# (the share of the record's specific n-grams found, or the estimated Jaccard of a near copy); null otherwise.
REMOVED_SCHEMA = pa.schema(
    [("traj_id", pa.string()), ("reason", pa.string()), ("cluster_id", pa.string()), ("survivor", pa.string()),
     ("matched", pa.string()), ("overlap", pa.float64())]
)
REASONS = ("exact_duplicate", "near_duplicate", "decontaminated_near", "decontaminated_ngram")
# Edge kinds of the n-gram measure: specific n-grams of an evaluation record (a, count) and those of them a
# training trajectory holds (a = training id, b = evaluation id, count); summed over the buckets.
KIND_TOTAL, KIND_SHARED = "decontam_total", "decontam_shared"
ROWS_PER_BUCKET = 2_000_000  # ~100 MB of rows for one reduce task
_FLUSH_ROWS = 65_536
_MAX_PENDING_ROWS = 4 * _FLUSH_ROWS
_CHARS_PER_WORD = 6


def dedup_settings(cfg: dict[str, Any], ingest_stats: Stats) -> dict[str, Any]:
    """Everything the tasks need, resolved once on the driver (JSON-serializable)."""
    d = cfg["dedup"]
    if not 0 < float(d["threshold"]) <= 1:
        raise ConfigError(f"dedup.threshold must be within (0, 1], not {d['threshold']!r}")
    if int(d["shingle"]) < 1 or int(d["ngram"]) < 1 or int(d["num_perm"]) < 1:
        raise ConfigError("dedup.shingle, dedup.ngram and dedup.num_perm must be positive integers")
    try:
        bands, rows = lsh_params(float(d["threshold"]), int(d["num_perm"]), int(d.get("bands") or 0))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not (0 <= float(d["ngram_common_share"]) <= 1 and 0 < float(d["ngram_overlap"]) <= 1):
        raise ConfigError("dedup.ngram_common_share must be within [0, 1] and dedup.ngram_overlap within (0, 1]")
    if int(d["ngram_common_min_docs"]) < 1 or int(d["ngram_min_shared"]) < 1:
        raise ConfigError("dedup.ngram_common_min_docs and dedup.ngram_min_shared must be positive integers")
    decontam = is_active(cfg)
    settings = {
        "exact": bool(d["exact"]), "near": bool(d["near"]), "threshold": float(d["threshold"]),
        "num_perm": int(d["num_perm"]), "seed": int(d["seed"]), "shingle": int(d["shingle"]),
        "bands": bands, "rows": rows, "ngram": int(d["ngram"]), "decontam": decontam,
        "ngram_common_share": float(d["ngram_common_share"]),
        "ngram_common_min_docs": int(d["ngram_common_min_docs"]),
        "ngram_overlap": float(d["ngram_overlap"]),
        "ngram_min_shared": int(d["ngram_min_shared"]),
        "near_specific_share": float(d["near_specific_share"]),
        "pools": {"ratios": dict(cfg["pools"]["ratios"]), "seed": cfg["pools"]["seed"]},
    }
    n_traj = ingest_stats.get("trajectories.kept")
    est_rows = n_traj * (1 + bands) + (ingest_stats.get("chars.kept") / _CHARS_PER_WORD if decontam else 0)
    settings["buckets"] = int(d.get("buckets") or max(1, math.ceil(est_rows / ROWS_PER_BUCKET)))
    return settings


# --- map --------------------------------------------------------------------------------------------------


class _BucketOutput:
    """Rows of one map task, hashed into bucket files that are opened on first use."""

    def __init__(self, fs, root: str, task_id: str, buckets: int) -> None:
        self.fs, self.root, self.task_id, self.buckets = fs, root, task_id, buckets
        self.pending: dict[int, list[pa.Table]] = {}
        self.pending_rows: dict[int, int] = {}
        self.writers: dict[int, AtomicParquetWriter] = {}

    def path(self, bucket: int) -> str:
        return f"_work/dedup/b{bucket:05d}/{self.task_id}.parquet"

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        buckets = (table.column("key").to_numpy() % np.uint64(self.buckets)).astype(np.int64)
        order = np.argsort(buckets, kind="stable")
        sorted_buckets = buckets[order]
        table = table.take(pa.array(order))
        starts = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]])
        for s, e in zip(starts, np.r_[starts[1:], len(order)]):
            b = int(sorted_buckets[s])
            self.pending.setdefault(b, []).append(table.slice(s, e - s))
            self.pending_rows[b] = self.pending_rows.get(b, 0) + int(e - s)
            if self.pending_rows[b] >= _FLUSH_ROWS:
                self._flush(b)
        if sum(self.pending_rows.values()) >= _MAX_PENDING_ROWS:  # many buckets: bound the task's memory
            for b in list(self.pending):
                self._flush(b)

    def _flush(self, b: int) -> None:
        if b not in self.writers:
            self.writers[b] = AtomicParquetWriter(self.fs, f"{self.root}/{self.path(b)}", BUCKET_SCHEMA,
                                                  rows_per_group=_FLUSH_ROWS, compression_level=1)
        self.writers[b].write_table(pa.concat_tables(self.pending.pop(b)))
        self.pending_rows[b] = 0

    def close(self) -> dict[str, str]:
        for b in list(self.pending):
            self._flush(b)
        for w in self.writers.values():
            w.close()
        return {str(b): self.path(b) for b in sorted(self.writers)}

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()


class _Rows:
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


def add_trajectory_rows(out: _Rows, traj_id: str, role: int, row: dict, signer: Signer, settings: dict[str, Any]) -> None:
    """The bucket rows of one trajectory: exact key (run trajectories only), band keys, n-gram keys."""
    turns = row.get("turns") or []
    norm = [normalize_text(t) for t in turn_texts(turns)]
    hashes = word_hashes(words_of(norm, normalized=True))
    text_len = 0
    if role != ROLE_REFERENCE:
        content = exact_content(row.get("domain") or "", row.get("system") or {}, turns, norm)
        text_len = len(content)
        k1, k2 = exact_key(content)
        out.put(KIND_EXACT, np.zeros(1), np.array([k1], np.uint64), np.array([k2], np.uint64), traj_id, role,
                len(turns), text_len, None)
    if len(hashes):
        sig = signer.signature(hashes)
        keys = band_keys(sig, signer.bands, signer.rows)[0]
        out.put(KIND_BAND, np.arange(signer.bands), keys, np.zeros(signer.bands), traj_id, role, len(turns), text_len,
                sig.tobytes())
    if settings["decontam"]:
        grams = ngram_keys(hashes, settings["ngram"])
        out.put(KIND_NGRAM, np.zeros(len(grams)), grams[:, 0], grams[:, 1], traj_id, role, 0, 0, None)


def _part_records(fs, root: str, task: dict[str, Any], stats: Stats) -> Iterator[tuple[str, int, dict]]:
    path = f"{root}/trajectories/part-{task['task_id']}.parquet"
    with fs.open(path, "rb") as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=256, columns=TRAJECTORY_COLUMNS):
            for row in batch.to_pylist():
                role = role_of(row["split_key"], task["settings"]["pools"])
                stats.add("dedup.trajectories")
                yield row["traj_id"], role, row


def run_dedup_map_task(task: dict[str, Any]) -> dict[str, Any]:
    """Hash one trajectories part (``source: part``) or one reference source (``source: reference``) into buckets."""
    fs, root = out_fs(task["out"])
    settings = task["settings"]
    signer = Signer(settings["shingle"], settings["num_perm"], settings["seed"], settings["bands"], settings["rows"])
    stats = Stats()
    output = _BucketOutput(fs, root, task["task_id"], settings["buckets"])
    if task["source"] == "part":
        records = _part_records(fs, root, task, stats)
    else:
        records = ((ref_id, ROLE_REFERENCE, row) for ref_id, row in iter_references(task["uri"], stats))
    rows = 0
    try:
        batch = _Rows()
        for traj_id, role, row in records:
            add_trajectory_rows(batch, traj_id, role, row, signer, settings)
            rows += 1
            if batch.count >= _FLUSH_ROWS:
                output.add(batch.table())
                batch = _Rows()
        output.add(batch.table())
        files = output.close()
    except BaseException:
        output.abort()
        raise
    result = {"task_id": task["task_id"], "stage": "dedup-map", "files": files, "rows": rows, "bytes": 0,
              "stats": stats.to_dict(), "spec_hash": task["spec_hash"]}
    write_json_atomic(fs, posixpath.join(root, "_tasks", "dedup-map", f"{task['task_id']}.json"), result)
    return result


# --- reduce -------------------------------------------------------------------------------------------------


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


def _node_sizes(table: pa.Table) -> dict[str, tuple[int, int]]:
    mask = pc.not_equal(table.column("kind"), pa.scalar(KIND_NGRAM, pa.int8()))
    sub = table.filter(mask).select(["traj_id", "turns", "text_len"])
    return {t: (n, ln) for t, n, ln in zip(*(sub.column(c).to_pylist() for c in ("traj_id", "turns", "text_len")))}


def run_dedup_reduce_task(task: dict[str, Any]) -> dict[str, Any]:
    """Find the verified edges of one bucket and write them."""
    fs, root = out_fs(task["out"])
    tables = []
    for rel in task["files"]:
        with fs.open(f"{root}/{rel}", "rb") as f:
            tables.append(pq.read_table(f))
    table = pa.concat_tables(tables) if tables else BUCKET_SCHEMA.empty_table()
    edges = bucket_edges(table, task["settings"])
    sizes = _node_sizes(table) if edges else {}
    rows = []
    for kind, a, b, value in edges:
        at, al = sizes.get(a, (0, 0))
        bt, bl = sizes.get(b, (0, 0))
        counted = kind in (KIND_TOTAL, KIND_SHARED)
        rows.append({"kind": kind, "a": a, "b": b, "jaccard": 0.0 if counted else value, "a_turns": at, "a_len": al,
                     "b_turns": bt, "b_len": bl, "count": int(value) if counted else 0})
    rel = f"_work/dedup/edges/{task['task_id']}.parquet"
    with AtomicParquetWriter(fs, f"{root}/{rel}", EDGE_SCHEMA) as w:
        for r in rows:
            w.write_row(r)
    stats = {"dedup.bucket_rows": table.num_rows, "dedup.edges": len(rows)}
    result = {"task_id": task["task_id"], "stage": "dedup-reduce", "edges": rel, "rows": table.num_rows,
              "bytes": 0, "stats": stats, "spec_hash": task["spec_hash"]}
    write_json_atomic(fs, posixpath.join(root, "_tasks", "dedup-reduce", f"{task['task_id']}.json"), result)
    return result


# --- clusters on the driver --------------------------------------------------------------------------------


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


# --- the stage ---------------------------------------------------------------------------------------------


def _reference_fingerprint(uri: str) -> str:
    """What a reference task's output depends on: the bytes of its files."""
    from pipeline.ingest_task import describe_input
    from stages.ingest.reading import InputUnit, filesystem

    if not is_run_directory(uri):
        return describe_input(InputUnit(uri))["sha256"]
    fs, root = filesystem(uri)
    digest = hashlib.sha256()
    for p in sorted(fs.find(root)):
        if (p.endswith(".parquet") and "/trajectories/" in p) or p.endswith("manifest.json"):
            digest.update(f"{posixpath.relpath(p, root)}:{fs.size(p)}:{fs.checksum(p)}\n".encode())
    return digest.hexdigest()


def _write_removed(fs, root: str, rows: list[dict[str, str]]) -> None:
    with AtomicParquetWriter(fs, f"{root}/dedup/removed.parquet", REMOVED_SCHEMA) as w:
        w.write_table(pa.Table.from_pylist(rows, schema=REMOVED_SCHEMA))


def run_dedup_stage(cfg, fs, root: str, executor, ingest_results, manifest, stage_runs, echo) -> None:
    """Map, reduce and cluster (see the module docstring); writes ``dedup/removed.parquet`` and manifest counts."""
    from pipeline.run import _run_stage, _spec_hash

    settings = dedup_settings(cfg, merge_all([r["stats"] for r in ingest_results]))
    if not (settings["exact"] or settings["near"] or settings["decontam"]):
        _write_removed(fs, root, [])
        manifest["counts"]["dedup"] = {"exact_removed": 0, "near_removed": 0, "decontaminated_near": 0,
                                       "decontaminated_ngram": 0, "clusters": 0, "example_clusters": []}
        return
    progress = cfg["executor"]["progress"]
    base = {"out": cfg["run"]["out"], "settings": settings}
    spec = _spec_hash("dedup", output_config({"dedup": cfg["dedup"]}), settings)
    tasks = [{**base, "task_id": r["task_id"], "source": "part", "spec_hash": _spec_hash(spec, r["spec_hash"])}
             for r in ingest_results]
    for uri in reference_units(list(cfg["dedup"]["decontaminate"])):
        tid = "ref-" + hashlib.sha256(uri.encode()).hexdigest()[:16]
        tasks.append({**base, "task_id": tid, "source": "reference", "uri": uri,
                      "spec_hash": _spec_hash(spec, uri, _reference_fingerprint(uri))})
    map_results, stage_runs["dedup-map"] = _run_stage(executor, "dedup-map", run_dedup_map_task, tasks, fs, root,
                                                      progress)
    files: dict[int, list[str]] = {}
    for r in map_results:
        for b, rel in r["files"].items():
            files.setdefault(int(b), []).append(rel)
    map_spec = _spec_hash(spec, [r["spec_hash"] for r in map_results])
    # Commonness is a share of every trajectory compared: the run's own (all pools) and the references.
    compared = sum(r["rows"] for r in map_results)
    limit = common_limit(compared, settings["ngram_common_share"], settings["ngram_common_min_docs"])
    settings = {**settings, "ngram_limit": limit}
    base = {**base, "settings": settings}
    reduce_tasks = [{**base, "task_id": f"b{b:05d}", "files": sorted(files[b]), "spec_hash": _spec_hash(map_spec, b)}
                    for b in sorted(files)]
    reduce_results, stage_runs["dedup-reduce"] = _run_stage(executor, "dedup-reduce", run_dedup_reduce_task,
                                                            reduce_tasks, fs, root, progress)
    tables = []
    for r in reduce_results:
        with fs.open(f"{root}/{r['edges']}", "rb") as f:
            tables.append(pq.read_table(f))
    edges = pa.concat_tables(tables) if tables else EDGE_SCHEMA.empty_table()
    rows, counts = removed_rows(edges, settings)
    _write_removed(fs, root, rows)
    stats = merge_all([r["stats"] for r in map_results + reduce_results])
    manifest["counts"]["dedup"] = counts
    manifest["dedup"] = {
        "buckets": settings["buckets"], "bands": settings["bands"], "rows_per_band": settings["rows"],
        "edges": edges.num_rows, "references": int(stats.get("decontam.references")),
        "references_invalid": int(stats.get("decontam.references_invalid")),
        "compared": compared, "ngram_common_limit": limit,
    }
    echo(f"dedup: {counts['exact_removed']} exact and {counts['near_removed']} near duplicates removed in "
         f"{counts['clusters']} clusters; decontaminated: {counts['decontaminated_near']} near copies and "
         f"{counts['decontaminated_ngram']} by shared task n-grams (dedup/removed.parquet names the matched "
         "evaluation records)")
