"""Split reading of large inputs (stages/ingest/ranges.py, pipeline/split_input.py): ranges give exactly the unsplit records."""

from __future__ import annotations

import json
import struct
from itertools import pairwise
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.config import resolve
from pipeline.run import run_pipeline
from pipeline.split_input import run_scan_task, scan_tasks
from schemas.errors import ConfigError, InvalidRecord
from stages.ingest.common import records_from_container
from stages.ingest.frames import zstd_frames
from stages.ingest.ranges import (
    SplitSettings,
    apply_scans,
    file_ranges,
    iter_range_lines,
    plan_ingest,
    range_records,
)
from stages.ingest.reading import InputUnit, LineSplitter, iter_lines, loads

SPLIT = 1000  # bytes per range in the hand-built file below


def _traj(i: int, pad: int = 0, with_id: bool = True) -> dict:
    value = {
        "domain": "terminal",
        "system": {"task_description": f"task {i}", "action_space": "shell"},
        "turns": [{"action": f"ls {i}", "observation": "x" * pad + f" out {i}"}, {"action": "pwd", "observation": "/"}],
    }
    if with_id:
        value["traj_id"] = f"t{i:04d}"
    return value


def _line(i: int, length: int, with_id: bool = True) -> bytes:
    """A JSONL line (with its newline) of exactly `length` bytes."""
    base = json.dumps(_traj(i, 0, with_id)).encode()
    pad = length - len(base) - 1
    assert pad >= 0
    return json.dumps(_traj(i, pad, with_id)).encode() + b"\n"


def planted_file(path: Path) -> bytes:
    """Lines placed on the range boundaries of SPLIT bytes (offsets counted by hand):

    - line 1 fills [0, 1000): its newline is the last byte of range 0, so line 2 starts exactly at 1000;
    - line 2 spans [1000, 1700), line 3 [1700, 2300): it straddles the boundary at 2000;
    - line 4 is blank, 1 byte at 2300; line 5 is malformed JSON [2301, 2999): its newline is byte 2999;
    - line 6 starts at 3000 (a boundary) without a traj_id, line 7 ends the file with no newline.
    """
    data = _line(1, 1000) + _line(2, 700) + _line(3, 600) + b"\n" + b"{not json" + b" " * 689 + b"\n"
    assert len(data) == 3000
    data += _line(6, 500, with_id=False) + _line(7, 401)[:-1]
    assert len(data) == 3900
    path.write_bytes(data)
    return data


def _records(items) -> list:
    return [
        ("invalid", i.reason, i.locator) if isinstance(i, InvalidRecord) else (i.locator, i.uri, i.format, i.payload)
        for i in items
    ]


def split_read(uri: str, split_bytes: int, tmp: Path) -> tuple[list, int]:
    """Records of every range of `uri` in order (through the scan pass), and the number of ranges."""
    plan = plan_ingest([(InputUnit(uri), "lwm-jsonl")], SplitSettings(split_bytes, 1, 1))
    scans = [run_scan_task({**t, "spec_hash": "s"}) for t in scan_tasks(plan, str(tmp / "out"))]
    plan = apply_scans(plan, scans)
    out = []
    for work in plan:
        if work.byte_range is None:
            out += _records(records_from_container(work.units[0], "lwm-jsonl", {}))
        else:
            out += _records(range_records(uri, "lwm-jsonl", work.task_fields()["range"], 1 << 20))
    return out, len(plan)


def test_planted_boundary_lines_are_read_once_with_their_true_line_numbers(tmp_path):
    path = tmp_path / "big.jsonl"
    planted_file(path)
    whole = _records(records_from_container(InputUnit(str(path)), "lwm-jsonl", {}))
    split, n = split_read(str(path), SPLIT, tmp_path)
    assert n == 4  # 3900 bytes in ranges of 1000
    assert split == whole
    assert [r[2] if r[0] == "invalid" else r[0] for r in split] == [
        "line 1", "line 2", "line 3", "line 5", "line 6", "line 7"
    ]
    assert ("invalid", "malformed_json", "line 5") in split


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(split_bytes=st.integers(min_value=3, max_value=4000))
@example(split_bytes=1700)
@example(split_bytes=2999)
@example(split_bytes=3000)
@example(split_bytes=3899)
def test_any_range_size_reads_the_same_records(tmp_path, split_bytes):
    path = tmp_path / "big.jsonl"
    if not path.exists():
        planted_file(path)
    whole = _records(records_from_container(InputUnit(str(path)), "lwm-jsonl", {}))
    split, n = split_read(str(path), split_bytes, tmp_path)
    assert n == (1 if split_bytes >= 3900 else -(-3900 // split_bytes))
    assert split == whole


def _frames(data: bytes, cuts: list[int]) -> bytes:
    """Independent zstd frames cut at arbitrary byte offsets (not at line ends)."""
    edges = [0, *cuts, len(data)]
    cctx = zstandard.ZstdCompressor(write_checksum=True)
    return b"".join(cctx.compress(data[a:b]) for a, b in pairwise(edges))


def _seek_table(frames: list[bytes], raw: list[int]) -> bytes:
    entries = b"".join(struct.pack("<II", len(f), n) for f, n in zip(frames, raw))
    body = entries + struct.pack("<IBI", len(frames), 0, 0x8F92EAB1)
    return struct.pack("<II", 0x184D2A5E, len(body)) + body


def test_multi_frame_zstd_is_split_at_frames_and_reads_the_same(tmp_path):
    data = planted_file(tmp_path / "plain.jsonl")
    path = tmp_path / "big.jsonl.zst"
    path.write_bytes(_frames(data, [450, 1200, 2050, 2999, 3500]))
    assert len(zstd_frames(str(path), path.stat().st_size)) == 6
    whole = _records(records_from_container(InputUnit(str(path)), "lwm-jsonl", {}))
    for split_bytes, ranges in ((1, 6), (path.stat().st_size // 3, 3)):
        split, n = split_read(str(path), split_bytes, tmp_path)
        assert n == ranges
        assert split == whole, split_bytes
    assert [r[0] for r in whole if r[0] != "invalid"] == ["line 1", "line 2", "line 3", "line 6", "line 7"]


def test_seekable_zstd_uses_its_seek_table(tmp_path):
    data = planted_file(tmp_path / "plain.jsonl")
    cctx = zstandard.ZstdCompressor()
    chunks = [data[0:1500], data[1500:2600], data[2600:]]
    frames = [cctx.compress(c) for c in chunks]
    path = tmp_path / "seekable.jsonl.zst"
    path.write_bytes(b"".join(frames) + _seek_table(frames, [len(c) for c in chunks]))
    offsets = [0, len(frames[0]), len(frames[0]) + len(frames[1])]
    assert zstd_frames(str(path), path.stat().st_size) == [(o, len(f)) for o, f in zip(offsets, frames)]
    whole = _records(records_from_container(InputUnit(str(path)), "lwm-jsonl", {}))
    split, n = split_read(str(path), 1, tmp_path)
    assert n == 3
    assert split == whole


def test_single_frame_gzip_and_truncated_zstd_stay_whole(tmp_path):
    import gzip

    data = planted_file(tmp_path / "plain.jsonl")
    one = tmp_path / "one.jsonl.zst"
    one.write_bytes(zstandard.ZstdCompressor().compress(data))
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(data))
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(_frames(data, [1000, 2000])[:-5])
    for p in (one, gz, cut):
        assert len(file_ranges(InputUnit(str(p)), "lwm-jsonl", p.stat().st_size, 10)) == 1, p.name
    assert zstd_frames(str(cut), cut.stat().st_size) == []
    # a format that is not one record per line is never split
    assert len(file_ranges(InputUnit(str(tmp_path / "plain.jsonl")), "agentworldbench", 3900, 10)) == 1


def _cfg(inputs: list[str], out: Path, **ingest) -> dict:
    return resolve(
        {"ingest": ingest, "pools": {"ratios": {"cpt": 0.5, "sft": 0.3, "rl": 0.1, "eval": 0.1}}},
        {"run": {"input": inputs, "out": str(out)}, "executor": {"kind": "local", "progress": "off"}},
    )


def _layer(out: Path, layer: str, key: str) -> list[dict]:
    rows = [r for p in sorted((out / layer).glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    return sorted(rows, key=lambda r: r[key])


def test_pipeline_on_a_split_file_matches_the_unsplit_run(tmp_path):
    path = tmp_path / "in" / "big.jsonl"
    path.parent.mkdir()
    lines = [_line(i, 300 + (i * 37) % 500, with_id=i % 3 != 0) for i in range(120)]
    lines[50] = b'{"broken": \n'
    lines[80] = b"[" * 100_000 + b"]" * 100_000 + b"\n"  # past the parser's depth, and across many ranges
    path.write_bytes(b"".join(lines))
    run_pipeline(_cfg([str(path)], tmp_path / "whole"), echo=lambda m: None)
    manifest = run_pipeline(_cfg([str(path)], tmp_path / "split", split_bytes=8192), echo=lambda m: None)
    timings = json.loads((tmp_path / "split" / "_timings.json").read_text())
    n_ranges = -(-path.stat().st_size // 8192)
    assert n_ranges >= 3
    assert timings["scan"]["tasks"] == timings["ingest"]["tasks"] == n_ranges
    for layer, key in (("trajectories", "traj_id"), ("quarantine", "locator"), ("raw", "locator")):
        assert _layer(tmp_path / "split", layer, key) == _layer(tmp_path / "whole", layer, key)
    assert len(_layer(tmp_path / "split", "trajectories", "traj_id")) == 118
    assert [(q["locator"], q["reason"]) for q in _layer(tmp_path / "split", "quarantine", "locator")] == [
        ("line 51", "malformed_json"), ("line 81", "too_deep")
    ]
    raw = {r["locator"]: r["payload"] for r in _layer(tmp_path / "split", "raw", "locator")}
    assert raw == {f"line {i + 1}": line.decode().rstrip("\n") for i, line in enumerate(lines) if i not in (50, 80)}
    for shard in sorted((tmp_path / "whole" / "shards").rglob("*.parquet")):
        twin = tmp_path / "split" / shard.relative_to(tmp_path / "whole")
        assert twin.read_bytes() == shard.read_bytes(), shard.name
    edges = sorted(i["range"] for i in manifest["inputs"])
    assert [a for a, _ in edges] == [b for _, b in [(0, 0), *edges[:-1]]]  # the ranges tile the file
    assert edges[-1][1] == path.stat().st_size == sum(i["size"] for i in manifest["inputs"])


def test_small_files_are_grouped_and_read_the_same(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for f in range(10):
        (src / f"f{f:02d}.jsonl").write_bytes(b"".join(_line(f * 10 + i, 300) for i in range(10)))
    (src / "f07.jsonl").write_bytes((src / "f07.jsonl").read_bytes() + b"oops\n")
    run_pipeline(_cfg([str(src)], tmp_path / "one", group_files=1), echo=lambda m: None)
    manifest = run_pipeline(_cfg([str(src)], tmp_path / "grouped", group_files=4), echo=lambda m: None)
    timings = json.loads((tmp_path / "grouped" / "_timings.json").read_text())
    assert timings["ingest"]["tasks"] == 3  # 4 + 4 + 2 files
    assert json.loads((tmp_path / "one" / "_timings.json").read_text())["ingest"]["tasks"] == 10
    assert _layer(tmp_path / "grouped", "trajectories", "traj_id") == _layer(tmp_path / "one", "trajectories", "traj_id")
    assert sorted(i["uri"] for i in manifest["inputs"]) == sorted(str(p) for p in src.iterdir())
    assert manifest["counts"]["records"]["quarantined"] == 1
    strict = _cfg([str(src)], tmp_path / "grouped", group_files=4)
    strict["run"]["max_quarantine_rate"] = 0.0
    with pytest.raises(ConfigError, match=r"worst file .*f07\.jsonl: 1 × malformed_json"):
        run_pipeline(strict, echo=lambda m: None)


def test_groups_never_mix_formats_and_large_files_stay_alone(tmp_path):
    units = []
    for name, size in (("a.jsonl", 10), ("b.jsonl", 10), ("c.json", 10), ("d.jsonl", 5000), ("e.jsonl", 10)):
        (tmp_path / name).write_bytes(b"x" * size)
        units.append((InputUnit(str(tmp_path / name)), "sharegpt" if name == "c.json" else "lwm-jsonl"))
    plan = plan_ingest(units, SplitSettings(split_bytes=1 << 20, group_bytes=1000, group_files=8))
    assert [[Path(u.uri).name for u in w.units] for w in plan] == [["a.jsonl", "b.jsonl"], ["c.json"], ["d.jsonl"], ["e.jsonl"]]
    assert plan[0].task_id != plan[2].task_id and len({w.task_id for w in plan}) == 4


def test_a_range_record_hands_out_the_value_its_payload_parses_to(tmp_path):
    # the reader's parsed value spares the adapter a second parse; it must be what parsing the payload gives,
    # also for the values msgspec leaves to json (NaN, lone surrogates) and for huge integers and -0.0
    lines = ['{"a": [1, 2.5, -0.0, 123456789012345678901234567890], "b": "\\u00e9\\n"}',
             '{"n": NaN, "s": "\\ud800", "d": {"x": 1, "x": 2}}', '{"t": true, "u": null, "v": 1e-7}']
    path = tmp_path / "v.jsonl"
    path.write_text("\n".join(lines) + "\n")
    size = path.stat().st_size
    r = {"start": 0, "end": size, "compression": None, "length": size, "lines_before": 0, "skip_partial": False}
    records = list(range_records(str(path), "lwm-jsonl", r, 1 << 20))
    assert len(records) == 3
    for rec, line in zip(records, lines, strict=True):
        assert rec.parsed  # the reader's value is there to hand out
        value = rec.value()
        assert repr(value) == repr(loads(rec.payload)) == repr(loads(line))  # ingest's parser: NaN is read as null
        assert not rec.parsed and repr(rec.value()) == repr(value)  # handed out once; later calls parse the payload


def test_a_jsonl_records_payload_is_its_line_as_written_split_or_not(tmp_path):
    # The raw layer keeps each record as its input wrote it: spacing, escapes, key order and a repeated key
    # would all change in a dump of the parsed value. A line nested past the parser's depth is refused by
    # name in a range as it is unsplit (it used to escape the range reader as a RecursionError).
    lines = ['{"b":"\\u00e9","a":[1,2.50,-0.0]}', '{ "x" : 1 , "x" : 2 }', '{"n":NaN,"s":"\\ud800"}',
             "[" * 100_000 + "]" * 100_000, '{"t":true}']
    path = tmp_path / "w.jsonl"
    path.write_bytes("\r\n".join(lines).encode() + b"\n")  # CRLF: the reader drops the \r before the \n
    size = path.stat().st_size
    r = {"start": 0, "end": size, "compression": None, "length": size, "lines_before": 0, "skip_partial": False}
    unsplit = list(records_from_container(InputUnit(str(path)), "lwm-jsonl", {}))
    split = list(range_records(str(path), "lwm-jsonl", r, 1 << 20))
    assert _records(split) == _records(unsplit)
    assert [x.reason for x in unsplit if isinstance(x, InvalidRecord)] == ["too_deep"]
    kept = [x for x in unsplit if not isinstance(x, InvalidRecord)]
    assert [x.payload for x in kept] == [lines[0], lines[1], lines[2], lines[4]]
    assert [x.locator for x in kept] == ["line 1", "line 2", "line 3", "line 5"]
    for rec in split + unsplit:
        if not isinstance(rec, InvalidRecord):
            assert rec.parsed and repr(rec.value()) == repr(loads(rec.payload))


def _lines(items) -> list:
    return [("invalid", i.reason, i.locator) if isinstance(i, InvalidRecord) else i for i in items]


ODD_LINES = (
    b"\xef\xbb\xbf" + b'{"first": "after a byte order mark"}\r\n'  # line 1: BOM and CRLF
    + b"\n"  # line 2: blank
    + b"   \t \r\n"  # line 3: only whitespace
    + b'{"long": "' + b"x" * 400 + b'"}\n'  # line 4: over the 200-byte limit below
    + b'{"bad": "\xff\xfe"}\n'  # line 5: not UTF-8
    + b'{"plain": "' + b"y" * 150 + b'"}\r\n'  # line 6
    + b'{"last": "no newline"}'  # line 7
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(split_bytes=st.integers(min_value=1, max_value=len(ODD_LINES) - 1))
@example(split_bytes=1)  # a range inside the byte order mark
@example(split_bytes=3)  # the first range ends right after it
def test_ranges_give_the_lines_of_a_whole_read_bom_blank_oversized_and_bad_bytes_included(tmp_path, split_bytes):
    """`iter_range_lines` over every range of a file equals `iter_lines` over the whole file, line numbers and
    rejections included, wherever the ranges cut it (both read through `LineSplitter`)."""
    path = tmp_path / "odd.jsonl"
    path.write_bytes(ODD_LINES)
    whole = _lines(iter_lines(str(path), 200))
    assert whole == [
        (1, '{"first": "after a byte order mark"}'),
        ("invalid", "line_too_long", "line 4"),
        ("invalid", "bad_encoding", "line 5"),
        (6, '{"plain": "' + "y" * 150 + '"}'),
        (7, '{"last": "no newline"}'),
    ]
    plan = plan_ingest([(InputUnit(str(path)), "lwm-jsonl")], SplitSettings(split_bytes, 1, 1))
    scans = [run_scan_task({**t, "spec_hash": "s"}) for t in scan_tasks(plan, str(tmp_path / "out"))]
    split = []
    for work in apply_scans(plan, scans):
        assert work.byte_range is not None
        split += _lines(iter_range_lines(str(path), work.task_fields()["range"], 200))
    assert split == whole


def test_a_stream_that_fails_leaves_the_number_of_the_last_line_it_ended():
    """What `iter_lines` and `iter_range_lines` name as the failing line (``line {lineno + 1}``)."""

    def chunks():
        yield b"a\nb"
        yield b"c\nd"
        raise OSError("connection reset")

    splitter = LineSplitter("mem://x", 100, lineno=10)
    got = []
    with pytest.raises(OSError):
        for item in splitter.lines(chunks()):
            got.append(item)
    assert got == [(11, "a"), (12, "bc")]
    assert splitter.lineno == 12


def test_a_file_cut_short_after_its_ranges_were_measured_is_reported_not_lost(tmp_path):
    """The ranges beyond the new end of a file truncated while a run reads it give a `truncated_stream` record
    each (quarantined, so the loss shows), not silently no lines."""
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps({"n": i, "pad": "x" * 50}) + "\n" for i in range(200)))
    plan = plan_ingest([(InputUnit(str(path)), "lwm-jsonl")], SplitSettings(2000, 1, 1))
    scans = [run_scan_task({**t, "spec_hash": "s"}) for t in scan_tasks(plan, str(tmp_path / "out"))]
    ranges = [w.task_fields()["range"] for w in apply_scans(plan, scans)]
    assert len(ranges) > 4
    cut = path.stat().st_size // 2
    with open(path, "r+b") as f:
        f.truncate(cut)
    results = [_lines(iter_range_lines(str(path), r, 1 << 20)) for r in ranges]
    for r, lines in zip(ranges, results):
        if r["start"] + r["length"] <= cut:
            assert all(not (isinstance(x, tuple) and x[0] == "invalid") for x in lines)
        else:  # the range the cut falls in, and every one after it
            assert lines[-1][:2] == ("invalid", "truncated_stream"), (r, lines[-1:])
