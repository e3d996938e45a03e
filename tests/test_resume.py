"""Re-running the same command resumes: finished tasks are skipped and the bytes never change.

In-process runs with the local executor, plus one killed `lwm run --executor local` process (its tasks
die with it, so its partial files stay behind for the next run to remove).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.run import run_pipeline
from tests.helpers import LWM, assert_same_outputs, clean_env, config_toml, corpus_config, lwm_in_process, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "in", big=150)


def _run(corpus: Path | str, out: Path, **overrides) -> dict:
    cfg = corpus_config([str(corpus)], out)
    for section, values in overrides.items():
        cfg[section].update(values)
    return run_pipeline(cfg, echo=lambda m: None)


def _timings(out: Path) -> dict:
    return json.loads((out / "_timings.json").read_text())


def _files(out: Path, sub: str) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / sub).rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def fresh(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fresh") / "out"
    _run(corpus, out)
    return out


def test_a_second_run_skips_every_task_and_changes_no_byte(corpus, fresh, tmp_path):
    out = tmp_path / "out"
    _run(corpus, out)
    first = {**_files(out, "_tasks"), **_files(out, "shards")}
    _run(corpus, out)
    timings = _timings(out)
    assert {"scan", "ingest", "samples", "shards"} <= set(timings)
    for stage, t in timings.items():
        assert t["ran"] == 0 and t["skipped"] == t["tasks"] > 0, stage
    assert {**_files(out, "_tasks"), **_files(out, "shards")} == first
    assert_same_outputs(fresh, out)


def test_a_lost_task_is_the_only_one_run_again(corpus, fresh, tmp_path):
    out = tmp_path / "out"
    _run(corpus, out)
    marker = sorted((out / "_tasks" / "ingest").glob("*.json"))[2]
    (out / "trajectories" / f"part-{marker.stem}.parquet").unlink()
    marker.unlink()
    _run(corpus, out)
    ingest = _timings(out)["ingest"]
    assert (ingest["ran"], ingest["skipped"]) == (1, ingest["tasks"] - 1)
    assert _timings(out)["samples"]["ran"] == 0  # the rebuilt part has the same spec, so its samples stand
    assert_same_outputs(fresh, out)


def test_a_rerun_says_that_its_figures_are_an_earlier_runs(corpus, tmp_path):
    """The summary counts what the outputs hold; a rerun that found every task finished (model requests
    included) says so, and one that found some finished says how many."""
    out = tmp_path / "out"
    cfg = corpus_config([str(corpus)], out)
    said: list[str] = []
    run_pipeline(cfg, echo=said.append)
    assert not [line for line in said if line.startswith(("nothing to do", "resumed"))]
    said.clear()
    run_pipeline(cfg, echo=said.append)
    total = sum(t["tasks"] for t in _timings(out).values())
    assert f"nothing to do: all {total} tasks were finished by an earlier run into this folder; the figures below " \
           "are that run's" in said
    marker = sorted((out / "_tasks" / "ingest").glob("*.json"))[0]
    (out / "trajectories" / f"part-{marker.stem}.parquet").unlink()
    marker.unlink()
    said.clear()
    run_pipeline(cfg, echo=said.append)
    earlier = sum(t["skipped"] for t in _timings(out).values())
    assert earlier == total - 1
    assert any(line.startswith(f"resumed: {earlier} of {total} tasks were finished by an earlier run") for line in said)


def test_an_input_changed_in_place_is_read_again(corpus, tmp_path):
    """An input edited since the last run (same name, same size, other bytes; a small file and one split into
    byte ranges) is ingested again, and the result is that of a fresh run over the edited inputs."""
    import os
    import shutil

    src = tmp_path / "in"
    shutil.copytree(corpus, src)
    out = tmp_path / "out"
    _run(src, out)
    for name in ("mcp-0.jsonl", "zz-big.jsonl"):
        path = src / name
        text = path.read_text()
        at = text.rindex('"observation": "') + len('"observation": "')  # a letter of the last observation
        assert text[at].isalnum()
        path.write_text(text[:at] + ("Q" if text[at] != "Q" else "R") + text[at + 1:])  # same size, other bytes
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # as an editor leaves it
    _run(src, out)
    ran = _timings(out)["ingest"]["ran"]
    assert 2 <= ran < _timings(out)["ingest"]["tasks"]  # the edited files' tasks, not the others
    fresh = tmp_path / "fresh"
    _run(src, fresh)
    assert_same_outputs(fresh, out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"] == json.loads((fresh / "manifest.json").read_text())["inputs"]


@pytest.mark.parametrize("damage", ["shard cut short", "shard deleted", "trajectories part emptied",
                                    "sample file cut short", "sample file deleted"])
def test_an_output_damaged_since_is_written_again_not_taken_as_done(corpus, fresh, tmp_path, damage):
    """A sample task's intermediate file lost with the shard that reads it: the shard task ran again on what was
    left (samples silently missing), or failed on the cut file in every run after."""
    out = tmp_path / "out"
    _run(corpus, out)
    shard = sorted((out / "shards" / "cpt").glob("*.parquet"))[0]
    if damage == "shard cut short":
        shard.write_bytes(shard.read_bytes()[:1000])
    elif damage == "shard deleted":
        shard.unlink()
    elif damage.startswith("sample file"):
        bucket = out / "_work" / "samples" / "cpt" / f"b{int(shard.stem.split('-')[1]):05d}"
        sample_file = max(bucket.glob("*.arrow"), key=lambda p: p.stat().st_size)
        if damage.endswith("cut short"):
            sample_file.write_bytes(sample_file.read_bytes()[:200])
        else:
            sample_file.unlink()
        shard.unlink()
    else:
        sorted((out / "trajectories").glob("*.parquet"))[0].write_bytes(b"")
    _run(corpus, out)
    stage = {"trajectories": "ingest", "sample": "samples", "shard": "shards"}[damage.split()[0]]
    assert _timings(out)[stage]["ran"] == 1
    assert_same_outputs(fresh, out)


def test_a_changed_masking_setting_reruns_only_the_later_stages(corpus, tmp_path):
    out = tmp_path / "out"
    _run(corpus, out)
    before = _files(out, "shards")
    _run(corpus, out, masking={"keep_mode": "turn"})
    timings = _timings(out)
    assert timings["ingest"]["ran"] == 0 and timings["scan"]["ran"] == 0
    assert timings["samples"]["ran"] == timings["samples"]["tasks"] and timings["shards"]["ran"] > 0
    assert _files(out, "shards") != before
    _run(corpus, tmp_path / "turn", masking={"keep_mode": "turn"})
    assert_same_outputs(tmp_path / "turn", out)  # resumed with a new setting == a fresh run with it


def test_pools_changed_in_the_same_folder_leave_no_sample_file_of_the_old_split(corpus, tmp_path):
    """A sample task run again writes only the buckets its rows now go to; what it wrote before into other
    buckets (the eval pool turned off here, so its bucket gets nothing) must not reach a shard."""
    out = tmp_path / "out"
    with_eval = {"cpt": 0.5, "sft": 0.25, "rl": 0.1, "eval": 0.15}
    without_eval = {"cpt": 0.5, "sft": 0.4, "rl": 0.1, "eval": 0.0}
    _run(corpus, out, pools={"ratios": with_eval})
    assert list((out / "shards" / "eval").glob("*.parquet"))
    _run(corpus, out, pools={"ratios": without_eval})
    _run(corpus, tmp_path / "fresh", pools={"ratios": without_eval})
    # Every bucket has a shard file, an empty one where no row went.
    assert [pq.ParquetFile(p).metadata.num_rows for p in (tmp_path / "fresh" / "shards" / "eval").glob("*.parquet")] == [0]
    assert_same_outputs(tmp_path / "fresh", out)
    assert _files(out, "_work/samples").keys() == _files(tmp_path / "fresh", "_work/samples").keys()


def test_a_sample_task_interrupted_under_new_settings_is_not_skipped_when_the_old_ones_return(corpus, fresh, tmp_path,
                                                                                             monkeypatch):
    """A sample task run again removes its earlier files; interrupted right after, the next run (back under the
    first settings) must run it again, not skip it on the earlier marker whose files are gone."""
    out = tmp_path / "out"
    _run(corpus, out)
    import pipeline.sample_task as sample_task

    def interrupted(self, pool, row):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(sample_task.SampleWriter, "write", interrupted)
        with pytest.raises(KeyboardInterrupt):
            _run(corpus, out, pools={"ratios": {"cpt": 0.5, "sft": 0.4, "rl": 0.1, "eval": 0.0}})
    _run(corpus, out)
    assert _timings(out)["samples"]["ran"] >= 1
    assert_same_outputs(fresh, out)


def test_another_task_layout_in_the_same_folder_leaves_nothing_of_the_old_one(corpus, tmp_path):
    out = tmp_path / "out"
    _run(corpus, out)  # ranges of 64 KiB, small files in pairs
    one_per_file = {"split_bytes": 1 << 30, "group_files": 1}
    _run(corpus, out, ingest=one_per_file)
    _run(corpus, tmp_path / "fresh", ingest=one_per_file)
    assert_same_outputs(tmp_path / "fresh", out)  # no stale part, marker or sample file survives
    assert {p.name for p in (out / "_tasks" / "ingest").iterdir()} == {
        p.name for p in (tmp_path / "fresh" / "_tasks" / "ingest").iterdir()
    }
    assert not (out / "_tasks" / "scan").exists() or not list((out / "_tasks" / "scan").iterdir())


def test_from_layer_trajectories_gives_the_bytes_of_a_full_run(corpus, fresh, tmp_path):
    out = tmp_path / "out"
    _run(corpus, out, masking={"keep_mode": "token"})
    _run(corpus, out, run={"from_layer": "trajectories"})
    assert "ingest" not in _timings(out)
    assert _files(out, "shards") == _files(fresh, "shards")


def test_a_killed_run_leaves_no_success_and_the_next_run_cleans_up(corpus, tmp_path):
    out = tmp_path / "out"
    # Only the killed run is a process of its own; the others run `lwm` in this process.
    args = ["run", "--executor", "local", "--input", str(corpus), "--out", str(out), "--progress", "off",
            "--config", str(config_toml(tmp_path / "c.toml"))]
    done = lwm_in_process(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "_SUCCESS").exists()
    # Same output folder, a setting that changes the trajectories: killed in the middle of its ingest.
    args = [*args, "--redact-emails"]
    env = {**clean_env(), "LWM_TEST_TASK_DELAY": "0.4"}
    proc = subprocess.Popen([LWM, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    markers = out / "_tasks" / "ingest"
    before = {p: p.stat().st_mtime_ns for p in markers.glob("*.json")}
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        rewritten = [p for p in markers.glob("*.json") if p.stat().st_mtime_ns != before.get(p)]
        if len(rewritten) >= 2 and list((out / "trajectories").glob("*.tmp-*")):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "_SUCCESS").exists()  # the earlier run's _SUCCESS does not vouch for mixed outputs
    partial = list(out.rglob("*.tmp-*"))
    assert partial

    again = lwm_in_process(*args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"removed {len(partial)} partial file(s) left by an interrupted run" in again.stderr
    assert not list(out.rglob("*.tmp-*")) and (out / "_SUCCESS").exists()
    ingest = _timings(out)["ingest"]
    assert ingest["skipped"] >= 2 and ingest["ran"] == ingest["tasks"] - ingest["skipped"]
    fresh = tmp_path / "fresh"
    redo = lwm_in_process(*[str(fresh) if c == str(out) else c for c in args])
    assert redo.returncode == 0, redo.stderr[-2000:]
    assert_same_outputs(fresh, out)


def test_sample_parts_of_another_layout_are_written_again_not_reused(corpus, fresh, tmp_path, monkeypatch):
    """The sample tasks' spec names the layout of their parts (`PART_LAYOUT`): over an output whose parts have
    another one (an earlier version's whole rows bucketed by sample id), every sample and shard task runs again."""
    import pipeline.samples_stage as samples_stage

    out = tmp_path / "out"
    with monkeypatch.context() as m:
        m.setattr(samples_stage, "PART_LAYOUT", "an earlier layout")
        _run(corpus, out)
    _run(corpus, out)
    timings = _timings(out)
    for stage in ("samples", "shards"):
        assert timings[stage]["ran"] == timings[stage]["tasks"] > 0, stage
    assert timings["ingest"]["ran"] == 0
    assert_same_outputs(fresh, out)


def test_from_layer_keeps_the_settings_that_made_the_trajectories_and_says_which_are_ignored(corpus, tmp_path):
    out = tmp_path / "out"
    _run(corpus, out)
    made = json.loads((out / "manifest.json").read_text())
    lines: list[str] = []
    cfg = corpus_config([], out, from_layer="trajectories")
    cfg["filter"]["min_turns"], cfg["redact"]["emails"] = 6, True
    manifest = run_pipeline(cfg, echo=lines.append)
    assert ("warning: --from-layer trajectories keeps the settings that made the trajectories; this run's "
            "filter.min_turns, redact.emails have no effect (run without --from-layer to apply them)") in lines
    # the manifest tells what made the data: the layer's settings, its input, and the same counts
    for section in ("run", "filter", "redact", "ingest"):
        assert manifest["config"][section] == made["config"][section], section
    assert manifest["config_hash"] == made["config_hash"]
    assert manifest["counts"]["trajectories"] == made["counts"]["trajectories"]


def test_a_second_run_into_a_folder_in_use_stops_at_once_and_leaves_the_first_alone(corpus, fresh, tmp_path):
    out = tmp_path / "out"
    args = ["run", "--executor", "local", "--input", str(corpus), "--out", str(out), "--progress", "off",
            "--config", str(config_toml(tmp_path / "c.toml"))]
    env = {**clean_env(), "LWM_TEST_TASK_DELAY": "0.3"}  # the first run holds the folder for a while
    first = subprocess.Popen([LWM, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (out / "raw").exists():  # the first run is writing
            assert time.time() < deadline and first.poll() is None
            time.sleep(0.05)
        second = lwm_in_process(*args)
        assert second.returncode == 2
        assert second.stderr.strip() == (f"lwm: error: {out} is in use by another lwm run; wait for it to end or "
                                         "choose another --out")
    finally:
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert_same_outputs(fresh, out)


def test_the_same_input_folder_written_another_way_resumes_and_another_folder_does_not(corpus, tmp_path, monkeypatch):
    """The ingest tasks' identity hashed the input as typed: `-i in/` after `-i in` ran every task again."""
    import shutil

    shutil.copytree(corpus, tmp_path / "in")
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    _run("in", out)
    first = {**_files(out, "_tasks"), **_files(out, "shards"), "manifest.json": (out / "manifest.json").read_bytes()}
    for spelling in ("in/", "./in", "in//", "./in/../in", str(tmp_path / "in"), str(tmp_path / "in") + "/"):
        _run(spelling, out)
        for stage, t in _timings(out).items():
            assert t["ran"] == 0 and t["skipped"] == t["tasks"] > 0, (spelling, stage)
        assert {**_files(out, "_tasks"), **_files(out, "shards"),
                "manifest.json": (out / "manifest.json").read_bytes()} == first, spelling
    # the same files in another folder are another input (their ids come from their location): read again
    shutil.copytree(corpus, tmp_path / "copy")
    _run("copy", out)
    assert _timings(out)["ingest"]["ran"] == _timings(out)["ingest"]["tasks"] > 0
    _run("./in/", out)
    assert _timings(out)["ingest"]["ran"] == _timings(out)["ingest"]["tasks"]
    _run(str(tmp_path / "in"), tmp_path / "fresh")
    assert_same_outputs(tmp_path / "fresh", out)
