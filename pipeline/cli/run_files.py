"""Reading a finished run's output for the commands that export or score it (``lwm export``, ``lwm reward``)."""

from __future__ import annotations

import posixpath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.outputs import out_fs, read_json
from schemas.errors import ConfigError
from schemas.trajectory import Trajectory
from stages.pools import sample_id
from stages.sample_rows import sample_key
from stages.store_answer import check_inputs_answer


def finished_run(run_dir: str):
    """(filesystem, root) of a finished run; `ConfigError` when it does not exist or has no ``_SUCCESS``, or when a shard its
    manifest lists is missing or of another size (deleted or cut short since: what is read would be partial)."""
    fs, root, _ = _finished(run_dir, False)
    return fs, root


def finished_manifest(run_dir: str):
    """(filesystem, root, manifest) of a finished run, checked as `finished_run` checks it; a missing or
    unreadable ``manifest.json`` is a `ConfigError` naming it."""
    return _finished(run_dir, True)


def _finished(run_dir: str, need_manifest: bool):
    check_inputs_answer([run_dir])  # a store that never answers is one line within LWM_STORE_WAIT_S, not a hang
    fs, root = out_fs(run_dir)
    if not fs.exists(posixpath.join(root, "_SUCCESS")):
        if not fs.exists(root):  # a typo, most likely: not a run that stopped early
            raise ConfigError(f"{run_dir}: does not exist; give the output folder of a finished `lwm run`")
        raise ConfigError(f"{run_dir}: not a finished run (no _SUCCESS); run `lwm run` to completion first")
    try:
        manifest = run_manifest(fs, root)
    except (FileNotFoundError, ValueError) as exc:
        if need_manifest:
            why = "is missing" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc})"
            raise ConfigError(f"{run_dir}: manifest.json {why}; run the same `lwm run` again to rebuild it") from exc
        return fs, root, None  # no readable manifest: the commands that need one say so
    for shard in manifest.get("shards") or []:
        path = posixpath.join(root, shard["path"])
        try:
            size = int(fs.size(path))
        except FileNotFoundError:
            size = -1
        if size != int(shard["bytes"]):
            what = "is missing" if size < 0 else f"has {size} bytes, not the {shard['bytes']} the manifest lists"
            raise ConfigError(f"{run_dir}: shard {shard['path']} {what}; run the same `lwm run` again to rebuild it")
    return fs, root, manifest


def run_manifest(fs, root: str) -> dict[str, Any]:
    return read_json(fs, posixpath.join(root, "manifest.json"))


def run_templates(fs, root: str, run_dir: str, manifest: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The run's ``templates.dirs``, checked to hold the template texts its samples were rendered with
    (``manifest.json`` records their digest): a template edited or removed since is one line, not system
    prompts that differ from the trained ones."""
    from stages.templates import reload_templates, templates_digest

    reload_templates()
    manifest = manifest if manifest is not None else run_manifest(fs, root)
    dirs = tuple(manifest["config"]["templates"]["dirs"])
    recorded = (manifest.get("templates") or {}).get("sha256")
    if recorded and templates_digest(dirs) != recorded:
        raise ConfigError(f"the templates in {', '.join(dirs)} changed since {run_dir} was made, so the system "
                          "prompts rendered now would differ from those of its samples; restore them or run again")
    return dirs


def parquet_files(fs, base: str) -> list[str]:
    """The Parquet files below `base`, sorted; none when `base` does not exist (an empty pool or layer)."""
    if not fs.exists(base):
        return []
    return sorted(p for p in fs.find(base) if p.endswith(".parquet"))


def rl_shard_rows(fs, root: str, columns: list[str]) -> list[dict[str, Any]]:
    """The `columns` of every rl shard row, in file order, with ``verifier`` added where the shard has it
    (shards written before the column existed do not)."""
    rows = []
    for path in parquet_files(fs, posixpath.join(root, "shards", "rl")):
        with fs.open(path, "rb") as f:
            pf = pq.ParquetFile(f)
            extra = ["verifier"] if "verifier" in pf.schema_arrow.names else []
            rows += pf.read(columns=columns + extra).to_pylist()
    return rows


def split_keys(fs, root: str, wanted: set[str]) -> dict[str, str]:
    """traj_id -> split_key (the task, by which pools are disjoint) for the `wanted` ids found in the
    trajectories layer; only those two columns are read."""
    found: dict[str, str] = {}
    keys = pa.array(sorted(wanted), pa.string())
    for path in parquet_files(fs, posixpath.join(root, "trajectories")):
        with fs.open(path, "rb") as f:
            table = pq.ParquetFile(f).read(columns=["traj_id", "split_key"])
        table = table.filter(pc.is_in(table.column("traj_id"), value_set=keys))
        found.update(zip(table.column("traj_id").to_pylist(), table.column("split_key").to_pylist()))
    return found


def find_trajectories(fs, root: str, wanted: set[str]) -> dict[str, Trajectory]:
    """The trajectories of the `wanted` ids found in the trajectories layer (a missing id is left out), by their
    occurrence key (`stages.sample_rows.sample_key`): the plain id for the first trajectory carrying an id, a
    key of its own for each later one (parts and rows in the order the run counted them, `pipeline.occurrences`)."""
    found: dict[str, Trajectory] = {}
    seen: dict[str, int] = {}
    keys = pa.array(sorted(wanted), pa.string())
    for path in parquet_files(fs, posixpath.join(root, "trajectories")):
        with fs.open(path, "rb") as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=256):
                for d in batch.filter(pc.is_in(batch.column("traj_id"), value_set=keys)).to_pylist():
                    seen[d["traj_id"]] = seen.get(d["traj_id"], 0) + 1
                    found[sample_key(d["traj_id"], seen[d["traj_id"]])] = Trajectory.from_dict(d)
    return found


def trajectory_of_sample(found: dict[str, Trajectory], sample: dict[str, Any], pool: str) -> Trajectory | None:
    """The trajectory in `found` (`find_trajectories`) that made `sample` (its ``sample_id``, ``traj_id``,
    ``turn_idx`` and ``template``): of the trajectories sharing its id, the one whose key gives its sample id."""
    traj_id = sample["traj_id"]
    n = 1
    while (key := sample_key(traj_id, n)) in found:
        if n == 1 and sample_key(traj_id, 2) not in found:
            return found[key]  # the one trajectory of that id
        if sample_id(key, pool, sample["turn_idx"], sample["template"]) == sample["sample_id"]:
            return found[key]
        n += 1
    return None
    return found
