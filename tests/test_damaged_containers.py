"""A damaged part of a container costs that part only: a Parquet row group that cannot be decoded, a CSV row the
parser rejects or that is not UTF-8, a first line that is not JSON; the rest of the file is read, and counted."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from schemas.errors import InvalidRecord
from stages.ingest.reading import iter_csv, iter_parquet
from tests.helpers import lwm_in_process


def _chat(i: int) -> dict:
    """An OpenAI-messages record with two tool calls, as CSV and Parquet inputs hold them (JSON text columns)."""
    call = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{k}", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": f"c{i}-{k}"})}}
    ]} for k in (1, 2)]
    messages = [{"role": "user", "content": f"weather in city {i}? " + "pad " * 50},
                call[0], {"role": "tool", "tool_call_id": "c1", "content": f"{i}C sunny"},
                call[1], {"role": "tool", "tool_call_id": "c2", "content": f"{i + 1}C rain"},
                {"role": "assistant", "content": "done"}]
    tools = [{"type": "function", "function": {"name": "get_weather",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    return {"id": f"r{i}", "messages": json.dumps(messages), "tools": json.dumps(tools)}


def _quarantine(out: Path) -> list[dict]:
    return [r for p in sorted((out / "quarantine").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def _trajectories(out: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in (out / "trajectories").glob("*.parquet"))


def _damage_row_group(path: Path, group: int) -> None:
    """Overwrite the pages of the `messages` column of one row group, keeping the file's footer."""
    meta = pq.ParquetFile(path).metadata.row_group(group).column(1)
    data = bytearray(path.read_bytes())
    for i in range(meta.data_page_offset + 40, meta.data_page_offset + meta.total_compressed_size - 40):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def test_a_parquet_row_group_that_cannot_be_decoded_costs_its_rows_only(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    path = src / "chats.parquet"
    pq.write_table(pa.Table.from_pylist([_chat(i) for i in range(400)]), path, row_group_size=100, compression="snappy")
    _damage_row_group(path, 1)
    with pq.ParquetFile(path) as pf:  # the damage is real: pyarrow cannot read that group
        try:
            pf.read_row_group(1)
            raise AssertionError("row group 1 still reads")
        except OSError:
            pass

    items = list(iter_parquet(str(path)))
    bad = [i for i in items if isinstance(i, InvalidRecord)]
    assert bad and bad[0].reason == "malformed_parquet" and bad[0].locator == "rows 100-199"
    rows = [i[0] for i in items if not isinstance(i, InvalidRecord)]
    assert rows[:100] == [f"row {n}" for n in range(100)] and rows[-1] == "row 399"  # after the damage: read on

    out = tmp_path / "out"
    proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "-i", str(src), "-o", str(out),
                          "--max-quarantine-rate", "0.5")  # sniffed: the sniffer meets the damage too
    assert proc.returncode == 0, proc.stderr
    assert ("rows 100-199", "malformed_parquet") in {(r["locator"], r["reason"]) for r in _quarantine(out)}
    assert _trajectories(out) >= 200  # rows 0-99 and 300-399 at least


def _csv_text(rows: list[dict], header: list[str] | None = None) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    header = header or list(rows[0])
    writer.writerow(header)
    for r in rows:
        writer.writerow([r[k] for k in header])
    return buf.getvalue()


def test_a_csv_row_the_parser_rejects_is_one_record_and_the_rows_after_it_are_read(tmp_path):
    rows = [_chat(i) for i in range(8)]
    rows[2]["messages"] = rows[2]["messages"].replace("pad", "x" * 2000, 1)  # a field over the bound, on one line
    rows[5]["messages"] = rows[5]["messages"].replace("pad", "multi\nline " + "y" * 2000, 1)  # over several lines
    path = tmp_path / "chats.csv"
    path.write_text(_csv_text(rows))
    items = list(iter_csv(str(path), max_bytes=1500))
    assert [(i.reason, i.locator) if isinstance(i, InvalidRecord) else (i[0], i[1]["id"]) for i in items] == [
        ("row 1", "r0"), ("row 2", "r1"), ("malformed_csv", "row 3"), ("row 4", "r3"), ("row 5", "r4"),
        ("malformed_csv", "row 6"), ("row 7", "r6"), ("row 8", "r7")]


def test_reading_goes_on_after_the_quoted_field_of_a_rejected_row_not_at_its_next_line(tmp_path):
    """The lines left of a rejected multi-line field are not rows, even where one has every field; a short row
    after a rejected one-line row is a row of its own."""
    long = "x" * 80
    path = tmp_path / "rows.csv"
    path.write_text(f'a,b,c\n1,2,3\n4,"{long}\nmore ""quoted""\ntail",5,6\n7,8,9\n4,"{long}",6\n10,11\n')
    items = [(i.reason, i.locator) if isinstance(i, InvalidRecord) else (i[0], i[1]) for i in iter_csv(str(path), 60)]
    assert items == [("row 1", {"a": "1", "b": "2", "c": "3"}), ("malformed_csv", "row 2"),
                     ("row 3", {"a": "7", "b": "8", "c": "9"}), ("malformed_csv", "row 4"),
                     ("row 5", {"a": "10", "b": "11", "c": None})]


def test_a_csv_row_that_is_not_utf8_is_one_record(tmp_path):
    data = _csv_text([_chat(i) for i in range(4)]).encode().replace(b"city 1?", b"cit\xf3 1?")
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "chats.csv"
    path.write_bytes(data)
    items = list(iter_csv(str(path)))
    assert [(i.reason, i.locator) if isinstance(i, InvalidRecord) else i[0] for i in items] == [
        "row 1", ("bad_encoding", "row 2"), "row 3", "row 4"]
    out = tmp_path / "out"
    proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "-i", str(tmp_path / "in"), "-o",
                          str(out), "--format", "openai-messages", "--max-quarantine-rate", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert [(r["locator"], r["reason"]) for r in _quarantine(out)] == [("row 2", "bad_encoding")]
    assert _trajectories(out) == 3


def test_a_csv_header_naming_a_column_twice_is_refused_not_read_with_one_of_the_two(tmp_path):
    rows = [_chat(i) for i in range(3)]
    path = tmp_path / "chats.csv"
    path.write_text(_csv_text(rows, ["id", "messages", "tools"]).replace("id,messages,tools", "id,messages,messages", 1))
    items = list(iter_csv(str(path)))
    assert len(items) == 1 and items[0].reason == "malformed_csv" and "'messages' appears twice" in items[0].detail


def test_a_damaged_first_line_does_not_hide_the_format_of_the_rest(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    good = [json.dumps({**_chat(i), "messages": json.loads(_chat(i)["messages"]),
                        "tools": json.loads(_chat(i)["tools"])}) for i in range(30)]
    (src / "a.jsonl").write_text("\n".join(good[:10]) + "\n")
    (src / "b.jsonl").write_text("{bad\n" + "\n".join(good[10:]) + "\n")
    out = tmp_path / "out"
    proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "-i", str(src), "-o", str(out),
                          "--max-quarantine-rate", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert [(Path(r["uri"]).name, r["locator"], r["reason"]) for r in _quarantine(out)] == [
        ("b.jsonl", "line 1", "malformed_json")]
    assert _trajectories(out) == 30


def test_a_csv_with_only_its_header_or_a_parquet_without_rows_is_an_empty_file(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "header.csv").write_text("id,messages,tools\n")
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "messages": pa.array([], pa.string())}),
                   src / "none.parquet")
    (src / "chats.jsonl").write_text(json.dumps({**_chat(0), "messages": json.loads(_chat(0)["messages"]),
                                                 "tools": json.loads(_chat(0)["tools"])}) + "\n")
    proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "-i", str(src), "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert "1 records read, 0 quarantined, 2 empty files" in proc.stdout + proc.stderr


def test_a_json_error_reason_reads_as_one_phrase(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": "x", "messages": "unterminated\n')
    proc = lwm_in_process("validate", str(path), "--format", "openai-messages")
    assert "Unterminated string starting at column 25" in proc.stdout, proc.stdout


def test_a_file_name_with_a_line_break_stays_on_the_error_line(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "evil\nlwm: ok.jsonl").write_text("{not json\n")
    proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "-i", str(src), "-o", str(tmp_path / "o"))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    errors = [line for line in lines if line.startswith("lwm: error: ")]
    assert len(errors) == 1 and "evil\\nlwm: ok.jsonl" in errors[0], lines
    assert not any(line.startswith("lwm: ok") for line in lines), lines
    proc = lwm_in_process("validate", str(src), "--format", "openai-messages")
    assert not any(line.startswith("lwm: ok") for line in proc.stdout.splitlines()), proc.stdout
    assert "evil\\nlwm: ok.jsonl" in proc.stdout


def test_a_json_document_cut_short_names_where_it_breaks_in_every_reader(tmp_path):
    """magentic-one reads a document's list items, swe-agent a whole document: both say where the JSON
    breaks, in one wording (json's own message "Unterminated string starting at" ends in "at")."""
    doc = tmp_path / "cut.json"
    doc.write_text('{"a": [1, 2,\n  "unterminated', encoding="utf-8")
    expected = {"magentic-one": f"{doc}: line 2: malformed_json: Unterminated string starting at column 3",
                "swe-agent": f"{doc}: document: malformed_json: Unterminated string starting at line 2 column 3"}
    for fmt, line in expected.items():
        proc = lwm_in_process("validate", "-f", fmt, str(doc))
        assert proc.stdout.splitlines()[0] == line, (fmt, proc.stdout)


def test_a_file_cut_short_before_its_first_record_is_named_damaged_not_of_unknown_format(shared_data, tmp_path):
    """openhands-v1's log is one long line: gzipped and cut at 8 kB, no record reads, so no sniffer can tell its
    format. The run's one row for it says the stream is cut (as it does under --format), not "give --format"; a
    JSON document cut short says where its JSON breaks. A file that reads but fits no format stays unknown_format."""
    import gzip

    data = (shared_data / "openhands-v1" / "output.jsonl").read_bytes()
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(data)[:8000])
    (tmp_path / "cut.json").write_text('{"messages": [{"role": "user", "content": "hi', encoding="utf-8")
    (tmp_path / "other.jsonl").write_text('{"x": 1}\n', encoding="utf-8")
    expected = {"cut.jsonl.gz": ("line 1", "truncated_stream"), "cut.json": ("line 1", "malformed_json"),
                "other.jsonl": ("document", "unknown_format")}
    for name, (locator, reason) in expected.items():
        for args in ([], ["-f", "openhands"]) if name == "cut.jsonl.gz" else ([],):
            proc = lwm_in_process("validate", *args, str(tmp_path / name))
            assert proc.stdout.startswith(f"{tmp_path / name}: {locator}: {reason}: "), (name, args, proc.stdout)
    out = tmp_path / "run"
    proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "-i", str(tmp_path / "cut.jsonl.gz"),
                          "-o", str(out))
    assert proc.returncode != 0
    rows = [r for p in (out / "quarantine").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert [(r["locator"], r["reason"]) for r in rows] == [("line 1", "truncated_stream")], rows
