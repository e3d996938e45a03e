"""Redaction time grows with the text, not with its square: a long line that repeats a tool's name (a minified
JSON package list naming ``mysql-client`` a thousand times) or that pairs many AWS key ids with many secret-shaped
runs.

Each rule that looks for a flag after a tool's name used to scan from every occurrence of the name to the end of
its line: 20,000 ``curl x -u`` on one line took 53 s, 20,000 ``mysql`` 17 s; 2,000 key ids beside 2,000 runs took
8 s. The bound is generous (four times the text in at most eight times the time, never under 4 s) so that a busy
machine does not fail it, while the quadratic scans fail it by far.
"""

from __future__ import annotations

import time

import pytest

from stages.redact import redact_text

AWS_ID = "AK" + "IAIOSFODNN7EXAMPLE"
AWS_RUN = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"

# (name, one repeated unit, what closes the line): every unit opens a rule's scan that finds no value
LINES = [
    ("mysql", "mysql ", ""),
    ("mongo", "mongo ", ""),
    ("curl", "curl x -u ", ""),
    ("openssl", "openssl ", "-k"),
    ("ldapsearch", "ldapsearch ", " -w"),
    ("set password", "SET PASSWORD ", " password 'x'"),
    ("sqlcmd", "sqlcmd ", ""),
    ("zip", "zip ", ""),
    ("ssh-keygen", "ssh-keygen -N -N ", ""),
    ("net user", "net user ", ""),
]


def _seconds(text: str) -> float:
    start = time.perf_counter()
    redact_text(text)
    return time.perf_counter() - start


def _assert_linear(make) -> None:
    small, large = _seconds(make(5_000)), _seconds(make(20_000))
    assert large < 8 * max(small, 0.5), (small, large)


@pytest.mark.parametrize(("unit", "end"), [(u, e) for _, u, e in LINES], ids=[n for n, _, _ in LINES])
def test_a_line_repeating_a_tools_name_is_redacted_in_linear_time(unit, end):
    _assert_linear(lambda n: unit * n + end)


def test_many_aws_key_ids_beside_many_secret_shaped_runs_are_paired_in_linear_time():
    _assert_linear(lambda n: (AWS_ID + " ") * (n // 10) + (AWS_RUN + " ") * (n // 10))
    out, counts = redact_text(f"{AWS_ID} {AWS_RUN}\n" + "x" * 300 + f" {AWS_RUN}")
    assert counts == {"aws_access_key": 1, "aws_secret_key": 1}  # the run 300 characters away is no pair
    assert out.endswith(AWS_RUN)
