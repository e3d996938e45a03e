"""The category table: turn categories in precedence order, each with a rule and a keep ratio.

One table decides how every observation is weighted, and it is plain data, so a user changes
categories, thresholds, order or keep ratios in TOML without touching code. The default
(``masking/default_table.toml``) is SPEC §5 / paper Table 3. A table file looks like::

    short_chars = 64                  # `short` = observation of at most this many characters

    [[categories]]                    # first match wins, so more specific rules come first
    name = "echo"
    when = "ol >= 0.70 and nov < 0.30"
    keep = 0.05
    description = "the observation repeats the action"   # optional

    [[categories]]
    name = "other"
    when = "otherwise"                # the catch-all: required, and only as the last category
    keep = 1.0

The ``when`` rule language (parsed here, never evaluated as code)::

    rule       := "otherwise" | expr
    expr       := term ("or" term)*          -- `and` binds tighter than `or`
    term       := factor ("and" factor)*
    factor     := "not" factor | "(" expr ")" | "short" | comparison
    comparison := statistic op number        -- e.g. nov >= 0.5, r <= 1
    statistic  := "ol" | "nov" | "jac" | "r" (see masking.stats)
    op         := "<" | "<=" | ">" | ">="
    number     := decimal literal: 1, 0.5, .5, 1e-3

Keywords and statistic names are case-insensitive. So the SPEC's action row is
``nov >= 0.50 and (r <= 1 or short)``. A table is checked when it is built: unknown keys or
statistics, bad operators, non-numeric thresholds, keep outside [0, 1], duplicate names, a
missing catch-all or one that is not last all raise one-line `ConfigError`s naming the category.

`CategoryTable.to_dict` is the canonical form for the run manifest (rules re-rendered, ``0.70`` as
``0.7``); `load_table` of it gives an equal table; `fingerprint` hashes it.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from masking.stats import TurnStats
from schemas.errors import ConfigError

DEFAULT_TABLE_PATH = Path(__file__).with_name("default_table.toml")
DEFAULT_SHORT_CHARS = 64
STATISTICS = ("ol", "nov", "jac", "r")
OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_TABLE_KEYS = ("short_chars", "categories")
_CATEGORY_KEYS = ("name", "when", "keep", "description")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


# --- rules -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Compare:
    """``statistic op value``, e.g. ``nov >= 0.5``."""

    stat: str
    op: str
    value: float


@dataclass(frozen=True)
class Short:
    """True when the observation has at most ``short_chars`` characters."""


@dataclass(frozen=True)
class Not:
    """``not rule``."""

    operand: Rule


@dataclass(frozen=True)
class AllOf:
    """``a and b and ...``."""

    operands: tuple[Rule, ...]


@dataclass(frozen=True)
class AnyOf:
    """``a or b or ...``."""

    operands: tuple[Rule, ...]


@dataclass(frozen=True)
class Otherwise:
    """The catch-all rule: always true."""


Rule = Compare | Short | Not | AllOf | AnyOf | Otherwise
Predicate = Callable[[TurnStats], bool]


class _RuleError(Exception):
    """A problem in one `when` string; becomes a ConfigError that names the category."""


_TOKEN = re.compile(
    r"\s*(?:(?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>[<>=!~]+)|(?P<paren>[()])|(?P<other>\S))"
)


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens = []
    # Every non-space character starts some token (`other` at worst), so finditer skips only whitespace.
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        value = match.group(kind)
        if kind == "other":
            raise _RuleError(f"unexpected character {value!r}")
        tokens.append((kind, value.lower() if kind == "name" else value))
    return tokens


def _flatten(parts: list[Rule], kind: type[AllOf] | type[AnyOf]) -> tuple[Rule, ...]:
    # "(a and b) and c" is "a and b and c": one canonical shape, so rendering round-trips.
    flat: list[Rule] = []
    for part in parts:
        flat.extend(part.operands if isinstance(part, kind) else (part,))
    return tuple(flat)


class _Parser:
    """Recursive descent over the grammar in the module docstring."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.pos = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise _RuleError("the rule ends too early")
        self.pos += 1
        return token

    def at_keyword(self, word: str) -> bool:
        return self.peek() == ("name", word)

    def parse(self) -> Rule:
        if not self.tokens:
            raise _RuleError("the rule is empty")
        if self.tokens == [("name", "otherwise")]:
            return Otherwise()
        rule = self.expr()
        if self.peek() is not None:
            raise _RuleError(f"unexpected {self.peek()[1]!r} after a complete rule")
        return rule

    def expr(self) -> Rule:
        terms = [self.term()]
        while self.at_keyword("or"):
            self.take()
            terms.append(self.term())
        return terms[0] if len(terms) == 1 else AnyOf(_flatten(terms, AnyOf))

    def term(self) -> Rule:
        factors = [self.factor()]
        while self.at_keyword("and"):
            self.take()
            factors.append(self.factor())
        return factors[0] if len(factors) == 1 else AllOf(_flatten(factors, AllOf))

    def factor(self) -> Rule:
        kind, value = self.take()
        if (kind, value) == ("paren", "("):
            inner = self.expr()
            if self.peek() != ("paren", ")"):
                raise _RuleError("missing ')'")
            self.take()
            return inner
        if kind == "name" and value == "not":
            return Not(self.factor())
        if kind == "name" and value == "short":
            return Short()
        if kind == "name" and value == "otherwise":
            raise _RuleError("'otherwise' must be the whole rule, not part of one")
        if kind == "name" and value in STATISTICS:
            return self.comparison(value)
        if kind == "name":
            raise _RuleError(f"unknown statistic {value!r} (expected one of {', '.join(STATISTICS)} or 'short')")
        raise _RuleError(f"expected a statistic ({', '.join(STATISTICS)}) or 'short', got {value!r}")

    def comparison(self, stat: str) -> Compare:
        op = self.take_kind("op", f"a comparison operator after {stat!r}")
        if op not in OPERATORS:
            raise _RuleError(f"bad operator {op!r} after {stat!r} (expected one of {', '.join(OPERATORS)})")
        value = self.take_kind("number", f"a number after '{stat} {op}'")
        if not math.isfinite(float(value)):
            raise _RuleError(f"expected a finite number after '{stat} {op}', got {value!r}")
        return Compare(stat, op, float(value))

    def take_kind(self, kind: str, expected: str) -> str:
        token = self.peek()
        if token is None or token[0] != kind:
            raise _RuleError(f"expected {expected}, got {'the end of the rule' if token is None else repr(token[1])}")
        self.pos += 1
        return token[1]


def parse_rule(text: str) -> Rule:
    """Parse one `when` string (raises `ConfigError` with the problem on one line)."""
    try:
        return _Parser(text).parse()
    except _RuleError as error:
        raise ConfigError(f"when = {text!r}: {error}") from None


def render_rule(rule: Rule, context: str = "or") -> str:
    """The canonical text of a rule (parses back to the same rule)."""
    if isinstance(rule, Compare):
        return f"{rule.stat} {rule.op} {rule.value!r}"
    if isinstance(rule, Short):
        return "short"
    if isinstance(rule, Otherwise):
        return "otherwise"
    if isinstance(rule, Not):
        return f"not {render_rule(rule.operand, 'not')}"
    if isinstance(rule, AllOf):
        text = " and ".join(render_rule(part, "and") for part in rule.operands)
        return f"({text})" if context == "not" else text
    text = " or ".join(render_rule(part, "or") for part in rule.operands)
    return f"({text})" if context in ("and", "not") else text


def compile_rule(rule: Rule, short_chars: int) -> Predicate:
    """A fast predicate over `TurnStats` for `rule` (closures, no eval)."""
    if isinstance(rule, Compare):
        compare, stat, threshold = OPERATORS[rule.op], rule.stat, rule.value
        return lambda stats: compare(getattr(stats, stat), threshold)
    if isinstance(rule, Short):
        return lambda stats: stats.obs_chars <= short_chars
    if isinstance(rule, Otherwise):
        return lambda stats: True
    if isinstance(rule, Not):
        inner = compile_rule(rule.operand, short_chars)
        return lambda stats: not inner(stats)
    parts = tuple(compile_rule(part, short_chars) for part in rule.operands)
    if isinstance(rule, AllOf):
        return lambda stats: all(part(stats) for part in parts)
    return lambda stats: any(part(stats) for part in parts)


# --- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Category:
    """One row of the table: a name, its rule, its keep ratio in [0, 1]."""

    name: str
    rule: Rule
    keep: float
    description: str = ""


@dataclass(frozen=True)
class CategoryTable:
    """Categories in precedence order (the first whose rule matches wins); the last is the catch-all."""

    categories: tuple[Category, ...]
    short_chars: int = DEFAULT_SHORT_CHARS
    predicates: tuple[Predicate, ...] = field(init=False, repr=False, compare=False, hash=False)
    keep_by_name: Mapping[str, float] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        _check_table(self.categories, self.short_chars)
        predicates = tuple(compile_rule(category.rule, self.short_chars) for category in self.categories)
        object.__setattr__(self, "predicates", predicates)
        object.__setattr__(self, "keep_by_name", {category.name: category.keep for category in self.categories})

    @property
    def names(self) -> tuple[str, ...]:
        """Category names in precedence order."""
        return tuple(category.name for category in self.categories)

    def to_dict(self) -> dict[str, Any]:
        """The canonical, JSON/TOML-serializable form (what the run manifest stores)."""
        return {
            "short_chars": self.short_chars,
            "categories": [
                {"name": c.name, "when": render_rule(c.rule), "keep": c.keep, "description": c.description}
                for c in self.categories
            ],
        }

    def fingerprint(self) -> str:
        """A stable sha256 of the canonical form: equal tables, equal fingerprints."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _check_table(categories: tuple[Category, ...], short_chars: int) -> None:
    if isinstance(short_chars, bool) or not isinstance(short_chars, int) or short_chars < 0:
        raise ConfigError(f"masking table: short_chars must be a non-negative integer, got {short_chars!r}")
    if not categories:
        raise ConfigError("masking table: no categories (at least a catch-all with when = 'otherwise' is needed)")
    seen: set[str] = set()
    for index, category in enumerate(categories):
        where = f"masking table: category {category.name!r}"
        if category.name in seen:
            raise ConfigError(f"{where}: duplicate name (each category is listed once)")
        seen.add(category.name)
        keep = category.keep
        if isinstance(keep, bool) or not isinstance(keep, int | float) or not 0.0 <= keep <= 1.0:
            raise ConfigError(f"{where}: keep must be a number in [0, 1], got {keep!r}")
        is_last = index == len(categories) - 1
        if isinstance(category.rule, Otherwise) and not is_last:
            later = ", ".join(repr(c.name) for c in categories[index + 1 :])
            raise ConfigError(f"{where}: the catch-all 'otherwise' must be last; {later} after it could never match")
        if is_last and not isinstance(category.rule, Otherwise):
            raise ConfigError(f"{where}: the last category must be the catch-all (when = 'otherwise')")


# --- loading ---------------------------------------------------------------------------------


def _category_from_mapping(index: int, raw: Any) -> Category:
    label = f"category #{index + 1}"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"masking table: {label} must be a table with name, when and keep, got {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"masking table: {label}: name must be letters, digits, '_', '.' or '-', got {name!r}")
    where = f"masking table: category {name!r}"
    unknown = sorted(set(raw) - set(_CATEGORY_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (expected {', '.join(_CATEGORY_KEYS)})")
    for key in ("when", "keep"):
        if key not in raw:
            raise ConfigError(f"{where}: missing {key!r}")
    when, keep, description = raw["when"], raw["keep"], raw.get("description", "")
    if not isinstance(when, str):
        raise ConfigError(f'{where}: when must be a string rule such as "nov >= 0.5 and r > 1", got {when!r}')
    if not isinstance(description, str):
        raise ConfigError(f"{where}: description must be a string, got {description!r}")
    try:
        rule = parse_rule(when)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    if isinstance(keep, int | float) and not isinstance(keep, bool):
        keep = float(keep)
    return Category(name=name, rule=rule, keep=keep, description=description)


def load_table(mapping: Mapping[str, Any] | None) -> CategoryTable:
    """Build and check a table from its TOML/dict form; `None` gives the default table (SPEC §5)."""
    if mapping is None:
        return default_table()
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"masking table: expected a table (short_chars, categories), got {type(mapping).__name__}")
    unknown = sorted(set(mapping) - set(_TABLE_KEYS))
    if unknown:
        raise ConfigError(f"masking table: unknown key {unknown[0]!r} (expected {', '.join(_TABLE_KEYS)})")
    raw_categories = mapping.get("categories")
    if raw_categories is None:  # a table is given whole, never merged with the default
        raise ConfigError("masking table: no 'categories': a table is given whole (short_chars and its "
                          "[[categories]], as in masking/default_table.toml)")
    if not isinstance(raw_categories, list | tuple):
        raise ConfigError("masking table: 'categories' must be a list of [[categories]] tables")
    categories = tuple(_category_from_mapping(index, raw) for index, raw in enumerate(raw_categories))
    return CategoryTable(categories=categories, short_chars=mapping.get("short_chars", DEFAULT_SHORT_CHARS))


def read_table_file(path: str | Path) -> dict[str, Any]:
    """A table file's mapping (laid out as in the module docstring), checked: errors name the file."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            mapping = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: masking table file not found") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the masking table file: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    try:
        load_table(mapping)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    return mapping


def load_table_file(path: str | Path) -> CategoryTable:
    """Load a table from a TOML file laid out as in the module docstring."""
    return load_table(read_table_file(path))


@lru_cache(maxsize=1)
def default_table() -> CategoryTable:
    """The SPEC §5 table shipped in ``masking/default_table.toml`` (loaded once)."""
    return load_table_file(DEFAULT_TABLE_PATH)
