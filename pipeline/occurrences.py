"""Trajectories that share an id: each one's own key, the same in every stage.

A run may hold several trajectories carrying one ``traj_id``: the same file under two input folders, a log
given twice, two tools that number their episodes alike. Each stage that names a trajectory — the nodes of the
dedup graph, the removal list ``dedup/removed.parquet`` (``traj_id`` and ``occurrence``), the sample ids, the
skip lists and the rows of the model-in-the-loop stages (``traj_id`` and ``occurrence``) — names the n-th of them (parts in task-id order, rows in file
order) by `stages.sample_rows.sample_key`: the plain id for the first, so a run without shared ids names
everything by its id alone.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages.sample_rows import sample_key

REMOVED = "dedup/removed.parquet"


def duplicate_offsets(fs, root: str, task_ids: list[str]) -> dict[str, dict[str, int]]:
    """Per trajectories part, for each ``traj_id`` that more than one trajectory of the run carries:
    how many of them come in earlier parts (parts in task-id order, rows in file order).

    Only parts holding such ids appear; a run without shared ids gets ``{}``.
    """
    columns = {}
    for tid in sorted(task_ids):
        path = f"{root}/trajectories/part-{tid}.parquet"
        if fs.exists(path):
            columns[tid] = pq.read_table(fs.open(path, "rb"), columns=["traj_id"]).column("traj_id")
    if not columns:
        return {}
    counts = pc.value_counts(pa.chunked_array([c for col in columns.values() for c in col.chunks],
                                              type=pa.string()))
    shared = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
    if len(shared) == 0:
        return {}
    seen: dict[str, int] = {}
    out: dict[str, dict[str, int]] = {}
    for tid, col in columns.items():
        ids = pc.filter(col, pc.is_in(col, value_set=shared)).to_pylist()
        if ids:
            out[tid] = {t: seen.get(t, 0) for t in sorted(set(ids))}
            for t in ids:
                seen[t] = seen.get(t, 0) + 1
    return out


def run_offsets(ctx) -> dict[str, dict[str, int]]:
    """`duplicate_offsets` of this run's trajectories parts, found once per run (`RunContext.shared`)."""
    if "duplicate_offsets" not in ctx.shared:
        ctx.shared["duplicate_offsets"] = duplicate_offsets(ctx.fs, ctx.root,
                                                            [r["task_id"] for r in ctx.results["ingest"]])
    return ctx.shared["duplicate_offsets"]


class Occurrences:
    """The key of each trajectory of one part, read in file order; `offsets`: that part's `duplicate_offsets`."""

    def __init__(self, offsets: dict[str, int] | None = None) -> None:
        self._seen = dict(offsets or {})

    def key(self, traj_id: str) -> str:
        if traj_id not in self._seen:
            return traj_id
        self._seen[traj_id] += 1
        return sample_key(traj_id, self._seen[traj_id])


def removed_keys(fs, root: str) -> set[str]:
    """The keys of the trajectories the dedup stage removed (``dedup/removed.parquet``; none without one).
    A list written before it had an ``occurrence`` column names first occurrences only."""
    path = f"{root}/{REMOVED}"
    if not fs.exists(path):
        return set()
    with fs.open(path, "rb") as f:
        parquet = pq.ParquetFile(f)
        table = parquet.read(columns=[c for c in ("traj_id", "occurrence") if c in parquet.schema_arrow.names])
    ids = table.column("traj_id").to_pylist()
    if "occurrence" not in table.column_names:
        return set(ids)
    return {sample_key(t, n) for t, n in zip(ids, table.column("occurrence").to_pylist())}
