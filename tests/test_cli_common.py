"""pipeline/cli/common.py: reading a JSONL input file for the commands."""

from __future__ import annotations

import pytest

from pipeline.cli.common import jsonl_values
from schemas.errors import ConfigError


def test_blank_lines_are_skipped_and_line_numbers_count_them(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n\n  \n"text"\n')
    assert list(jsonl_values(str(path))) == [(1, {"a": 1}), (4, "text")]


def test_a_line_that_is_not_json_names_file_and_line(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ConfigError, match=rf"^{path}:2: not a JSON object \("):
        list(jsonl_values(str(path), "a JSON object"))


def test_a_byte_order_mark_at_the_start_is_skipped(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n{"b": 2}\n')
    assert list(jsonl_values(str(path))) == [(1, {"a": 1}), (2, {"b": 2})]


@pytest.mark.parametrize(("line", "why"), [
    (b"\xff\xfe\n", r"not UTF-8 \(byte 0xff at character 1\)"),
    (b'{"text": "caf\xe9"}\n', r"not UTF-8 \(byte 0xe9 at character 14\)"),
    (b'{"n": ' + b"9" * 5000 + b"}\n", r"not a JSON object \(an integer of more than \d+ digits\)"),
    (b'{"n": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n", r"not a JSON object \(nested too deeply\)"),
])
def test_a_line_python_cannot_read_names_file_and_line(tmp_path, line, why):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"a": 1}\n' + line + b'{"b": 2}\n')
    with pytest.raises(ConfigError, match=rf"^{path}:2: {why}$"):
        list(jsonl_values(str(path), "a JSON object"))
