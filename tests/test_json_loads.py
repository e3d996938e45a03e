"""Ingest's JSON parser (`reading.loads`) gives exactly what ``json.loads`` gives: values, types, errors."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from stages.ingest import reading

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**40), max_value=10**40)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text() | st.sampled_from(["\ud800", "a\udfffb"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)


def _outcome(fn, text):
    try:
        return "ok", _canonical(fn(text))
    except Exception as exc:  # the same exception type and message count as the same outcome
        return type(exc).__name__, str(exc)


def _canonical(value):
    """A comparable form keeping types (1 vs 1.0 vs True), NaN and the order of keys."""
    if isinstance(value, dict):
        return ("dict", [(k, _canonical(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_canonical(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


@settings(max_examples=300, deadline=None)
@given(VALUES, st.booleans())
def test_loads_equals_json_on_every_value_json_writes(value, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert _outcome(reading.loads, text) == _outcome(json.loads, text)
    data = text.encode("utf-8", "surrogatepass")
    assert _outcome(reading.loads, data) == _outcome(json.loads, data)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('{}[]",:0123456789.eE+-tfnrulasN\\ \t\n\x00\x1f\u2028\ud800é')),
               max_size=30))
def test_loads_accepts_and_rejects_what_json_does(text):
    assert _outcome(reading.loads, text) == _outcome(json.loads, text)


def test_values_a_fast_parser_would_change_or_refuse_still_parse(tmp_path):
    lines = ['{"n": 123456789012345678901234567890, "m": -99999999999999999999}', '{"x": NaN, "y": -Infinity}',
             '{"big": 1e400}', '{"s": "\\ud800 lone"}', '{"a": 1, "a": 2, "b": 3}', '{"deep": ' + "[" * 200 + "]" * 200
             + "}", '{"f": 0.1, "g": 1.0, "h": -0.0, "i": 18446744073709551615}']
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(lines) + "\n{bad\n")
    got = list(reading.iter_jsonl(str(path)))
    assert [_canonical(v) for _, v in got[:-1]] == [_canonical(json.loads(line)) for line in lines]
    assert got[0][1]["n"] == 123456789012345678901234567890 and isinstance(got[6][1]["g"], float)
    assert got[-1].reason == "malformed_json"
    assert got[-1].detail == "Expecting property name enclosed in double quotes at column 2"
