"""Reading inputs: containers, compression, fsspec URLs, streaming bounds, expansion."""

from __future__ import annotations

import gzip
import json
import tracemalloc

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from schemas.errors import ConfigError, InvalidRecord
from stages.ingest.reading import (
    container_of,
    expand_inputs,
    iter_container,
    iter_csv,
    iter_jsonl,
    iter_lines,
    json_container_by_content,
    split_compression,
)

ROWS = [{"a": i, "text": f"row {i} ü"} for i in range(5)]


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


@pytest.mark.parametrize(
    ("name", "encode"),
    [
        ("x.jsonl", lambda b: b),
        ("x.jsonl.gz", gzip.compress),
        ("x.jsonl.zst", lambda b: zstandard.ZstdCompressor().compress(b)),
    ],
)
def test_jsonl_plain_and_compressed(tmp_path, name, encode):
    path = tmp_path / name
    path.write_bytes(encode(_jsonl(ROWS)))
    got = list(iter_jsonl(str(path)))
    assert [loc for loc, _ in got] == [f"line {i}" for i in range(1, 6)]
    assert [v for _, v in got] == ROWS


def test_json_document_list_and_object(tmp_path):
    (tmp_path / "l.json").write_text(json.dumps(ROWS))
    (tmp_path / "o.json").write_text(json.dumps({"k": 1}))
    assert [loc for loc, _ in iter_container(str(tmp_path / "l.json"))] == [f"item {i}" for i in range(5)]
    assert list(iter_container(str(tmp_path / "o.json"))) == [("document", {"k": 1})]


def test_csv_and_parquet(tmp_path):
    (tmp_path / "t.csv").write_text('a,text\n1,"multi\nline"\n2,plain\n')
    assert list(iter_csv(str(tmp_path / "t.csv"))) == [("row 1", {"a": "1", "text": "multi\nline"}),
                                                       ("row 2", {"a": "2", "text": "plain"})]
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "t.parquet")
    got = list(iter_container(str(tmp_path / "t.parquet")))
    assert got[3] == ("row 3", ROWS[3])


def test_memory_filesystem_and_globs():
    fs = fsspec.filesystem("memory")
    fs.pipe("/lwmtest/in/a.jsonl", _jsonl(ROWS[:2]))
    fs.pipe("/lwmtest/in/sub/b.jsonl", _jsonl(ROWS[2:]))
    fs.pipe("/lwmtest/in/LICENSE", b"not data")
    units = expand_inputs(["memory://lwmtest/in"])
    assert [u.uri for u in units] == ["memory:///lwmtest/in/a.jsonl", "memory:///lwmtest/in/sub/b.jsonl"]
    assert [u.uri for u in expand_inputs(["memory://lwmtest/in/*.jsonl"])] == ["memory:///lwmtest/in/a.jsonl"]
    assert sum(1 for _ in iter_jsonl(units[1].uri)) == 3


def test_missing_input_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="input not found"):
        expand_inputs([str(tmp_path / "nope.jsonl")])


def test_names():
    assert split_compression("a/b.jsonl.zst") == ("a/b.jsonl", "zstd")
    assert container_of("x.TRAJ") == "json"
    assert container_of("x.csv.gz") == "csv"


def test_long_line_is_reported_without_being_held(tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"ok": 1}\n')
        f.write(b'{"x": "' + b"a" * (30 * 1024 * 1024) + b'"}\n')
        f.write(b'{"ok": 2}\n')
    tracemalloc.start()
    got = list(iter_lines(str(path), max_bytes=1024 * 1024))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert isinstance(got[1], InvalidRecord)
    assert (got[1].reason, got[1].locator) == ("line_too_long", "line 2")
    assert got[0] == (1, '{"ok": 1}') and got[2] == (3, '{"ok": 2}')
    assert peak < 8 * 1024 * 1024  # a 30 MB line never sits in memory


def test_memory_stays_flat_with_file_size(tmp_path):
    path = tmp_path / "many.jsonl.gz"
    with gzip.open(path, "wb") as f:
        for i in range(60000):
            f.write(json.dumps({"i": i, "pad": "x" * 200}).encode() + b"\n")
    tracemalloc.start()
    n = sum(1 for _ in iter_jsonl(str(path)))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert n == 60000
    assert peak < 6 * 1024 * 1024  # ~13 MB of text streamed in bounded memory


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_truncated_stream(tmp_path, suffix):
    data = _jsonl([{"i": i, "pad": "y" * 500} for i in range(400)])
    blob = gzip.compress(data) if suffix == ".gz" else zstandard.ZstdCompressor().compress(data)
    path = tmp_path / f"t.jsonl{suffix}"
    path.write_bytes(blob[: len(blob) // 2])
    got = list(iter_jsonl(str(path)))
    assert isinstance(got[-1], InvalidRecord) and got[-1].reason == "truncated_stream"
    assert got[-1].locator.startswith("line ")
    assert all(not isinstance(g, InvalidRecord) for g in got[:-1])


def test_one_file_has_one_uri_however_the_input_is_spelled(tmp_path, monkeypatch):
    data = tmp_path / "real" / "data"
    data.mkdir(parents=True)
    (tmp_path / "real" / "other").mkdir()
    (data / "a.jsonl").write_bytes(_jsonl(ROWS))
    (tmp_path / "alias").symlink_to(tmp_path / "real")  # a linked folder above the input
    (tmp_path / "real" / "datalink").symlink_to(data)  # a link as the input itself
    monkeypatch.chdir(tmp_path / "real" / "other")
    expected = [str((data / "a.jsonl").resolve())]
    spellings = [str(data), str(tmp_path / "real" / "other" / ".." / "data"), "../data", str(tmp_path / "alias" / "data"),
                 str(tmp_path / "alias" / "data" / "a.jsonl"), "../data/", "../data/*.jsonl"]
    for spec in spellings:
        assert [u.uri for u in expand_inputs([spec])] == expected, spec
    # the last component stays as written: a link given as the input is walked under its own name
    assert [u.uri for u in expand_inputs(["../datalink"])] == [str(tmp_path.resolve() / "real" / "datalink" / "a.jsonl")]


def test_a_run_gives_the_same_shards_however_the_input_is_spelled(shared_data, tmp_path):
    # ShareGPT records carry no id: trajectory ids, split keys and so pools come from the file's URI
    from tests.helpers import lwm_in_process

    (tmp_path / "alias").symlink_to(shared_data)
    (tmp_path / "sub").mkdir()
    spellings = [str(shared_data / "sharegpt-glaive"), str(tmp_path / "alias" / "sharegpt-glaive"),
                 str(tmp_path / "sub" / ".." / "alias" / "sharegpt-glaive")]
    shards = []
    for n, spec in enumerate(spellings):
        out = tmp_path / f"out{n}"
        proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "-i", spec, "-o", str(out))
        assert proc.returncode == 0, proc.stderr[-2000:]
        files = sorted(p for p in (out / "shards").rglob("*.parquet"))
        assert files
        shards.append({str(p.relative_to(out)): p.read_bytes() for p in files})
        ids = pq.read_table(out / "shards" / files[0].relative_to(out / "shards"), columns=["traj_id"])
        assert ids.num_rows > 0
    assert shards[1] == shards[0] and shards[2] == shards[0]


@pytest.mark.parametrize(("text", "kind"), [
    ('{"a": 1}\n{"a": 2}\n', "jsonl"),
    ('\ufeff\n  {"a": 1}\n[1, 2]\n', "jsonl"),
    ('{"a": 1}\n', "json"),  # one value: a document (a one-line JSONL reads the same record)
    ('[\n  {"a": 1},\n  {"a": 2}\n]\n', "json"),
    ('{\n  "a": [\n    1\n  ]\n}\n', "json"),
    ('{"a": \n{"a": 2}\n{"a": 3}\n{"a": 4}\n', "jsonl"),  # JSON Lines whose first line is damaged
    ("12:00:01 started\n", None),
    ("", None),
    ("a,b\n1,2\n", None),
])
def test_json_container_by_content_tells_lines_from_a_document(text, kind):
    assert json_container_by_content(text.encode().removeprefix(b"\xef\xbb\xbf")) == kind


def test_a_first_line_longer_than_the_head_opens_an_object_in_json_lines():
    head = ('{"pad": "' + "x" * 70000).encode()[:65536]
    assert json_container_by_content(head) == "jsonl"
    assert json_container_by_content(b"[" + head[1:]) == "json"
