"""The sample task: one trajectories part → samples of every pool, hashed into shard buckets.

Together with the shard task this is the final deterministic repartition as a shuffle: each
sample task writes ``_work/samples/<pool>/b<bucket>/<task>.arrow``, and one shard task per bucket
gathers, sorts and writes a shard. No step collects samples on the driver, and the shard a sample
lands in depends only on its trajectory (weighted pools) or its id (rl).

A weighted pool's samples are not written token by token: the samples of one trajectory share
most of their tokens (an all-turn sample repeats the history of the one before it). The task
writes each trajectory's pieces once (``<task>.pieces.arrow``: the system prompt, every target
turn, every history turn) and each sample as ranges of them; the shard task joins the ranges.
All of a trajectory's samples go to one bucket (`trajectory_bucket`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from masking import load_table
from pipeline.engine import marker_path, spare_cpus
from pipeline.leftovers import task_id_of
from pipeline.llm_stage import Augment
from pipeline.occurrences import Occurrences, removed_keys
from pipeline.outputs import AtomicIpcWriter, out_fs, zero_filled
from pipeline.task_process import collector_paused
from schemas.shard import schema_for
from schemas.stats import Stats
from schemas.trajectory import Trajectory
from stages.sample_rows import bucket_of, build_rows, rows_table, trajectory_bucket, word_set_memo
from stages.tokenizer import load_tokenizer
from stages.tokenizer.ahead import EncodeAhead
from stages.tokenizer.segments import segment_tokenizer

_ROWS_PER_GROUP = 256
# Rows held for all buckets together before the fullest is written out: a run with more buckets (a larger
# input) holds no more rows for them than a run with one.
_PENDING_BYTES = 16 * 1024 * 1024


def _row_bytes(row: dict[str, Any]) -> int:
    """About what a row holds: its arrays, its strings, and 8 bytes per item of its other lists."""
    size = 0
    for v in row.values():
        if isinstance(v, np.ndarray):
            size += v.nbytes
        elif isinstance(v, str):
            size += len(v)
        elif isinstance(v, list):
            size += 8 * len(v)
    return size


# The layout of the files a sample task writes, in its spec: a run resumed over the parts of an earlier layout
# (whole rows bucketed by sample id) runs its sample tasks again, which first remove those parts.
PART_LAYOUT = "pieces-1"

# A trajectory's pieces as the sample tasks write them (``<task>.pieces.arrow``): its key (`sample_key`), the ids
# and the weights (rounded to float32, as the shards store them) of every piece its samples join, laid out once.
PIECES_SCHEMA = pa.schema([("key", pa.string()), ("input_ids", pa.list_(pa.int32())),
                          ("loss_weight", pa.list_(pa.float32()))])


def part_schema(pool: str) -> pa.Schema:
    """The rows of a sample part of `pool`: the rl pool's are its shard rows; a weighted pool's are shard rows
    without the token lists, with the key of the trajectory's pieces and the ``[start, end)`` pairs of them that
    the sample joins, in order (``ranges``)."""
    schema = schema_for(pool)
    if pool == "rl":
        return schema
    kept = [f for f in schema if f.name not in ("input_ids", "loss_weight")]
    return pa.schema([*kept, pa.field("pieces_key", pa.string()), pa.field("ranges", pa.list_(pa.int32()))])


def lay_out(key: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The pieces row of one trajectory's weighted samples (their ``pieces``, each distinct piece once), and each
    row's ``pieces`` replaced by its ``ranges`` of it (adjacent ranges merged) and ``pieces_key``.

    History pieces come after the others, each kind in the order the samples first use them: samples built in
    turn order meet history turns in order, so a turn sample (system prompt, turns 1..t-1, target t) is three
    ranges, however many turns its history holds.
    """
    if len(rows) == 1:  # one sample (cpt, one SFT turn): its tokens in its order, joined by one range
        row = rows[0]
        if "pieces" in row:
            out = _pieces_row(key, row.pop("pieces"))
        else:  # `build_rows` joined them already
            out = {"key": key, "input_ids": row.pop("input_ids"), "loss_weight": row.pop("loss_weight")}
        n = len(out["input_ids"])
        row["pieces_key"], row["ranges"] = key, np.array([0, n] if n else [], dtype=np.int32)
        return out
    first: dict[int, Any] = {}
    history: dict[int, Any] = {}
    for row in rows:
        for p in row["pieces"]:
            if id(p) not in first and id(p) not in history:
                (history if p.history else first)[id(p)] = p
    first.update(history)
    pieces = list(first.values())
    at, start = 0, {}
    for i, p in first.items():
        start[i] = at
        at += len(p.ids)
    for row in rows:
        ranges: list[int] = []
        for p in row.pop("pieces"):
            a = start[id(p)]
            if ranges and ranges[-1] == a:
                ranges[-1] = a + len(p.ids)
            else:
                ranges += [a, a + len(p.ids)]
        row["pieces_key"] = key
        row["ranges"] = np.array(ranges, dtype=np.int32)
    return _pieces_row(key, pieces)


def _pieces_row(key: str, pieces: list[Any]) -> dict[str, Any]:
    return {"key": key, "input_ids": np.concatenate([p.ids for p in pieces]) if pieces else np.zeros(0, np.int32),
            "loss_weight": np.concatenate([p.weights for p in pieces]) if pieces else np.zeros(0)}


class SampleWriter:
    """Lazily opened bucket files of one task; rows are buffered and written as tables (`rows_table`).

    A file is written out at `_ROWS_PER_GROUP` rows, and the fullest one (by bytes) whenever all of them
    together hold more than `_PENDING_BYTES`.
    """

    def __init__(self, fs, root: str, task_id: str, buckets: dict[str, int]) -> None:
        self.fs, self.root, self.task_id, self.buckets = fs, root, task_id, buckets
        self.writers: dict[tuple[str, int, str], AtomicIpcWriter] = {}  # by (pool, bucket, "" or "pieces")
        self.pending: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
        self.pending_bytes: dict[tuple[str, int, str], int] = {}
        self.held = 0  # the sum of `pending_bytes`

    def write(self, key: str, rows: list[tuple[str, dict[str, Any]]]) -> None:
        """The ``(pool, row)`` of one trajectory (`build_rows` with ``joined=False``); `key`: its `sample_key`.
        A trajectory with one weighted sample gives its tokens joined, the others give their pieces."""
        weighted = [(pool, row) for pool, row in rows if pool != "rl"]
        for pool, row in rows:
            if pool == "rl":
                self._put((pool, bucket_of(row["sample_id"], self.buckets[pool]), ""), row)
        if weighted:
            pool = weighted[0][0]  # a trajectory's samples are all of one pool
            if any(p != pool for p, _ in weighted):
                raise ValueError(f"trajectory {key!r}: samples of more than one pool")
            weighted_rows = [row for _, row in weighted]
            b = trajectory_bucket(key, self.buckets[pool])
            self._put((pool, b, "pieces"), lay_out(key, weighted_rows))
            for row in weighted_rows:
                self._put((pool, b, ""), row)

    def _put(self, file: tuple[str, int, str], row: dict[str, Any]) -> None:
        if file not in self.writers:
            pool, b, kind = file
            name = f"{self.task_id}.pieces.arrow" if kind else f"{self.task_id}.arrow"
            path = f"{self.root}/_work/samples/{pool}/b{b:05d}/{name}"
            schema = PIECES_SCHEMA if kind else part_schema(pool)
            self.writers[file] = AtomicIpcWriter(self.fs, path, schema, rows_per_batch=_ROWS_PER_GROUP)
            self.pending[file] = []
            self.pending_bytes[file] = 0
        rows = self.pending[file]
        rows.append(row)
        size = _row_bytes(row)
        self.pending_bytes[file] += size
        self.held += size
        if len(rows) >= _ROWS_PER_GROUP:
            self._flush(file)
        while self.held > _PENDING_BYTES:
            self._flush(max(self.pending_bytes, key=self.pending_bytes.__getitem__))

    def _flush(self, file: tuple[str, int, str]) -> None:
        rows = self.pending[file]
        if rows:
            w = self.writers[file]
            w.write_table(rows_table(rows, w.schema))
            self.pending[file] = []
            self.held -= self.pending_bytes[file]
            self.pending_bytes[file] = 0

    def close(self) -> None:
        for file, w in self.writers.items():
            self._flush(file)
            w.close()

    def written(self) -> dict[str, int]:
        """The files written (path below the run folder -> bytes), once closed: `pipeline.engine.outputs_intact`
        runs the task again when one was deleted or cut short since (a shard task would read it)."""
        return {w.path[len(self.root) + 1:]: w.size for w in self.writers.values()}

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()


def remove_earlier_outputs(fs, root: str, task_id: str) -> int:
    """Delete the bucket files an earlier run of this task wrote, its marker first; returns how many files.

    A task run again (its spec changed: other pool ratios, bucket counts, masking) writes only the buckets its
    rows now go to, and a shard reads every file in its bucket's folder: a file of the earlier run in a
    bucket this run leaves empty (the eval pool turned off, one bucket fewer) would put stale rows in a shard.
    The earlier marker goes first, so a run interrupted after this cannot skip the task as finished."""
    base = f"{root}/_work/samples"
    if not fs.exists(base):
        return 0
    marker = marker_path(root, "samples", task_id)
    if fs.exists(marker):
        fs.rm(marker)
    mine = [p for p in fs.find(base) if task_id_of(p) == task_id]
    for p in mine:
        fs.rm(p)
    return len(mine)


_ROWS_READ = 64  # trajectories decoded into Python at a time


def _rows(batches: Iterable[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    for batch in batches:
        yield from batch.to_pylist()


def _part_rows(fs, path: str, seg, tok, stack: contextlib.ExitStack) -> tuple[Iterator[dict[str, Any]], EncodeAhead | None]:
    """The part's trajectories as dicts, in file order; and, where this process has a CPU to spare and the
    tokenizer encodes without the GIL, the `EncodeAhead` (entered on `stack`) that tokenizes their
    observations on a second thread (the part is then read whole, once, for both threads)."""
    if not (spare_cpus() and getattr(tok, "encodes_without_gil", False)):
        return _rows(pq.ParquetFile(stack.enter_context(fs.open(path, "rb"))).iter_batches(batch_size=_ROWS_READ)), None
    with fs.open(path, "rb") as f:
        part = pq.read_table(f)
    ahead = stack.enter_context(EncodeAhead(seg, _observations(seg, part.column("turns"))))
    return _rows(part.to_batches(max_chunksize=_ROWS_READ)), ahead


def _observations(seg, turns: pa.ChunkedArray) -> Iterator[list[str]]:
    """Each row's observations as the samples tokenize them (normalized), for `EncodeAhead`. Only the
    observation strings become Python objects (on the thread, this work holds the GIL)."""
    for start in range(0, len(turns), _ROWS_READ):
        rows = turns.slice(start, _ROWS_READ)
        counts = zero_filled(pc.list_value_length(rows)).tolist()
        texts = pc.struct_field(pc.list_flatten(rows), "observation").to_pylist()
        at = 0
        for n in counts:
            yield [seg.norm(t or "") for t in texts[at:at + n]]
            at += n


def run_sample_task(task: dict[str, Any]) -> dict[str, Any]:
    """Samples of one trajectories part. `task`: task_id, out, cfg, buckets, spec_hash, removed (the digest of
    ``dedup/removed.parquet``, whose ids the task reads itself), dups (`pipeline.occurrences.duplicate_offsets` of this part).

    Python's cycle collector is paused while the task runs (`collector_paused`), unless it augments samples
    through a model (whose client calls are left to the collector): building samples makes no cycles, but
    the collector walked the task's memos and buffered rows over and over (4% of a sample task's time on the
    demo corpus).
    """
    with contextlib.nullcontext() if task.get("llm") else collector_paused():
        return _run_sample_task(task)


def _run_sample_task(task: dict[str, Any]) -> dict[str, Any]:
    cfg = task["cfg"]
    fs, root = out_fs(task["out"])
    tok = load_tokenizer(cfg["tokenizer"]["spec"], cfg["tokenizer"]["engine"] or None)
    seg = segment_tokenizer(tok)
    table = load_table(cfg["masking"]["table"])
    stats = Stats()
    words = word_set_memo()  # texts repeat within and across trajectories: each scanned once while kept
    drop = removed_keys(fs, root)
    keys = Occurrences(task.get("dups"))
    remove_earlier_outputs(fs, root, task["task_id"])
    writer = SampleWriter(fs, root, task["task_id"], task["buckets"])
    aug = None
    if task.get("llm"):
        aug = Augment(cfg, fs, root, task["task_id"], task["llm"]["stages"])
    path = f"{root}/trajectories/part-{task['task_id']}.parquet"
    verify = True
    try:
        with contextlib.ExitStack() as stack:
            rows, ahead = _part_rows(fs, path, seg, tok, stack)
            for index, d in enumerate(rows):
                if ahead is not None:
                    ahead.at(index)
                traj = Trajectory.from_dict(d)
                key = keys.key(traj.traj_id)
                if key in drop:
                    continue
                rows = list(build_rows(traj, cfg, seg, table, stats, verify, key, aug, words, joined=False))
                writer.write(key, rows)
                if rows:  # the trajectory reaches the shards (counted for the run summary)
                    stats.add("pools.trajectories_in_shards")
                else:  # every sample filtered, or none drawn (`pools.<pool>.unsampled`)
                    stats.add("pools.trajectories_without_samples")
                verify = False
        writer.close()
    except BaseException:
        writer.abort()
        raise
    stats.add("tokenizer.chars", seg.counter.chars)
    result = {"task_id": task["task_id"], "stage": "samples", "stats": stats.to_dict(),
              "rows": int(sum(v for k, v in stats.to_dict().items() if k.startswith("samples.") and k.count(".") == 1)),
              "bytes": 0, "spec_hash": task["spec_hash"], "outputs": writer.written()}
    return result

