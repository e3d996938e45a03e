"""Ingest's JSON parser (`reading.loads`) gives exactly what ``json.loads`` gives: values, types, errors; except that
NaN, Infinity and numbers beyond the float range, which JSON has no value for, are read as null."""

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


def _json(text):
    """``json.loads`` with what JSON has no value for read as null (`json_reference`)."""
    def finite(t):
        return float(t) if math.isfinite(float(t)) else None

    return json.loads(text, parse_constant=lambda _: None, parse_float=finite)


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
    assert _outcome(reading.loads, text) == _outcome(_json, text)
    data = text.encode("utf-8", "surrogatepass")
    assert _outcome(reading.loads, data) == _outcome(_json, data)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('{}[]",:0123456789.eE+-tfnrulasN\\ \t\n\x00\x1f\u2028\ud800é')),
               max_size=30))
def test_loads_accepts_and_rejects_what_json_does(text):
    assert _outcome(reading.loads, text) == _outcome(_json, text)


def test_values_a_fast_parser_would_change_or_refuse_still_parse(tmp_path):
    lines = ['{"n": 123456789012345678901234567890, "m": -99999999999999999999}', '{"x": NaN, "y": -Infinity}',
             '{"big": 1e400}', '{"s": "\\ud800 lone"}', '{"a": 1, "a": 2, "b": 3}', '{"deep": ' + "[" * 200 + "]" * 200
             + "}", '{"f": 0.1, "g": 1.0, "h": -0.0, "i": 18446744073709551615}']
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(lines) + "\n{bad\n")
    got = list(reading.iter_jsonl(str(path)))
    assert [_canonical(v) for _, v in got[:-1]] == [_canonical(_json(line)) for line in lines]
    assert got[1][1] == {"x": None, "y": None} and got[2][1] == {"big": None}
    assert got[0][1]["n"] == 123456789012345678901234567890 and isinstance(got[6][1]["g"], float)
    assert got[-1].reason == "malformed_json"
    assert got[-1].detail == "Expecting property name enclosed in double quotes at column 2"


def test_nan_in_a_record_becomes_null_in_the_actions_and_meta_it_writes(tmp_path):
    """Python's JSON writer emits NaN; the canonical action and the meta of the trajectory must stay JSON."""
    from stages.ingest.openai_messages import ADAPTER
    from tests.helpers import ingest_unit

    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": NaN, "k": Infinity}'}}
    line = ('{"score": NaN, "messages": [{"role": "user", "content": "find"}, '
            '{"role": "assistant", "content": null, "tool_calls": ' + json.dumps([call]) + '}, '
            '{"role": "tool", "tool_call_id": "c1", "content": "none"}]}')
    path = tmp_path / "nan.jsonl"
    path.write_text(line + "\n")
    (traj,), bad = ingest_unit(ADAPTER, path)
    assert bad == []

    def strict(text):
        return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))

    assert strict(traj.turns[0].action) == {"name": "search", "arguments": {"q": None, "k": None}}

    from stages.ingest.mini_swe_agent import ADAPTER as MINI

    run = tmp_path / "run.traj.json"
    run.write_text('{"info": {"model_stats": {"instance_cost": NaN, "api_calls": 1e999}}, "messages": ['
                   '{"role": "user", "content": "list"}, {"role": "assistant", "content": "```bash\\nls\\n```"}, '
                   '{"role": "user", "content": "<returncode>0</returncode>\\n<output>\\na\\n</output>"}]}')
    (traj,), bad = ingest_unit(MINI, run)
    assert bad == [] and strict(traj.meta)["model_stats"] == {"instance_cost": None, "api_calls": None}
