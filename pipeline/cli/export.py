"""``lwm export agentworldbench``: the eval pool of a finished run as AgentWorldBench JSONL (SPEC §7).

One JSON line per eval sample, with exactly the fields ``task, id, prompt, response, current_prompt,
system_str, turn_idx, total_turns``, in the layout the official evaluator (``eval/eval.py`` of
AgentWorldBench) reads::

    {"task": "terminal", "id": "3f9c...", "system_str": "You are the environment...", "turn_idx": 2, "total_turns": 3,
     "prompt": ["### Turn 1\\n...", "### Turn 2\\n...<predicted_observation>.", "### Turn 3\\n..."],
     "response": ["**Environment Observation:**\\n...", "**Environment Observation:**\\na b", "..."],
     "current_prompt": "### Turn 2\\n...```"}

How a row is built from a shard row (``sample_id, traj_id, template, turn_idx``) and its trajectory:

- ``system_str``: the trajectory's system prompt under the shard row's template, with the run's
  template directories — the same call the sample stage made, so the text is the one the sample
  was rendered from;
- ``prompt``: the user prompt of every turn of the trajectory, in order. Entry t (the evaluated turn)
  is ``target_prompt`` — the turn followed by the instruction to reason and wrap the prediction in
  ``<predicted_observation>``, exactly the last user message of the tokenized sample; every other entry
  is the bare ``user_prompt``, as the sample's history turns hold it (the evaluator sends entries
  1..t-1 as history, so they must be the training history's text; the entries after t are never sent
  for this row and are bare so the rows of one trajectory differ only in their evaluated entry);
- ``response``: ``history_reply`` of every turn's observation (``**Environment Observation:**\\n`` and the
  observation): the evaluator sends entries 1..t-1 as assistant history, which is then exactly the
  sample's history, and compares entry t with the prediction after removing that marker;
- ``current_prompt``: ``user_prompt`` of turn t, without the instruction;
- ``task``: the trajectory's domain (the ingest side reads the domain back from it);
- ``id``: the sample id, so the same run exports the same ids; rows are ordered by it.

The history is always whole: a sample whose oldest turns were dropped to fit the context limit
still exports all of turns 1..t-1 (a benchmark row states the full task); such rows are counted.
The eval pool's trajectories are held in memory while the file is written.
"""

from __future__ import annotations

import json
import posixpath
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import click
import pyarrow.parquet as pq

from pipeline.cli.run_files import (
    find_trajectories,
    finished_manifest,
    parquet_files,
    run_templates,
    trajectory_of_sample,
)
from pipeline.errors import handle_errors
from pipeline.object_stores import check_bucket
from schemas.errors import ConfigError
from schemas.trajectory import Trajectory
from stages.ingest.reading import BUCKET_PROTOCOLS, protocols
from stages.render import history_reply, target_prompt, user_prompt
from stages.templates import render_system

EXPORT_FIELDS = ("task", "id", "prompt", "response", "current_prompt", "system_str", "turn_idx", "total_turns")
_SAMPLE_COLUMNS = ["sample_id", "traj_id", "template", "turn_idx", "total_turns", "turn_spans"]


@dataclass(frozen=True)
class EvalSample:
    """What the export needs of one eval shard row."""

    sample_id: str
    traj_id: str
    template: str
    turn_idx: int
    total_turns: int
    history_kept: int  # history turns the tokenized sample holds (fewer than turn_idx - 1 when truncated)


@dataclass
class ExportSummary:
    rows: int
    truncated_history: int


def eval_samples(fs, root: str) -> list[EvalSample]:
    """Every row of the eval shards, ordered by sample id."""
    samples = []
    for path in parquet_files(fs, posixpath.join(root, "shards", "eval")):
        with fs.open(path, "rb") as f:
            table = pq.read_table(f, columns=_SAMPLE_COLUMNS)
        for row in table.to_pylist():
            samples.append(
                EvalSample(row["sample_id"], row["traj_id"], row["template"], row["turn_idx"], row["total_turns"],
                           len(row["turn_spans"]) - 1)
            )
    return sorted(samples, key=lambda s: s.sample_id)


def load_trajectories(fs, root: str, samples: list[EvalSample]) -> dict[str, Trajectory]:
    """sample id → the trajectory that made it, from the trajectories layer (of trajectories sharing an id, the
    sample's own); `ConfigError` for a missing one."""
    found = find_trajectories(fs, root, {s.traj_id for s in samples})
    out, missing = {}, set()
    for s in samples:
        traj = trajectory_of_sample(found, {"sample_id": s.sample_id, "traj_id": s.traj_id, "turn_idx": s.turn_idx,
                                            "template": s.template}, "eval")
        if traj is None:
            missing.add(s.traj_id)
        else:
            out[s.sample_id] = traj
    if missing:
        raise ConfigError(f"{len(missing)} eval trajectories missing from the trajectories layer, e.g. {min(missing)}")
    return out


def turn_prompts(traj: Trajectory, turn_idx: int) -> list[str]:
    """The user prompt of every turn; the evaluated one (`turn_idx`) carries the prediction instruction."""
    return [target_prompt(traj, n) if n == turn_idx else user_prompt(traj, n) for n in range(1, len(traj.turns) + 1)]


def export_row(traj: Trajectory, sample: EvalSample, system_text: str) -> dict[str, Any]:
    """The AgentWorldBench row of one eval sample."""
    t = sample.turn_idx
    row = {
        "task": traj.domain,
        "id": sample.sample_id,
        "prompt": turn_prompts(traj, t),
        "response": [history_reply(turn.observation) for turn in traj.turns],
        "current_prompt": user_prompt(traj, t),
        "system_str": system_text,
        "turn_idx": t,
        "total_turns": len(traj.turns),
    }
    return row


def agentworldbench_rows(run_dir: str) -> Iterator[tuple[EvalSample, dict[str, Any]]]:
    """The rows of a finished run's eval pool, in sample id order."""
    fs, root, manifest = finished_manifest(run_dir)
    samples = eval_samples(fs, root)
    if not samples:
        raise ConfigError(f"{run_dir}: the eval pool is empty (pools.ratios.eval, eval_subsample?)")
    trajs = load_trajectories(fs, root, samples)
    dirs = run_templates(fs, root, run_dir, manifest)
    systems: dict[tuple[str, str], str] = {}  # a trajectory's system prompt, rendered once for its eval samples
    for sample in samples:
        traj = trajs[sample.sample_id]
        if sample.total_turns != len(traj.turns):
            raise ConfigError(f"sample {sample.sample_id}: {sample.total_turns} turns in the shard, "
                              f"{len(traj.turns)} in the trajectories layer")
        key = (id(traj), sample.template)
        if key not in systems:
            systems[key] = render_system(traj, sample.template, dirs)
        yield sample, export_row(traj, sample, systems[key])


def write_agentworldbench(run_dir: str, out: str) -> ExportSummary:
    """Write the eval pool of `run_dir` to `out` (local path or fsspec URL), atomically."""
    import fsspec

    if not out.strip():  # it would name the folder lwm runs in
        raise ConfigError(f"the output file name is empty ({out!r}); give the file to write, e.g. DIR/lwm_test.jsonl")
    fs, path = fsspec.core.url_to_fs(out)
    check_bucket(fs, path, out)  # first: a store that never answers is one line, not a hang in `isdir`
    if fs.isdir(path):  # a move onto it would put the file inside, under its temporary name
        raise ConfigError(f"{out} is a directory; give the file to write, e.g. {posixpath.join(out, 'lwm_test.jsonl')} "
                          "(the evaluator reads every *_test.jsonl of its --data-dir)")
    parent = posixpath.dirname(path)
    if parent and not protocols(fs) & BUCKET_PROTOCOLS:  # an object store has no folders; lwm makes no bucket
        fs.makedirs(parent, exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    summary = ExportSummary(0, 0)
    try:
        try:
            f = fs.open(tmp, "w", encoding="utf-8")
        except OSError as exc:  # named by the file asked for, not the temporary name it is written under
            raise OSError(exc.errno, exc.strerror or str(exc), out) from None
        with f:
            for sample, row in agentworldbench_rows(run_dir):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                summary.rows += 1
                summary.truncated_history += sample.history_kept < sample.turn_idx - 1
    except BaseException:
        if fs.exists(tmp):
            fs.rm(tmp)
        raise
    fs.mv(tmp, path)
    return summary


@click.group("export")
def export_group() -> None:
    """Export a finished run in other formats."""


@export_group.command("agentworldbench")
@click.argument("run_dir")
@click.argument("out")
@handle_errors
def agentworldbench_cmd(run_dir: str, out: str) -> None:
    """Write the eval pool of RUN_DIR as AgentWorldBench JSONL to OUT (one row per evaluated turn).

    OUT is read back by ``--format agentworldbench`` whatever its name; the official evaluator loads only the
    ``*_test.jsonl`` files of its ``--data-dir``, so another name is written, with a warning."""
    summary = write_agentworldbench(run_dir, out)
    note = f" ({summary.truncated_history} with history the shard sample truncated)" if summary.truncated_history else ""
    click.echo(f"wrote {summary.rows} AgentWorldBench rows to {out}{note}", err=True)
    if not out.endswith("_test.jsonl"):
        click.echo(f"warning: {out}: AgentWorldBench's eval.py reads only the *_test.jsonl files of its --data-dir; "
                   "name the file NAME_test.jsonl for it", err=True)

