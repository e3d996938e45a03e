"""The category table: the SPEC default, the rule language, canonical form, and clear config errors."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from masking.stats import TurnStats
from masking.table import (
    AllOf,
    AnyOf,
    Compare,
    Not,
    Short,
    compile_rule,
    default_table,
    load_table,
    load_table_file,
    parse_rule,
    render_rule,
)
from schemas.errors import ConfigError

SPEC_ROWS = [  # SPEC §5, in its precedence order
    ("echo", "ol >= 0.7 and nov < 0.3", 0.05),
    ("boilerplate", "ol >= 0.5 and nov < 0.5", 0.10),
    ("transform", "nov < 0.5 and r < 1.0", 0.50),
    ("expansion", "ol >= 0.5 and nov >= 0.5 and r > 1.5", 1.00),
    ("retrieval", "nov >= 0.6 and r > 1.0", 1.00),
    ("action", "nov >= 0.5 and (r <= 1.0 or short)", 1.00),
    ("other", "otherwise", 1.00),
]


def spec_mapping() -> dict:
    return {"short_chars": 64, "categories": [{"name": n, "when": w, "keep": k} for n, w, k in SPEC_ROWS]}


def test_default_table_is_the_spec_table():
    table = default_table()
    assert table.short_chars == 64
    rows = [(c["name"], c["when"], c["keep"]) for c in table.to_dict()["categories"]]
    assert rows == SPEC_ROWS


def test_none_gives_the_default_table():
    assert load_table(None) is default_table()


def test_default_file_equals_a_table_written_by_hand_except_descriptions():
    by_hand = load_table(spec_mapping())
    assert [(c.name, c.rule, c.keep) for c in by_hand.categories] == [
        (c.name, c.rule, c.keep) for c in default_table().categories
    ]
    assert by_hand != default_table()  # the shipped file carries descriptions; equality sees them


def test_canonical_form_round_trips_with_equal_hash_and_fingerprint():
    table = default_table()
    again = load_table(table.to_dict())
    assert again == table
    assert hash(again) == hash(table)
    assert again.fingerprint() == table.fingerprint()


def test_spelling_of_a_rule_does_not_change_the_fingerprint():
    mapping = spec_mapping()
    respelled = copy.deepcopy(mapping)
    respelled["categories"][0]["when"] = "(OL>=0.70)  AND  nov<.3"
    assert load_table(respelled).fingerprint() == load_table(mapping).fingerprint()


def test_a_changed_keep_changes_the_fingerprint():
    mapping = spec_mapping()
    changed = copy.deepcopy(mapping)
    changed["categories"][0]["keep"] = 0.2
    assert load_table(changed).fingerprint() != load_table(mapping).fingerprint()


def test_and_binds_tighter_than_or():
    a, b, c = Compare("ol", ">=", 0.5), Compare("nov", "<", 0.5), Compare("r", ">", 1.0)
    assert parse_rule("ol >= 0.5 or nov < 0.5 and r > 1") == AnyOf((a, AllOf((b, c))))
    assert parse_rule("(ol >= 0.5 or nov < 0.5) and r > 1") == AllOf((AnyOf((a, b)), c))


def test_not_short_and_nested_parentheses_flatten():
    rule = parse_rule("not short and ((ol >= 0.5 and nov < 0.5) and r > 1)")
    assert rule == AllOf((Not(Short()), Compare("ol", ">=", 0.5), Compare("nov", "<", 0.5), Compare("r", ">", 1.0)))
    assert render_rule(rule) == "not short and ol >= 0.5 and nov < 0.5 and r > 1.0"


def test_render_parenthesizes_where_precedence_needs_it():
    rule = parse_rule("not (ol < 0.1 or r > 2) and (short or jac >= 0.9)")
    assert render_rule(rule) == "not (ol < 0.1 or r > 2.0) and (short or jac >= 0.9)"


_COMPARE = st.builds(
    Compare,
    st.sampled_from(["ol", "nov", "jac", "r"]),
    st.sampled_from(["<", "<=", ">", ">="]),
    st.floats(min_value=-10, max_value=10, allow_nan=False),
)
_RULES = st.recursive(
    st.one_of(_COMPARE, st.just(Short())),
    lambda inner: st.one_of(
        st.builds(Not, inner),
        st.lists(inner, min_size=2, max_size=3).map(lambda parts: AllOf(tuple(parts))),
        st.lists(inner, min_size=2, max_size=3).map(lambda parts: AnyOf(tuple(parts))),
    ),
    max_leaves=8,
)


_STATS = st.builds(
    TurnStats,
    *[st.floats(min_value=0, max_value=1)] * 3,
    st.floats(min_value=0, max_value=20),
    st.integers(min_value=0, max_value=200),
)


@given(_RULES, _STATS)
def test_rendered_rules_parse_back_to_the_same_meaning(rule, stats):
    parsed = parse_rule(render_rule(rule))
    assert compile_rule(parsed, 64)(stats) == compile_rule(rule, 64)(stats)
    # Rendering is canonical: once parsed, a round trip is exact.
    assert parse_rule(render_rule(parsed)) == parsed


def _with(index: int, **changes) -> dict:
    mapping = spec_mapping()
    mapping["categories"][index].update(changes)
    return mapping


def _without_key(index: int, key: str) -> dict:
    mapping = spec_mapping()
    del mapping["categories"][index][key]
    return mapping


BAD_TABLES = {
    "unknown statistic": (_with(0, when="ovl >= 0.7 and nov < 0.3"), ["'echo'", "unknown statistic 'ovl'"]),
    "bad operator =>": (_with(1, when="ol => 0.5"), ["'boilerplate'", "bad operator '=>'"]),
    "bad operator =": (_with(1, when="ol = 0.5"), ["'boilerplate'", "bad operator '='"]),
    "missing operator": (_with(1, when="ol 0.5"), ["'boilerplate'", "expected a comparison operator after 'ol'"]),
    "threshold not a number": (
        _with(2, when="nov < high"),
        ["'transform'", "expected a number after 'nov <', got 'high'"],
    ),
    "threshold quoted": (_with(2, when="nov < '0.5'"), ["'transform'", "unexpected character"]),
    "threshold infinite": (_with(2, when="r < 1e999"), ["'transform'", "expected a finite number"]),
    "threshold missing": (_with(2, when="r <"), ["'transform'", "expected a number after 'r <', got the end"]),
    "keep above 1": (_with(3, keep=1.5), ["'expansion'", "keep must be a number in [0, 1], got 1.5"]),
    "keep negative": (_with(3, keep=-0.1), ["'expansion'", "got -0.1"]),
    "keep a string": (_with(3, keep="0.5"), ["'expansion'", "got '0.5'"]),
    "keep a boolean": (_with(3, keep=True), ["'expansion'", "got True"]),
    "duplicate name": (_with(4, name="echo"), ["'echo'", "duplicate name"]),
    "no catch-all": (_with(6, when="r > 0"), ["'other'", "last category must be the catch-all"]),
    "catch-all not last": (_with(2, when="otherwise"), ["'transform'", "must be last", "'expansion'"]),
    "otherwise inside a rule": (_with(5, when="short or otherwise"), ["'action'", "must be the whole rule"]),
    "unknown category key": (_with(0, kep=0.1), ["'echo'", "unknown key 'kep'"]),
    "missing when": (_without_key(4, "when"), ["'retrieval'", "missing 'when'"]),
    "missing keep": (_without_key(4, "keep"), ["'retrieval'", "missing 'keep'"]),
    "when not a string": (_with(4, when=0.6), ["'retrieval'", "when must be a string rule"]),
    "empty rule": (_with(4, when="  "), ["'retrieval'", "the rule is empty"]),
    "unbalanced parenthesis": (_with(5, when="nov >= 0.5 and (r <= 1 or short"), ["'action'", "missing ')'"]),
    "dangling and": (_with(5, when="nov >= 0.5 and"), ["'action'", "ends too early"]),
    "trailing token": (_with(5, when="nov >= 0.5 short"), ["'action'", "unexpected 'short'"]),
    "bad name": (_with(0, name="echo turns"), ["category #1", "name must be"]),
    "negative short bound": ({**spec_mapping(), "short_chars": -1}, ["short_chars", "got -1"]),
    "short bound not an integer": ({**spec_mapping(), "short_chars": "64"}, ["short_chars", "got '64'"]),
    "unknown table key": ({**spec_mapping(), "categorie": []}, ["unknown key 'categorie'"]),
    "no categories": ({"categories": []}, ["no categories"]),
    "categories not a list": ({"categories": {"name": "other"}}, ["must be a list"]),
}


@pytest.mark.parametrize("mapping, expected", BAD_TABLES.values(), ids=BAD_TABLES.keys())
def test_bad_tables_fail_with_one_clear_line(mapping, expected):
    with pytest.raises(ConfigError) as error:
        load_table(mapping)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("masking table: ")
    for part in expected:
        assert part in message


def test_table_file_round_trip(tmp_path):
    path = tmp_path / "masking.toml"
    path.write_text(
        'short_chars = 100\n\n[[categories]]\nname = "echo"\nwhen = "ol >= 0.9"\nkeep = 0.2\n\n'
        '[[categories]]\nname = "rest"\nwhen = "otherwise"\nkeep = 1\n',
        encoding="utf-8",
    )
    table = load_table_file(path)
    assert table.short_chars == 100
    assert table.names == ("echo", "rest")
    assert table.keep_by_name == {"echo": 0.2, "rest": 1.0}
    assert isinstance(table.keep_by_name["rest"], float)


def test_table_file_errors_name_the_file(tmp_path):
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text('[[categories]]\nname = "echo\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.toml: invalid TOML"):
        load_table_file(bad_toml)
    bad_table = tmp_path / "table.toml"
    bad_table.write_text('[[categories]]\nname = "x"\nwhen = "ol >= 0.5"\nkeep = 2\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"table\.toml: masking table: category 'x': keep must be"):
        load_table_file(bad_table)
    with pytest.raises(ConfigError, match="not found"):
        load_table_file(tmp_path / "missing.toml")
