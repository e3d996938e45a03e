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
