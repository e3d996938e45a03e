"""What a run can tell is wrong before it reads any input: settings that name things (filters, template
folders and variants, model-in-the-loop stages, decontamination references, the inputs) and settings that must
agree with each other. `lwm run` checks them before it starts, ``--dry-run`` included, so a typo costs one line,
not an ingest."""

from __future__ import annotations

import os
from typing import Any

from pipeline.llm_config import check_stages
from schemas.errors import ConfigError
from schemas.trajectory import DOMAINS
from stages.decontam import reference_units
from stages.dedup import lsh_params
from stages.filters import build_filters
from stages.ingest.registry import with_run_settings
from stages.templates import natural_key, reload_templates
from stages.templates.library import variant_texts


def preflight(cfg: dict[str, Any]) -> None:
    """Raise one `ConfigError` line for the first setting of a resolved config that the run would fail on. The
    inputs are checked last, and only that each local one exists: nothing is read."""
    build_filters(cfg)  # unknown filter names
    with_run_settings(cfg["ingest"]["options"], domain=cfg["run"]["domain"], source_kind=cfg["run"]["source_kind"])
    executor = cfg["executor"]
    if executor["ray_address"] and executor["kind"] in ("local", "processes"):
        raise ConfigError(f"executor.ray_address (--ray-address) {executor['ray_address']} is for the Ray executor, "
                          f"but executor.kind (--executor) is {executor['kind']}: give one of them")
    dedup = cfg["dedup"]
    if int(dedup.get("bands") or 0):  # the default (0) is derived from the threshold, always within num_perm
        try:
            lsh_params(float(dedup["threshold"]), int(dedup["num_perm"]), int(dedup["bands"]))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    _check_templates(cfg["templates"])
    _check_tokenizer(cfg["tokenizer"], cfg["render"]["chat_format"] == "chatml")
    if "llm" in cfg:  # named stages are resolved even while no endpoint turns them on: a typo is found now
        check_stages(cfg["llm"])
    try:
        reference_units(list(dedup["decontaminate"]))
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith("dedup.decontaminate") else
                          f"dedup.decontaminate: {message}") from None
    _check_inputs(cfg["run"]["input"])


def preflight_run(cfg: dict[str, Any], file_config: dict[str, Any], source: str | None) -> None:
    """`preflight` for ``lwm run``, whose config `cfg` resolved `file_config`, read from the file `source` (None:
    no config file), and the flags: an error that the file's values make alone is named as the file's, as
    `pipeline.config.resolve` names a bad value of the file, so the line says where to fix it."""
    try:
        preflight(cfg)
    except ConfigError as exc:
        if source is not None and _fails_alone(file_config, str(exc)):
            raise ConfigError(f"{source}: {exc}") from None
        raise


def _fails_alone(file_config: dict[str, Any], message: str) -> bool:
    from pipeline.config import resolve

    try:
        preflight(resolve(file_config))
    except ConfigError as exc:
        return str(exc) == message
    return False


def _check_templates(section: dict[str, Any]) -> None:
    """Every template folder can be read and every variant the pools name exists for some domain. The folders
    are read afresh for each run (a process that runs again sees templates edited since)."""
    reload_templates()
    dirs = tuple(str(d) for d in section["dirs"])
    known: set[str] = set()
    for domain in DOMAINS:
        known.update(variant_texts(domain, dirs))
    for pool, names in section["mapping"].items():
        for name in names:
            if name not in known:
                raise ConfigError(f"templates.mapping.{pool}: unknown variant {name!r}; known: "
                                  f"{', '.join(sorted(known, key=natural_key))}")


def _check_tokenizer(section: dict[str, Any], chatml: bool) -> None:
    """A tokenizer.json the run could not use is one line now, not after ingest and dedup have run."""
    import json

    from stages.tokenizer.engines import DEFAULT_NAME, resolve_spec, tokenizer_file_problem

    path, _ = resolve_spec(section["spec"], section["engine"])
    if path == DEFAULT_NAME:
        return
    try:
        with open(path, "rb") as f:
            document = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read tokenizer {path}: not JSON ({exc})") from None
    problem = tokenizer_file_problem(document, chatml)
    if problem:
        raise ConfigError(f"tokenizer {path} (tokenizer.spec, --tokenizer): {problem}")


def _check_inputs(inputs: list[str]) -> None:
    """A local input path (not a glob) that does not exist is one line now, not after the output folder was
    prepared (other filesystems are listed by the scan, which says the same)."""
    from stages.ingest.reading import filesystem, is_local

    for spec in inputs:
        if not spec.strip():
            raise ConfigError("an input path is empty; give a file, folder, glob or URL")
        fs, path = filesystem(spec)
        if is_local(fs) and not any(c in path for c in "*?[") and not os.path.lexists(path):
            raise ConfigError(f"input not found: {spec}")
