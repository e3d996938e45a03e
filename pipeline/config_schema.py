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

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schemas.errors import ConfigError, OptionError

POOLS = ("cpt", "sft", "rl", "eval")
Domain = Literal["", "mcp", "search", "terminal", "swe", "android", "web", "os"]
SourceKind = Literal["sandbox", "public", "internal"]
Count = Annotated[int, Field(ge=1)]
NonNegative = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Weight = Annotated[float, Field(ge=0)]  # a loss weight: 0 = no loss

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
    ("llm", "endpoint"): "--llm-endpoint", ("llm", "model"): "--llm-model", ("llm", "max_requests"): "--max-requests",
    ("llm", "max_tokens"): "--max-llm-tokens", ("llm", "dry_run"): "--llm-dry-run",
}


class _Section(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class RunSection(_Section):
    input: list[str]
    out: str
    format: str
    domain: Domain
    source_kind: Literal["", "sandbox", "public", "internal"]
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
    table: Any  # a table file's name is replaced by its table when the config is resolved

    @field_validator("table")
    @classmethod
    def _name_or_table(cls, v: Any) -> Any:
        if v is None or isinstance(v, dict):
            return v
        raise ValueError('must be the path of a table file (a string, such as "my_table.toml") or a table')


class TokenizerSection(_Section):
    spec: str
    engine: Literal["", "tiktoken", "tokenizers"]


class RenderSection(_Section):
    chat_format: Literal["chatml", "plain"]


class ShardsSection(_Section):
    max_rows: Count
    target_bytes: Count
    compression_level: Annotated[int, Field(ge=1, le=22)]


class LLMSection(_Section):
    """``[llm]``, the model-in-the-loop stages (`pipeline.llm_config`); the endpoints and key names are checked by
    `check_llm` first, as their values may hold a credential that an error line must not repeat."""

    endpoint: str
    model: str
    api_key_env: str
    judge_endpoint: str
    judge_api_key_env: str
    judge_model: str
    stages: list[str]
    concurrency: Count
    batch: Count
    timeout_s: Annotated[float, Field(gt=0)]
    max_retries: NonNegative
    backoff_s: Annotated[float, Field(ge=0)]
    max_backoff_s: Annotated[float, Field(ge=0)]
    max_requests: NonNegative
    max_tokens: NonNegative
    dry_run: bool
    dry_run_show: NonNegative
    temperature: Annotated[float, Field(ge=0)]
    max_completion_tokens: Count
    judge_max_tokens: Count
    seed: int
    candidates: Count
    threshold: float
    reasoning_weight: Weight
    max_prompt_chars: Count
    instruction_pools: list[Literal["cpt", "sft", "rl", "eval"]]
    instruction_max_chars: Count
    instruction_obs_chars: Count
    instruction_reasks: NonNegative
    spoiler_ngram: Count
    wmat_pools: list[Literal["cpt", "sft", "rl", "eval"]]
    wmat_steps: NonNegative
    wmat_obs_chars: Count
    wmat_reasks: NonNegative
    wmat_spoiler_ngram: Count
    wmat_world_model_weight: Weight
    wmat_policy_weight: Weight
    wmat_observation_weight: Weight

    @field_validator("threshold")
    @classmethod
    def _on_the_rubric_scale(cls, v: float) -> float:
        from stages.reward.core import MAX_REWARD  # the judge's scale; the reward code is not needed to read configs

        if not 0 <= v <= MAX_REWARD:
            raise ValueError(f"must be a reward on the rubric's scale, from 0 to {MAX_REWARD:g}")
        return v


# An environment variable's name; a pasted key has a '-' (`sk-…`), or is one long run of letters and digits.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MACHINE_MADE = re.compile(r"(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[a-z])[A-Za-z0-9]{20,}")


def _key_env_problem(name: str) -> str:
    if name == "" or (_ENV_NAME.fullmatch(name) and not _MACHINE_MADE.fullmatch(name)):
        return ""
    return (f"must be the name of the environment variable that holds the API key (such as OPENAI_API_KEY), not the "
            f"key itself; the value given ({len(name)} characters) is not shown")


def _endpoint_problem(url: str) -> str:
    from urllib.parse import urlsplit

    if url == "":
        return ""
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if parts is not None and (parts.username is not None or parts.password is not None):
        return "must not hold credentials (user:password@); the key goes in the variable named by llm.api_key_env"
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        return f"must be an http:// or https:// URL of an OpenAI-compatible server (…/v1), not {url!r}"
    return ""


def check_llm(llm: dict[str, Any], flags: bool = True) -> None:
    """Raise one `ConfigError` line for the first value of a resolved ``[llm]`` section that breaks its schema,
    naming the key (and its flag, unless `flags` is off). A key name or an endpoint holding a credential is
    described without being repeated."""
    for key, problem in (("api_key_env", _key_env_problem), ("judge_api_key_env", _key_env_problem),
                         ("endpoint", _endpoint_problem), ("judge_endpoint", _endpoint_problem)):
        value = llm.get(key)
        if isinstance(value, str) and (reason := problem(value)):
            flag = FLAGS.get(("llm", key), "")
            raise ConfigError(f"llm.{key}{f' ({flag})' if flag and flags else ''}: {reason}")
    try:
        LLMSection.model_validate(llm)
    except ValidationError as exc:
        raise _first_error(exc, ("llm",), flags=flags) from None


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

