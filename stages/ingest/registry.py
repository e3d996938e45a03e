"""The adapter registry: one adapter per input format, found by name or by sniffing.

An adapter turns one input unit (a file, or a session directory) into raw records and each raw
record into unified trajectories. Adding a format means writing one module under
``stages/ingest/`` that defines an adapter object and listing it in ``ADAPTER_MODULES``.

An adapter is any object with these attributes (a Protocol, not a base class):

- ``name`` (``"openai-messages"``), ``description`` (one line), ``domains`` (the domains it can
  produce), ``default_domain``, ``options`` (``{key: help}`` for ``--opt KEY=VALUE``);
- ``line_records`` (optional, default False): every line of a ``.jsonl`` file is one whole record,
  so a large file may be read as byte ranges of lines (`stages.ingest.ranges`);
- ``sniff(probe) -> float``: confidence in [0, 1] that the unit is in this format;
- ``claims_dir(uri) -> bool`` (optional): whether a directory is one session of this format;
- ``check_options(opts)`` (optional): raise `OptionError` for a value of one of its options that it cannot use
  (`check_options` below calls it before any input is read);
- ``read(unit, opts) -> Iterator[RawRecord | InvalidRecord]``: native records with provenance;
- ``normalize(record, opts) -> Iterator[Trajectory]``: raises `InvalidRecord` for a bad record.

`opts` always carries ``domain`` (``None`` = the adapter's default) and ``source_kind`` (``None`` = the kind the
records carry, where a format has one, else ``public``); both, when set, hold for every trajectory read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

from schemas.errors import ConfigError, InvalidRecord, OptionError
from schemas.trajectory import Trajectory
from stages.ingest.reading import InputUnit, container_kind, loads, read_head, sniffed_records

# Modules that define an ``ADAPTER`` object, in listing order.
ADAPTER_MODULES = [
    "stages.ingest.lwm_jsonl",
    "stages.ingest.openai_messages",
    "stages.ingest.sharegpt",
    "stages.ingest.atif",
    "stages.ingest.agentworldbench",
    "stages.ingest.swe_agent",
    "stages.ingest.mini_swe_agent",
    "stages.ingest.openhands",
    "stages.ingest.asciinema",
    "stages.ingest.magentic_one",
    "stages.ingest.uiautomator",
    "stages.ingest.droidbot",
    "stages.ingest.aitw",
    "stages.ingest.webvoyager",
    "stages.ingest.opencua",
]

SNIFF_THRESHOLD = 0.5


@dataclass(frozen=True)
class RawRecord:
    """One native record with its provenance; `payload` is the record as JSON text."""

    uri: str
    locator: str
    format: str
    payload: str
    # The value `payload` was dumped from, where a reader parsed JSON text itself and the value is
    # ``loads(payload)`` (JSON types only): handed out by the first `value` call, which then skips a parse.
    parsed: list[Any] = field(default_factory=list, compare=False, repr=False)
    # How many native rows the record stands for: an adapter that groups rows into one record (AgentWorldBench's
    # rows of one trajectory) says how many, so that a record counts as many rows as a bad row counts alone.
    rows: int = field(default=1, compare=False)

    def value(self) -> Any:
        if self.parsed:
            return self.parsed.pop()
        return loads(self.payload)


@dataclass
class Probe:
    """What a sniffer may look at: the name, the first 64 KiB, and the first parsed record."""

    unit: InputUnit
    _cache: dict = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return self.unit.uri

    @cached_property
    def container(self) -> str:
        return "dir" if self.unit.is_dir else container_kind(self.unit.uri)

    @cached_property
    def head(self) -> str:
        if self.unit.is_dir:
            return ""
        return read_head(self.unit.uri).decode("utf-8", errors="replace")

    @cached_property
    def first_record(self) -> Any:
        """The first readable record of a JSON/JSONL/CSV/Parquet container among its first `SNIFF_RECORDS`, or
        None: a file whose first line is damaged is still recognized, and that line quarantined by its reader."""
        if self.unit.is_dir or self.container not in ("json", "jsonl", "csv", "parquet"):
            return None
        return next((item[1] for item in sniffed_records(self.unit.uri) if not isinstance(item, InvalidRecord)), None)


@runtime_checkable
class Adapter(Protocol):
    name: str
    description: str
    domains: tuple[str, ...]
    default_domain: str
    options: dict[str, str]

    def sniff(self, probe: Probe) -> float: ...

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]: ...

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]: ...


_REGISTRY: dict[str, Adapter] | None = None


def adapters() -> dict[str, Adapter]:
    """All registered adapters by name; a listed module that is missing is an error."""
    global _REGISTRY
    if _REGISTRY is None:
        found: dict[str, Adapter] = {}
        for mod_name in ADAPTER_MODULES:
            adapter = importlib.import_module(mod_name).ADAPTER
            found[adapter.name] = adapter
        _REGISTRY = found
    return _REGISTRY


def get_adapter(name: str) -> Adapter:
    try:
        return adapters()[name]
    except KeyError:
        known = ", ".join(sorted(adapters()))
        raise ConfigError(f"unknown format {name!r}; known formats: {known}") from None


def claims_dir(uri: str, fmt: str | None = None) -> bool:
    """Whether the named adapter (or any adapter) reads this directory as one session."""
    candidates = [get_adapter(fmt)] if fmt else list(adapters().values())
    return any(getattr(a, "claims_dir", None) and a.claims_dir(uri) for a in candidates)


def sniff(unit: InputUnit) -> tuple[str | None, float]:
    """The best-scoring format for a unit and its score; ``(None, 0)`` when nothing fits."""
    probe = Probe(unit)
    best, best_score = None, 0.0
    for adapter in adapters().values():
        try:
            score = float(adapter.sniff(probe))
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError):
            score = 0.0
        if score > best_score:
            best, best_score = adapter.name, score
    if best_score < SNIFF_THRESHOLD:
        return None, best_score
    return best, best_score


COMMON_OPTIONS = frozenset({"domain", "source_kind", "max_record_bytes"})


def sniffed_opts(formats: Iterable[str | None], opts: dict[str, Any]) -> Callable[[str], dict[str, Any]]:
    """The options of an input whose formats were sniffed, per format: each takes the options it declares.

    Mixed input (several formats found) may name an option that only some of them have (``--opt orphans=skip``:
    three chat formats); it applies to those. An option that no format of the input has is a `ConfigError`,
    as it is for a single format."""
    found = sorted({f for f in formats if f})
    if not found:  # nothing recognized: no adapter reads anything, each unit is an unknown_format row
        return lambda name: dict(opts)
    declared = {name: set(get_adapter(name).options) | COMMON_OPTIONS for name in found}
    unknown = set(opts) - set().union(COMMON_OPTIONS, *declared.values())
    if unknown:
        if len(found) == 1:
            resolve_opts(get_adapter(found[0]), opts)  # raises, naming the format and its options
        known = ", ".join(sorted(set().union(*declared.values())))
        names = ", ".join(found)
        raise ConfigError(f"no format of this input ({names}) has option {', '.join(sorted(unknown))}; "
                          f"their options: {known}")
    return lambda name: {k: v for k, v in opts.items() if k in declared[name]}


# The run's own settings of two common options (`lwm run --domain / --source-kind`, ``run.domain`` /
# ``run.source_kind``), by option name.
RUN_SETTINGS = {"domain": ("run.domain", "--domain"), "source_kind": ("run.source_kind", "--source-kind")}


def with_run_settings(opts: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """`opts` (``ingest.options``, ``--opt``) with the run's settings of the common options (`RUN_SETTINGS`:
    ``domain=``, ``source_kind=``; empty or None = not set) added. Both name one thing: set twice to two values,
    it is a `ConfigError`, never a silent choice of one (the same value twice is fine)."""
    out = dict(opts)
    for key, value in settings.items():
        if not value:
            continue
        given = out.get(key)
        if given not in (None, "") and given != value:
            name, flag = RUN_SETTINGS[key]
            raise ConfigError(f"{name} ({flag}) is {value!r} but ingest.options.{key} (--opt {key}=…) is {given!r}: "
                              f"two settings of one {key.replace('_', ' ')}; give one of them")
        out[key] = value
    return out


def check_options(fmt: str | None, opts: dict[str, Any]) -> None:
    """The names and values of a run's adapter options, checked before any input is read: an unknown name or a
    bad value is an `OptionError` (a domain the given format cannot produce, a `ConfigError`).

    With a format (`fmt`), its adapter's options and the values it accepts. Sniffed (`fmt` None), an option must be
    one that some adapter has, and its value one that every adapter having it accepts: which formats the input
    holds is known only once it is scanned (`sniffed_opts` then checks the names against those)."""
    given = {k: v for k, v in opts.items() if k not in COMMON_OPTIONS}
    if fmt:
        candidates = [get_adapter(fmt)]
        known = set(candidates[0].options)
        where = f"format {fmt}"
    else:
        candidates = [a for a in adapters().values() if set(a.options) & set(given)]
        known = set().union(*(a.options for a in adapters().values()))
        where = "any input format"
    unknown = sorted(set(given) - known)
    if unknown:
        raise OptionError(unknown[0], f"is not an option of {where}; options: {', '.join(sorted(known | COMMON_OPTIONS))}")
    for adapter in candidates:
        check = getattr(adapter, "check_options", None)
        if check is not None:
            check({k: v for k, v in given.items() if k in adapter.options})
    if fmt:
        resolve_opts(candidates[0], opts)  # the domain


def resolve_opts(adapter: Adapter, opts: dict[str, Any]) -> dict[str, Any]:
    """Adapter options with the common keys filled in; unknown keys are a `ConfigError`."""
    unknown = set(opts) - set(adapter.options) - COMMON_OPTIONS
    if unknown:
        known = ", ".join(sorted(set(adapter.options) | COMMON_OPTIONS))
        raise ConfigError(f"format {adapter.name} has no option {', '.join(sorted(unknown))}; options: {known}")
    out = dict(opts)
    out.setdefault("domain", None)
    out.setdefault("source_kind", None)
    if out["domain"] is not None and out["domain"] not in adapter.domains:
        raise ConfigError(
            f"format {adapter.name} produces domains {', '.join(adapter.domains)}, not {out['domain']!r}"
        )
    return out


def reads_line_records(fmt: str) -> bool:
    """Whether format `fmt` declares each line of its ``.jsonl`` files one whole record (unknown: no)."""
    return bool(getattr(adapters().get(fmt), "line_records", False))
