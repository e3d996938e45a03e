"""Bad input never crashes a run and never disappears (SPEC §10): quarantine rows and counts."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers import lwm_bound_by_file_modes, lwm_in_process


def traj(i: int, turns: int = 2, domain: str = "terminal") -> dict:
    return {
        "traj_id": f"t{i}",
        "domain": domain,
        "split_key": f"task-{i}",
        "system": {"task_description": f"task {i}", "action_space": "shell keystrokes"},
        "turns": [{"action": f'[{{"keystrokes": "echo {i}-{j}\\n"}}]', "observation": f"{i}-{j}\nroot@box:/# "}
                  for j in range(turns)],
    }


def lwm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = lwm_in_process(*args)  # the report, the exit status and stderr are checked, not the process
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture()
def bad_inputs(tmp_path: Path) -> Path:
    src = tmp_path / "in"
    src.mkdir()
    good = [json.dumps(traj(i)) for i in range(40)]
    lines = good[:10] + ["{not json"] + good[10:20] + [json.dumps({"domain": "terminal", "turns": "nope"})]
    lines += good[20:30] + ['{"pad": "' + "z" * 5000 + '"}'] + good[30:]
    (src / "mixed.jsonl").write_text("\n".join(lines) + "\n")
    blob = gzip.compress(("\n".join(json.dumps(traj(100 + i)) for i in range(300)) + "\n").encode())
    (src / "cut.jsonl.gz").write_bytes(blob[: len(blob) * 2 // 3])
    (src / "other.csv").write_text("a,b\n1,2\n")
    return src


def _quarantine(out: Path) -> list[dict]:
    rows = []
    for p in sorted((out / "quarantine").glob("*.parquet")):
        rows += pq.read_table(p).to_pylist()
    return rows


def test_every_bad_record_is_quarantined_with_locator_and_reason(bad_inputs, tmp_path):
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "-i", str(bad_inputs), "-o", str(out), "--format", "lwm-jsonl",
               "--opt", "max_record_bytes=4096", "--max-quarantine-rate", "0.5")
    rows = _quarantine(out)
    by_file = {(Path(r["uri"]).name, r["locator"], r["reason"]) for r in rows}
    assert ("mixed.jsonl", "line 11", "malformed_json") in by_file
    assert ("mixed.jsonl", "line 22", "missing_field") in by_file
    assert ("mixed.jsonl", "line 33", "line_too_long") in by_file
    truncated = [r for r in rows if r["reason"] == "truncated_stream"]
    assert len(truncated) == 1 and truncated[0]["uri"].endswith("cut.jsonl.gz")
    assert truncated[0]["locator"].startswith("line ")
    wrong = [r for r in rows if r["uri"].endswith("other.csv")]
    assert wrong and all(r["reason"] in ("missing_field", "no_turns", "wrong_type", "bad_domain") for r in wrong)
    manifest = json.loads((out / "manifest.json").read_text())
    c = manifest["counts"]
    filtered = sum(c.get("filtered", {}).values()) if isinstance(c.get("filtered"), dict) else 0
    assert c["records"]["read"] == c["records"]["normalized"] + c["records"]["quarantined"]
    assert c["records"]["quarantined"] == len(rows)
    assert c["trajectories"]["normalized"] == c["trajectories"]["kept"] + filtered
    assert c["records"]["read"] == c["trajectories"]["kept"] + c["records"]["quarantined"] + filtered
    assert c["trajectories"]["kept"] >= 40
    assert (out / "_SUCCESS").exists()
    assert "quarantined" in proc.stderr


def test_quarantine_rate_over_bound_fails_with_one_line(bad_inputs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)  # the output given relative to where lwm runs: the line names it in full
    proc = lwm("run", "--executor", "local", "-i", str(bad_inputs), "-o", "out", "--format", "lwm-jsonl",
               "--max-quarantine-rate", "0.001", check=False)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("lwm: error: quarantine rate")
    assert "Traceback" not in proc.stderr
    assert "worst file" in last and ("mixed.jsonl" in last or "cut.jsonl.gz" in last or "other.csv" in last)
    assert "exceeds the bound 0.1% (--max-quarantine-rate); " in last
    assert last.endswith(f"; each rejected record, with its file, line and reason, is in {out / 'quarantine'}/")
    assert not (out / "_SUCCESS").exists()
    assert _quarantine(out), "the quarantine is kept for inspection"


def test_unrecognized_file_is_quarantined_not_crashing(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "good.jsonl").write_text("\n".join(json.dumps(traj(i)) for i in range(30)) + "\n")
    (src / "weird.json").write_text(json.dumps({"hello": "world"}))
    report = json.loads(lwm("validate", str(src), "--json").stdout)
    assert report["reasons"] == {"unknown_format": 1}
    assert report["records"] == 31 and report["trajectories"] == 30 and report["turns"] == 60
    assert report["format"] == "lwm-jsonl"


@pytest.mark.parametrize("given", [None, "lwm-jsonl"], ids=["sniffed", "--format"])
def test_links_to_nothing_are_unreadable_file_rows_and_the_rest_is_read(given, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "good.jsonl").write_text("\n".join(json.dumps(traj(i)) for i in range(6)) + "\n")
    (src / "dangling.jsonl").symlink_to(src / "gone.jsonl")
    (src / "loop1.jsonl").symlink_to(src / "loop2.jsonl")
    (src / "loop2.jsonl").symlink_to(src / "loop1.jsonl")
    out = tmp_path / "out"
    lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--max-quarantine-rate", "0.5",
        *(["--format", given] if given else []))
    rows = sorted((Path(r["uri"]).name, r["reason"], r["detail"]) for r in _quarantine(out))
    assert rows == [("dangling.jsonl", "unreadable_file", "No such file or directory"),
                    ("loop1.jsonl", "unreadable_file", "Too many levels of symbolic links"),
                    ("loop2.jsonl", "unreadable_file", "Too many levels of symbolic links")]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["records"] == {"read": 9, "normalized": 6, "quarantined": 3}
    assert sorted(e["uri"].rsplit("/", 1)[1] for e in manifest["inputs"] if e.get("unreadable")) == [
        "dangling.jsonl", "loop1.jsonl", "loop2.jsonl"]


def test_sniffed_empty_files_hold_no_record_and_broken_compression_says_so(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "good.jsonl").write_text("\n".join(json.dumps(traj(i)) for i in range(6)) + "\n")
    (src / "empty.jsonl").write_bytes(b"")
    (src / "blank.jsonl").write_text("\n \n\t\n")
    (src / "fake.jsonl.zst").write_text("not zstd at all\n")
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--max-quarantine-rate", "0.2")
    assert "ingest: 7 records read, 1 quarantined, 2 empty files" in proc.stderr
    rows = [(Path(r["uri"]).name, r["reason"]) for r in _quarantine(out)]
    assert rows == [("fake.jsonl.zst", "truncated_stream")]
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    # as under --format: an empty file is no record, so it neither counts as read nor as quarantined
    assert counts["records"] == {"read": 7, "normalized": 6, "quarantined": 1}
    assert counts["files"] == {"empty": 2, "unread": 1}  # the .zst that is no zstd: nothing of it was read
    report = json.loads(lwm("validate", str(src), "--json", "--max-quarantine-rate", "0.2").stdout)
    assert (report["records"], report["quarantined"], report["reasons"]) == (7, 1, {"truncated_stream": 1})


def test_an_unrecognized_folder_unit_is_an_unknown_format_not_an_unreadable_file(tmp_path):
    from stages.ingest.reading import InputUnit, unrecognized

    folder = tmp_path / "session"
    folder.mkdir()
    err = unrecognized(InputUnit(str(folder), is_dir=True))
    assert (err.reason, err.locator) == ("unknown_format", "document")


def test_rows_grouped_into_one_record_count_as_rows_against_the_quarantine_bound(tmp_path):
    """An AgentWorldBench file holds a row per evaluated turn, which the adapter groups into one record per
    trajectory: 4 trajectories of 6 turns are 24 rows, and one bad row beside them is 1 of 25 (4%), not 1
    of 5 (20%), so it stays under the 5% bound."""
    rows = []
    for t in range(4):  # the official layout: a row per evaluated turn, each holding every turn
        prompts = [f"### Turn {j}\n" + ("**Current State:**\nroot@box:/app# \n\n" if j == 1 else "")
                   + f'**Action:**\n```json\n[{{"keystrokes": "echo {t}-{j}\\n", "duration": 0.1}}]\n```'
                   for j in range(1, 7)]
        responses = [f"**Environment Observation:**\n{t}-{j}\nroot@box:/app# " for j in range(1, 7)]
        rows += [{"task": "terminal", "id": f"traj{t}-{n}", "system_str": "You simulate a Linux terminal.",
                  "turn_idx": n, "total_turns": 6, "prompt": prompts, "response": responses,
                  "current_prompt": prompts[n - 1]} for n in range(1, 7)]
    lines = [json.dumps(r) for r in rows] + ['{"task": "terminal", "id": "broken"']
    src = tmp_path / "awb.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "--format", "agentworldbench", "-i", str(src), "-o", str(out))
    assert "ingest: 25 records read, 1 quarantined" in proc.stderr
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["records"] == {"read": 25, "normalized": 24, "quarantined": 1}
    assert counts["trajectories"]["normalized"] == 4
    report = json.loads(lwm("validate", str(src), "--format", "agentworldbench", "--json").stdout)
    assert (report["records"], report["quarantined"]) == (25, 1)


@pytest.mark.parametrize(("fmt", "folder", "records"), [
    ("webvoyager", "mini-swe-agent", 1),  # a shell chat would become a web trajectory of `invalid` actions
    ("magentic-one", "swe-agent", 4),
    ("mini-swe-agent", "openhands", 2),
    ("openhands", "swe-agent", 4),
    ("openhands", "magentic-one", 3),
    ("droidbot", "webvoyager", 1),  # read nothing and said nothing
    ("swe-agent", "magentic-one", 3),  # a role/content history read as a demonstration: filtered without turns
])
def test_a_format_forced_onto_another_formats_logs_quarantines_them_as_the_wrong_format(shared_data, fmt, folder,
                                                                                          records):
    """Not filtered as readable runs without turns, not turned into trajectories: each record is one
    `wrong_format` row, so the run stops at the quarantine bound and says which file."""
    proc = lwm("validate", "--format", fmt, "--json", str(shared_data / folder), check=False)
    report = json.loads(proc.stdout)
    assert (report["records"], report["quarantined"], report["reasons"]) == (records, records, {"wrong_format": records})
    assert report["trajectories"] == 0 and proc.returncode == 1


def test_a_compression_no_reader_opens_is_named_not_sent_to_format(tmp_path):
    import bz2

    path = tmp_path / "logs.jsonl.bz2"
    path.write_bytes(bz2.compress((json.dumps(traj(1)) + "\n").encode()))
    report = json.loads(lwm("validate", "--json", str(path), check=False).stdout)
    assert report["reasons"] == {"wrong_format": 1}
    proc = lwm("validate", str(path), check=False)
    assert ".bz2 files are not read (plain, .gz or .zst)" in proc.stdout + proc.stderr
    assert "give --format" not in proc.stdout + proc.stderr


def _jsonl(path: Path, first: int, n: int) -> Path:
    path.write_text("".join(json.dumps(traj(i)) + "\n" for i in range(first, first + n)))
    return path


@pytest.mark.parametrize("name", ["agent.log", "agent.txt", "agent.out", "agent", "agent.log.gz"])
def test_json_lines_under_a_name_no_reader_knows_are_read_by_their_content(name, tmp_path):
    """A JSONL log saved as ``agent.log`` (or .txt, .out, no suffix, compressed) is read as JSON Lines, sniffed or
    under --format, in a folder (.log) or named: not one quarantined record for the whole file."""
    src = tmp_path / "logs"
    src.mkdir()
    body = "".join(json.dumps(traj(i)) + "\n" for i in range(40))
    (src / name).write_bytes(gzip.compress(body.encode()) if name.endswith(".gz") else body.encode())
    _jsonl(src / "swe.ndjson", 100, 40)
    for args in ([str(src / name)], [str(src / name), "-f", "lwm-jsonl"]):
        report = json.loads(lwm("validate", "--json", *args).stdout)
        assert (report["records"], report["quarantined"], report["trajectories"]) == (40, 0, 40), (args, report)
    out = tmp_path / "out"
    inputs = [str(src)] if name.endswith((".log", ".log.gz")) else [str(src), "-i", str(src / name)]
    proc = lwm("run", "--executor", "local", "--progress", "off", "-i", *inputs, "-o", str(out))
    assert "ingest: 80 records read, 0 quarantined" in proc.stderr, proc.stderr
    assert not _quarantine(out)


def test_a_pretty_printed_json_document_under_an_unknown_suffix_is_read_as_json(tmp_path):
    path = tmp_path / "trajectories.out"
    path.write_text(json.dumps([traj(i) for i in range(3)], indent=2))
    report = json.loads(lwm("validate", "--json", str(path)).stdout)
    assert (report["records"], report["trajectories"], report["quarantined"]) == (3, 3, 0)


def test_a_whole_file_nothing_reads_counts_by_its_bytes_against_the_bound(tmp_path):
    """A 240-line text log beside 40 good records: one quarantined record of 41 is under the 5% bound, but half of the
    input's bytes were never read, so the run fails with one line naming the file, and validate says it would."""
    src = tmp_path / "logs"
    src.mkdir()
    (src / "agent.log").write_text("".join(f"12:00:{i % 60:02d} step {i}: ran ls -la and got 12 files back\n"
                                           for i in range(240)))
    _jsonl(src / "swe.ndjson", 0, 40)
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "--progress", "off", "-i", str(src), "-o", str(out), check=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and not (out / "_SUCCESS").exists(), proc.stderr
    assert last.startswith("lwm: error: ") and "of which nothing was read) exceeds the quarantine bound 5.0%" in last
    assert f"worst file {src / 'agent.log'}: 1 × unknown_format" in last, last
    checked = lwm("validate", str(src), check=False)
    assert checked.returncode == 1 and "of which nothing was read) exceeds the quarantine bound" in checked.stderr
    assert "lwm run would fail" in checked.stderr
    # its row says why, and gives no advice that cannot help: --format reads no plain text either
    assert "give --format" not in checked.stdout and "not JSON Lines, JSON, CSV or Parquet" in checked.stdout
    forced = lwm("validate", "-f", "lwm-jsonl", str(src / "agent.log"), check=False)
    assert forced.returncode == 1 and "wrong_format" in forced.stdout


def test_a_small_file_nothing_reads_ends_the_run_with_a_warning_naming_it(tmp_path):
    src = tmp_path / "logs"
    src.mkdir()
    (src / "notes.log").write_text("started the agent at noon\n")
    _jsonl(src / "swe.ndjson", 0, 40)
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "--progress", "off", "-i", str(src), "-o", str(out))
    size = (src / "notes.log").stat().st_size
    warning = [line for line in proc.stderr.splitlines() if line.startswith("warning: nothing was read from")]
    assert warning == [f"warning: nothing was read from 1 input file ({size:,} bytes, "
                       f"{size / sum(p.stat().st_size for p in src.iterdir()):.1%} of the input): "
                       f"{src / 'notes.log'} (unknown_format); see quarantine/ for why"], proc.stderr
    inputs = json.loads((out / "manifest.json").read_text())["inputs"]
    assert sorted((Path(i["uri"]).name, i.get("unread") or "") for i in inputs) == [("notes.log", "unknown_format"),
                                                                                  ("swe.ndjson", "")]
    report = json.loads(lwm("validate", "--json", str(src)).stdout)
    assert report["unread"] == {"files": 1, "bytes": size}


def test_a_file_that_cannot_be_read_counts_its_size_in_the_input_as_run_and_validate_both_measure_it(tmp_path):
    """Nothing of a mode-000 file is read: its bytes are unread, and the input they are a share of holds them, so the
    share stays under 100% and validate fails exactly where run does."""
    src = tmp_path / "in"
    src.mkdir()
    _jsonl(src / "good.jsonl", 0, 10)
    _jsonl(src / "big.jsonl", 100, 200).chmod(0)
    big, total = (src / "big.jsonl").stat().st_size, sum(p.stat().st_size for p in src.iterdir())
    share = f"{big / total:.1%} of the input ({big:,} of {total:,} bytes, in 1 file of which nothing was read)"
    for bound, fails in (("1", False), ("0.5", True)):
        out = tmp_path / f"out-{bound}"
        run = lwm_bound_by_file_modes("run", "--executor", "local", "--progress", "off", "-i", str(src),
                                      "-o", str(out), "--max-quarantine-rate", bound)
        checked = lwm_bound_by_file_modes("validate", str(src), "--max-quarantine-rate", bound)
        assert (run.returncode, checked.returncode) == ((2, 1) if fails else (0, 0)), run.stderr + checked.stderr
        if fails:
            assert f"lwm: error: {share} exceeds the quarantine bound 50.0%" in run.stderr, run.stderr
            assert f"{share} exceeds the quarantine bound 50.0%: lwm run would fail" in checked.stderr
        else:
            warning = f"warning: nothing was read from 1 input file ({big:,} bytes, {big / total:.1%} of the input)"
            assert warning in run.stderr and warning in checked.stdout + checked.stderr, run.stderr
            inputs = json.loads((out / "manifest.json").read_text())["inputs"]
            assert sorted((Path(i["uri"]).name, i["size"]) for i in inputs) == [("big.jsonl", big),
                                                                                ("good.jsonl", total - big)]


@pytest.mark.parametrize("given", [None, "lwm-jsonl"], ids=["sniffed", "--format"])
def test_a_stream_that_is_not_the_compression_its_name_says_is_unread_with_or_without_format(given, tmp_path):
    """A ``.gz`` that is plain text yields no record, only its broken stream: nothing of it was read, by its bytes,
    whether sniffed or under --format. A ``.gz`` cut short after records were read is not unread."""
    src = tmp_path / "in"
    src.mkdir()
    _jsonl(src / "good.jsonl", 0, 20)
    (src / "notgz.jsonl.gz").write_text("".join(json.dumps(traj(i)) + "\n" for i in range(100, 110)))
    blob = gzip.compress("".join(json.dumps(traj(i)) + "\n" for i in range(200, 500)).encode())
    (src / "cut.jsonl.gz").write_bytes(blob[: len(blob) * 2 // 3])
    size = (src / "notgz.jsonl.gz").stat().st_size
    fmt = ["--format", given] if given else []
    report = json.loads(lwm("validate", "--json", str(src), *fmt, check=False).stdout)
    assert report["unread"] == {"files": 1, "bytes": size}, report
    out = tmp_path / "out"
    lwm("run", "--executor", "local", "--progress", "off", "-i", str(src), "-o", str(out), *fmt,
        "--max-quarantine-rate", "1")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["files"]["unread"] == 1
    assert [Path(i["uri"]).name for i in manifest["inputs"] if i.get("unread")] == ["notgz.jsonl.gz"]


def test_a_local_folder_without_read_permission_is_named_as_unreadable_not_as_a_store_refusal(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    _jsonl(locked / "good.jsonl", 0, 3)
    locked.chmod(0)
    try:
        run = lwm_bound_by_file_modes("run", "--executor", "local", "-i", str(locked), "-o", str(tmp_path / "out"))
        checked = lwm_bound_by_file_modes("validate", str(locked))
    finally:
        locked.chmod(0o755)
    for proc, label in ((run, "run.input (--input)"), (checked, "input")):
        last = proc.stderr.strip().splitlines()[-1]
        assert last == f"lwm: error: {label}: cannot read {locked}: [Errno 13] Permission denied: '{locked}'", last


def test_a_large_local_file_without_read_permission_is_quarantined_not_a_store_refusal(tmp_path):
    """Split into byte ranges by its listed size, its scan cannot read it either: it is read whole, and quarantined."""
    src = tmp_path / "in"
    src.mkdir()
    _jsonl(src / "good.jsonl", 0, 10)
    _jsonl(src / "big.jsonl", 100, 8000).chmod(0)
    assert (src / "big.jsonl").stat().st_size > 2 * 1024 * 1024  # over the smallest range: scanned by ranges
    out = tmp_path / "out"
    proc = lwm_bound_by_file_modes("run", "--executor", "local", "--progress", "off", "-i", str(src), "-o", str(out),
                                   "--format", "lwm-jsonl", "--max-quarantine-rate", "1")
    assert proc.returncode == 0 and "object store" not in proc.stderr, proc.stderr
    assert [(Path(r["uri"]).name, r["reason"]) for r in _quarantine(out)] == [("big.jsonl", "unreadable_file")]
