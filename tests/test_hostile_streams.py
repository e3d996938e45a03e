"""Hostile byte streams: truncated compressed files keep every whole record before the cut, a UTF-8
BOM is accepted, and a decompression bomb costs bounded memory and linear time."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

from schemas.errors import InvalidRecord
from stages.ingest.reading import InputUnit, iter_container, iter_csv, iter_jsonl, iter_lines
from stages.ingest.registry import sniff
from tests.helpers import lwm_in_process


def traj(i: int) -> dict:
    return {"traj_id": f"t{i}", "domain": "terminal", "split_key": f"task-{i}",
            "system": {"task_description": f"task {i}", "action_space": "shell keystrokes"},
            "turns": [{"action": f'[{{"keystrokes": "echo {i}-{j}\\n"}}]',
                       "observation": f"{i}-{j} " + "word " * (i % 40) + "\nroot@box:/# "} for j in range(2)]}


def lines_blob(n: int) -> bytes:
    return "".join(json.dumps(traj(i)) + "\n" for i in range(n)).encode()


COMPRESSORS = {
    "gz": (gzip.compress, lambda cut: zlib.decompressobj(wbits=31).decompress(cut)),
    "zst": (lambda b: zstandard.ZstdCompressor().compress(b),
            lambda cut: zstandard.ZstdDecompressor().decompressobj().decompress(cut)),
}


@pytest.mark.parametrize("suffix", ["gz", "zst"])
def test_cut_file_keeps_every_whole_line_before_the_cut(tmp_path, suffix):
    compress, decodable = COMPRESSORS[suffix]
    blob = compress(lines_blob(3000))
    cut = blob[: len(blob) * 6 // 10]
    path = tmp_path / f"cut.jsonl.{suffix}"
    path.write_bytes(cut)
    # what the compression library itself can decode from the cut file, in whole lines
    expected = decodable(cut).count(b"\n")
    assert expected > 800
    items = list(iter_lines(str(path)))
    good = [x for x in items if not isinstance(x, InvalidRecord)]
    bad = [x for x in items if isinstance(x, InvalidRecord)]
    assert len(good) == expected
    assert [g[0] for g in good] == list(range(1, expected + 1))
    assert len(bad) == 1 and bad[0].reason == "truncated_stream" and bad[0].locator == f"line {expected + 1}"


def lwm(*args: str) -> subprocess.CompletedProcess:
    return lwm_in_process(*args)  # the runs' outputs are checked; the bomb's reader below is a process of its own


@pytest.mark.parametrize("suffix", ["gz", "zst"])
def test_cut_file_through_a_run_keeps_the_accounting_identity(tmp_path, suffix):
    compress, decodable = COMPRESSORS[suffix]
    blob = compress(lines_blob(600))
    cut = blob[: len(blob) * 6 // 10]
    src = tmp_path / "in"
    src.mkdir()
    (src / f"cut.jsonl.{suffix}").write_bytes(cut)
    whole = decodable(cut).count(b"\n")
    out = tmp_path / "out"
    proc = lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), "--format", "lwm-jsonl",
               "--max-quarantine-rate", "0.5")
    assert proc.returncode == 0, proc.stderr
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    quarantine = pq.read_table(next((out / "quarantine").glob("*.parquet"))).to_pylist()
    assert [q["reason"] for q in quarantine] == ["truncated_stream"]
    read = counts["read"] if isinstance(counts.get("read"), int) else counts["records"]["read"]
    assert read == whole + 1
    ids = pq.read_table(next((out / "trajectories").glob("*.parquet")), columns=["traj_id"]).column("traj_id")
    assert sorted(ids.to_pylist()) == sorted(f"t{i}" for i in range(whole))


# --- UTF-8 byte order mark --------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_bom_is_accepted_and_stripped(tmp_path, suffix):
    body = "\ufeff" + "".join(json.dumps(traj(i)) + "\n" for i in range(3))
    path = tmp_path / f"bom.jsonl{suffix}"
    path.write_bytes(gzip.compress(body.encode()) if suffix else body.encode())
    got = list(iter_jsonl(str(path)))
    assert [loc for loc, _ in got] == ["line 1", "line 2", "line 3"]
    assert got[0][1]["traj_id"] == "t0"
    assert sniff(InputUnit(str(path)))[0] == "lwm-jsonl"


def test_bom_in_json_and_csv_documents(tmp_path):
    (tmp_path / "d.json").write_bytes(b"\xef\xbb\xbf" + json.dumps([traj(0), traj(1)]).encode())
    assert [loc for loc, _ in iter_container(str(tmp_path / "d.json"))] == ["item 0", "item 1"]
    (tmp_path / "t.csv").write_bytes(b"\xef\xbb\xbfa,b\n1,2\n")
    assert list(iter_csv(str(tmp_path / "t.csv"))) == [("row 1", {"a": "1", "b": "2"})]


def test_bom_file_runs_without_quarantine(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "bom.jsonl").write_bytes(("\ufeff" + "".join(json.dumps(traj(i)) + "\n" for i in range(4))).encode())
    for extra in ([], ["--format", "lwm-jsonl"]):
        out = tmp_path / f"out{len(extra)}"
        proc = lwm("run", "--executor", "local", "-i", str(src), "-o", str(out), *extra)
        assert proc.returncode == 0, proc.stderr
        assert not any(pq.read_table(p).num_rows for p in (out / "quarantine").glob("*.parquet"))
        ids = pq.read_table(next((out / "trajectories").glob("*.parquet")), columns=["traj_id"]).column("traj_id")
        assert sorted(ids.to_pylist()) == ["t0", "t1", "t2", "t3"]


# --- decompression bomb -------------------------------------------------------------------------

BOMB_READER = textwrap.dedent("""
    import sys, time
    from stages.ingest.reading import iter_lines
    start = time.process_time()
    items = list(iter_lines(sys.argv[1], max_bytes=1 << 20))
    took = time.process_time() - start
    # VmHWM is this process's own peak: ru_maxrss would carry the parent's peak over the exec
    hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(len(items), items[0].reason, took, hwm // 1024)
""")


def write_zst_bomb(path: Path, size: int) -> None:
    with open(path, "wb") as f, zstandard.ZstdCompressor(level=19).stream_writer(f, size=size) as w:
        zeros = b"\0" * (1 << 24)
        for _ in range(size // len(zeros)):
            w.write(zeros)


def read_bomb(path: Path) -> tuple[float, int]:
    proc = subprocess.run([sys.executable, "-c", BOMB_READER, str(path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    n, reason, took, rss_mib = proc.stdout.split()
    assert (n, reason) == ("1", "line_too_long")
    return float(took), int(rss_mib)


def test_zstd_bomb_costs_bounded_memory_and_linear_time(tmp_path):
    small, big = tmp_path / "s.jsonl.zst", tmp_path / "b.jsonl.zst"
    write_zst_bomb(small, 1 << 28)  # 256 MiB of zeros
    write_zst_bomb(big, 1 << 30)  # 1 GiB of zeros
    assert big.stat().st_size < 64 * 1024
    t_small, rss_small = read_bomb(small)
    t_big, rss_big = read_bomb(big)
    # memory: the interpreter plus bounded buffers, and no growth with the expanded size
    assert rss_big < 400 and rss_big - rss_small < 40, (rss_small, rss_big)
    # time: 4x the bytes takes about 4x the time, not 16x
    assert t_big < 8 * max(t_small, 0.5), (t_small, t_big)
