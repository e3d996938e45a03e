"""Run configuration: TOML file + CLI flags over documented defaults, resolved to one dict.

Every CLI flag has a config key (``--max-quarantine-rate`` is ``run.max_quarantine_rate``). The
resolved config is printed by ``--dry-run`` and stored in the manifest with its hash; the part
that shapes the output bytes (everything but where and how the run executes) is hashed.

The whole resolved config is checked against one typed schema (`pipeline.config_schema`): a value of
the wrong type or out of range is one `ConfigError` line naming its key (and its flag, if it has one).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tomllib
from typing import Any

from pipeline.config_schema import check_config
from schemas.errors import ConfigError
from stages.filters import FILTER_ORDER
from stages.ingest.reading import input_location
from stages.uri_credentials import recorded_uri

DEFAULTS: dict[str, Any] = {
    "run": {
        "input": [],
        "out": "",
        "format": "",
        "domain": "",
        "source_kind": "",  # "" = the records' own kind where the format records one (lwm-jsonl), else public
        "max_quarantine_rate": 0.05,
        "max_record_bytes": 64 * 1024 * 1024,
        "from_layer": "",
    },
    "executor": {
        "kind": "auto",  # auto | processes | local | ray
        # auto: on this machine (worker processes, or this process alone on one CPU) below this many bytes of
        # input, Ray at or above it (or when a cluster is given); how it was chosen:
        # `pipeline.executors.AutoExecutor`.
        "local_below_bytes": 256 * 1000 * 1000,
        "ray_address": "",
        "num_cpus": 0,  # 0 = all cores of this machine (a local Ray's CPUs, or the worker processes)
        "progress": "auto",  # auto | bar | lines | off
        # A Ray worker process runs this many tasks, then is replaced (0 = reuse forever): memory a
        # task freed but the process kept cannot ratchet up the worker's size with the input.
        # "auto": 16 for inputs of 256 MiB and more, else 0.
        "max_tasks_per_worker": "auto",
    },
    "ingest": {
        "options": {},
        "split_bytes": 64 * 1024 * 1024,  # one JSONL file is read as byte ranges of this size
        "group_bytes": 8 * 1024 * 1024,  # small files are grouped into tasks of about this size
        "group_files": 64,  # … or this many files
    },
    "filter": {
        "min_turns": 2,
        "enabled": list(FILTER_ORDER),  # every registered filter (stages/filters.py FILTERS) is on by default
    },
    "redact": {"enabled": True, "emails": False},
    "dedup": {
        "exact": True,
        "near": True,
        "threshold": 0.8,
        "num_perm": 128,
        "bands": 0,  # 0 = chosen from threshold and num_perm
        "shingle": 5,
        "seed": 1,
        "decontaminate": [],
        "ngram": 13,
        # decontamination by shared n-grams (stages/decontam.py; thresholds measured in the README)
        "ngram_common_share": 0.002,  # an n-gram in more than this share of all trajectories is common ...
        "ngram_common_min_docs": 5,  # ... and in more than this many: boilerplate, not task content
        "ngram_overlap": 0.6,  # share of an eval record's specific n-grams that makes a trajectory contaminated
        "ngram_min_shared": 10,  # ... and at least this many of them
        "near_specific_share": 0.2,  # a near copy of an eval record must also hold this share of its specific n-grams
        "buckets": 0,  # 0 = derived from the input counts
    },
    "pools": {
        "ratios": {"cpt": 0.80, "sft": 0.10, "rl": 0.05, "eval": 0.05},
        "sft_turns": 1,  # an integer k, or "all"
        "eval_subsample": 0.5,
        "rl_prompt_cap": 131072,
        "context_limit": 262144,
        "seed": 0,
    },
    "templates": {
        "mapping": {"cpt": ["v1"], "sft": [f"v{i}" for i in range(2, 12)], "rl": ["v0"], "eval": ["v0"]},
        "dirs": [],
    },
    "masking": {"keep_mode": "weight", "seed": 0, "table": None},
    "tokenizer": {"spec": "default", "engine": ""},
    "render": {"chat_format": "chatml"},
    "shards": {"max_rows": 10000, "target_bytes": 256 * 1024 * 1024, "compression_level": 3},
}

# Keys that say where and how the run executes; they never change the output bytes.
EXECUTION_KEYS = {("executor",), ("run", "out"), ("run", "from_layer")}
# Tables whose keys are not known beforehand. `masking.table` and `pools.ratios` are taken whole; the options of
# `ingest.options` are merged one by one (a `--opt` adds to the config file's options and overrides the one it
# names). `templates.mapping` is not one: a config names the pools whose templates it changes, and the others
# keep theirs.
FREE_FORM = {("ingest", "options"), ("masking", "table"), ("pools", "ratios")}
MERGED_BY_KEY = {("ingest", "options")}


def _merge(base: dict[str, Any], override: dict[str, Any], path: tuple[str, ...] = ()) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        here = (*path, key)
        if key not in base and path not in FREE_FORM:
            where = ".".join(here)
            raise ConfigError(f"unknown config key {where!r}")
        if isinstance(value, dict) and isinstance(base.get(key), dict) and here not in FREE_FORM:
            out[key] = _merge(base[key], value, here)
        elif isinstance(value, dict) and isinstance(base.get(key), dict) and here in MERGED_BY_KEY:
            out[key] = {**copy.deepcopy(base[key]), **copy.deepcopy(value)}
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_config_file(path: str) -> dict[str, Any]:
    """Parse a TOML config file; errors name the file and the line."""
    try:
        with open(path, "rb") as f:
            loaded = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); TOML files are UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    masking = loaded.get("masking")
    if isinstance(masking, dict) and isinstance(masking.get("table"), str):  # a table file, beside this one
        masking["table"] = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.expanduser(masking["table"]))
    return loaded


def _check_masking_table(cfg: dict[str, Any], where: str) -> None:
    """``masking.table``, checked whole now, not when the first samples are made. A name (``"my_table.toml"``, a copy
    of ``masking/default_table.toml``) is replaced by the file's table, read now, so the config, its hash and the
    manifest hold the table itself, not a name for it; a table given inline is checked as a file's is. `where`:
    what an error line starts with (the config file, when the table came from it)."""
    from masking.table import load_table, read_table_file

    table = cfg["masking"]["table"] if isinstance(cfg.get("masking"), dict) else None
    try:
        if isinstance(table, str):
            cfg["masking"]["table"] = read_table_file(os.path.expanduser(table))
        elif isinstance(table, dict):
            load_table(table)
    except ConfigError as exc:
        raise ConfigError(f"{where}masking.table: {str(exc).removeprefix('masking table: ')}") from None


def _table_of_file(file_only: dict[str, Any], overrides: dict[str, Any]) -> bool:
    """Whether the config file gave ``masking.table`` (a name or a table) and no override replaced it."""
    given, replaced = file_only.get("masking"), overrides.get("masking")
    return (isinstance(given, dict) and given.get("table") is not None
            and not (isinstance(replaced, dict) and "table" in replaced))


def _resolve_llm(file_section: Any, flag_section: Any, source: str | None) -> dict[str, Any]:
    """The ``[llm]`` section of the file and of the flags, resolved; a bad key or value of the file that no flag
    replaced is named as the file's, as `resolve` does for the other sections."""
    from pipeline.llm_config import LLM_DEFAULTS, check_llm, check_stage_names, resolve_llm

    sections = [s for s in (file_section, flag_section) if s is not None]
    try:
        return resolve_llm(sections)
    except ConfigError:
        if source is None or not isinstance(file_section, dict):
            raise
        flagged = flag_section if isinstance(flag_section, dict) else {}
        alone = {k: v for k, v in file_section.items() if k not in flagged}
        try:
            unknown = next((k for k in alone if k not in LLM_DEFAULTS), None)
            if unknown is not None:
                raise ConfigError(f"unknown config key 'llm.{unknown}'") from None
            check_llm({**LLM_DEFAULTS, **alone}, flags=False)
            check_stage_names({**LLM_DEFAULTS, **alone})
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        raise


def resolve(file_config: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None,
            source: str | None = None) -> dict[str, Any]:
    """Defaults ← config file ← CLI overrides, checked for unknown keys and bad values. With `source` (the
    config file's path) a bad key or value of the file is reported as the file's, before the flags are applied."""
    file_config, overrides = dict(file_config or {}), dict(overrides or {})
    # the opt-in model-in-the-loop section exists only when given (no config byte changes otherwise)
    llm_file, llm_flags = file_config.pop("llm", None), overrides.pop("llm", None)
    try:
        cfg = _merge(DEFAULTS, file_config)
    except ConfigError as exc:  # an unknown key of the file
        raise ConfigError(f"{source}: {exc}" if source is not None else str(exc)) from None
    file_only = cfg
    cfg = _merge(cfg, overrides)
    _check_masking_table(cfg, f"{source}: " if source is not None and _table_of_file(file_only, overrides) else "")
    try:
        check_config(cfg)
    except ConfigError:
        if source is not None:  # a value of the file that no flag replaced: named as the file's
            alone = copy.deepcopy(file_only)
            masking = alone.get("masking")
            if isinstance(masking, dict) and isinstance(masking.get("table"), str | dict):  # checked whole above
                masking["table"] = None
            try:
                check_config(alone, flags=False)
            except ConfigError as exc:
                raise ConfigError(f"{source}: {exc}") from None
        raise
    # local template folders by their whole path: the manifest names where they are, wherever it is read from
    cfg["templates"]["dirs"] = [d if "://" in d else os.path.abspath(os.path.expanduser(d))
                                for d in cfg["templates"]["dirs"]]
    if llm_file is not None or llm_flags is not None:
        cfg["llm"] = _resolve_llm(llm_file, llm_flags, source)
    return cfg


def output_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The part of the config that shapes the output bytes (execution keys removed)."""
    out = copy.deepcopy(cfg)
    for path in EXECUTION_KEYS:
        node = out
        for key in path[:-1]:
            node = node.get(key, {})
        node.pop(path[-1], None)
    if "llm" in out:
        from pipeline.llm_config import output_llm_config

        out["llm"] = output_llm_config(out["llm"])
    # Input URIs are recorded (manifest) and hashed without their credentials: a new password is the same input;
    # and in one spelling: `-i in/` resumes what `-i in` began.
    if "input" in out.get("run", {}):
        out["run"]["input"] = [input_location(u) if isinstance(u, str) and u.strip() else u for u in out["run"]["input"]]
    for section, key in (("run", "input"), ("dedup", "decontaminate")):
        if key in out.get(section, {}):
            out[section][key] = [recorded_uri(u) if isinstance(u, str) else u for u in out[section][key]]
    return out


def config_hash(cfg: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the output-shaping config."""
    text = json.dumps(output_config(cfg), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def parse_opt(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings → dict; values that parse as JSON (numbers, true, lists) are typed."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--opt expects KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:  # not JSON (or an integer too long to convert): the text itself
            out[key.strip()] = value
    return out
