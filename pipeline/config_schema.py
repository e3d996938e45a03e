"""The typed schema of a resolved run configuration: every key, its type and its range, in one place.

`check_config` validates the merged dict (defaults ← file ← flags) against it and turns the first
problem into one `ConfigError` line that names the key, its flag when it has one, and the bad value::

    shards.max_rows: must be an integer ≥ 1, not 0
    pools.sft_turns (--sft-turns): must be a positive integer or "all", not 'abc'

Types are strict (``"big"`` is not a size, ``true`` is not a rate, ``1.5`` is not a count) and floats
must be finite. The config dict itself is returned unchanged by the caller, so the manifest and the
config hash see exactly the values given.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schemas.errors import ConfigError, OptionError

POOLS = ("cpt", "sft", "rl", "eval")
Domain = Literal["", "mcp", "search", "terminal", "swe", "android", "web", "os"]
SourceKind = Literal["sandbox", "public", "internal"]
Count = Annotated[int, Field(ge=1)]
NonNegative = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]

# Flags of `lwm run` by config key, so an error about a value given on the command line names the flag.
FLAGS = {
    ("run", "input"): "--input", ("run", "out"): "--out", ("run", "format"): "--format",
    ("run", "domain"): "--domain", ("run", "source_kind"): "--source-kind",
    ("run", "max_quarantine_rate"): "--max-quarantine-rate", ("run", "from_layer"): "--from-layer",
    ("executor", "kind"): "--executor", ("executor", "ray_address"): "--ray-address",
    ("executor", "num_cpus"): "--num-cpus", ("executor", "progress"): "--progress",
    ("ingest", "options"): "--opt", ("tokenizer", "spec"): "--tokenizer", ("render", "chat_format"): "--chat-format",
    ("masking", "keep_mode"): "--keep-mode", ("pools", "sft_turns"): "--sft-turns",
    ("redact", "emails"): "--redact-emails",
}


class _Section(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class RunSection(_Section):
    input: list[str]
    out: str
    format: str
    domain: Domain
    source_kind: SourceKind
    max_quarantine_rate: Fraction
    max_record_bytes: Count
    from_layer: Literal["", "trajectories"]


class ExecutorSection(_Section):
    kind: Literal["auto", "processes", "local", "ray"]
    local_below_bytes: NonNegative
    ray_address: str
    num_cpus: NonNegative
    progress: Literal["auto", "bar", "lines", "off"]
    max_tasks_per_worker: Any

    @field_validator("max_tasks_per_worker")
    @classmethod
    def _auto_or_count(cls, v: Any) -> Any:
        if v == "auto" or (type(v) is int and v >= 0):
            return v
        raise ValueError('must be "auto" or an integer ≥ 0')


class AdapterOptions(BaseModel):
    """The options every adapter takes; the others are checked by the adapter named in the run."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
    domain: Domain | None = None
    source_kind: SourceKind | None = None
    max_record_bytes: Count | None = None


class IngestSection(_Section):
    options: AdapterOptions
    split_bytes: Count
    group_bytes: Count
    group_files: Count


class FilterSection(_Section):
    min_turns: NonNegative
    enabled: list[str]


class RedactSection(_Section):
    enabled: bool
    emails: bool


class DedupSection(_Section):
    exact: bool
    near: bool
    threshold: Annotated[float, Field(gt=0, le=1)]
    num_perm: Count
    bands: NonNegative
    shingle: Count
    seed: int
    decontaminate: list[str]
    ngram: Count
    ngram_common_share: Fraction
    ngram_common_min_docs: NonNegative
    ngram_overlap: Annotated[float, Field(gt=0, le=1)]
    ngram_min_shared: Count
    near_specific_share: Fraction
    buckets: NonNegative


class PoolsSection(_Section):
    ratios: dict[str, Any]
    sft_turns: Any
    eval_subsample: Fraction
    rl_prompt_cap: Count
    context_limit: Count
    seed: int

    @field_validator("ratios")
    @classmethod
    def _known_pools_positive_sum(cls, v: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(v) - set(POOLS))
        if unknown:
            raise ValueError(f"unknown pool {unknown[0]!r}; pools are {', '.join(POOLS)}")
        if any(not _finite_number(x) or x < 0 for x in v.values()) or sum(v.values()) <= 0:
            raise ValueError("ratios must be non-negative numbers with a positive sum")
        return v

    @field_validator("sft_turns")
    @classmethod
    def _k_or_all(cls, v: Any) -> Any:
        if v == "all" or (type(v) is int and v >= 1):
            return v
        raise ValueError('must be a positive integer or "all"')


class TemplatesSection(_Section):
    mapping: dict[Literal["cpt", "sft", "rl", "eval"], Annotated[list[str], Field(min_length=1)]]  # a pool's choices
    dirs: list[str]


class MaskingSection(_Section):
    keep_mode: Literal["weight", "turn", "token"]
    seed: int
    table: dict[str, Any] | None


class TokenizerSection(_Section):
    spec: str
    engine: Literal["", "tiktoken", "tokenizers"]


class RenderSection(_Section):
    chat_format: Literal["chatml", "plain"]


class ShardsSection(_Section):
    max_rows: Count
    target_bytes: Count
    compression_level: Annotated[int, Field(ge=1, le=22)]


class RunConfig(_Section):
    run: RunSection
    executor: ExecutorSection
    ingest: IngestSection
    filter: FilterSection
    redact: RedactSection
    dedup: DedupSection
    pools: PoolsSection
    templates: TemplatesSection
    masking: MaskingSection
    tokenizer: TokenizerSection
    render: RenderSection
    shards: ShardsSection


def _finite_number(x: Any) -> bool:
    return type(x) in (int, float) and x == x and abs(x) != float("inf")


def _describe(error: dict[str, Any]) -> str:
    kind, ctx, msg = error["type"], error.get("ctx") or {}, error["msg"]
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be an integer"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return "must be a finite number"
    if kind in ("string_type",):
        return "must be a string"
    if kind in ("bool_type",):
        return "must be true or false"
    if kind in ("list_type",):
        return "must be a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a table"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}".replace("''", "\"\" (empty)")
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        sign = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "")
        return f"must be {sign} {bound}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length', 1)} item(s)"
    if kind == "extra_forbidden":
        return "unknown config key"
    if kind == "missing":
        return "is missing"
    return msg[:1].lower() + msg[1:]


def _key(loc: tuple[Any, ...]) -> tuple[tuple[str, ...], str]:
    parts = tuple(str(p) for p in loc)
    flag = FLAGS.get(parts[:2], "")
    return parts, flag


def _first_error(exc: ValidationError, prefix: tuple[str, ...] = (), flags: bool = True) -> ConfigError:
    error = exc.errors(include_url=False)[0]
    parts, flag = _key((*prefix, *error["loc"]))
    where = ".".join(parts) + (f" ({flag})" if flag and flags else "")
    if error["type"] in ("extra_forbidden", "missing"):
        return ConfigError(f"{_describe(error)} {'.'.join(parts)!r}")
    return ConfigError(f"{where}: {_describe(error)}, not {error.get('input')!r}")


def check_config(cfg: dict[str, Any], flags: bool = True) -> None:
    """Raise one `ConfigError` line for the first value of `cfg` that breaks the schema; it names the key's
    command-line flag too, unless `flags` is off (a value that came from a config file). The adapter options
    (`ingest.options`) are checked by name and value against the format of the run, or every format when it is
    sniffed (`stages.ingest.registry.check_options`)."""
    try:
        RunConfig.model_validate(cfg)
    except ValidationError as exc:
        raise _first_error(exc, flags=flags) from None
    opts = dict(cfg["ingest"]["options"])
    if cfg["run"]["domain"]:
        opts["domain"] = cfg["run"]["domain"]
    _check_named_options(cfg["run"]["format"] or None, opts, flags)


def check_adapter_options(opts: dict[str, Any], fmt: str | None = None) -> None:
    """The `--opt` values of `lwm validate`, checked as `ingest.options` of a run would be."""
    try:
        AdapterOptions.model_validate(opts)
    except ValidationError as exc:
        raise _first_error(exc, ("ingest", "options")) from None
    _check_named_options(fmt, opts, True)


def _check_named_options(fmt: str | None, opts: dict[str, Any], flags: bool) -> None:
    from stages.ingest.registry import check_options  # the adapters: imported by the commands that read input

    try:
        check_options(fmt, opts)
    except OptionError as exc:
        flag = " (--opt)" if flags else ""
        raise ConfigError(f"ingest.options.{exc.key}{flag}: {exc.problem}") from None

