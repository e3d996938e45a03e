"""Where template texts come from: the built-in variants, the domain notes and user directories.

A template source is a directory of ``<name>.txt`` (every domain) and ``<domain>.<name>.txt``
(one domain) files. Sources are read in order — built-in first, then each user directory — and a
later source replaces a variant of the same name; within one source the domain file wins over
the generic one. Directories may be local paths or fsspec URLs; each is read once per process.
"""

from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path

import fsspec

from schemas.errors import ConfigError
from schemas.trajectory import DOMAINS

PACKAGE_DIR = Path(__file__).resolve().parent
BUILTIN_DIR = PACKAGE_DIR / "variants"
NOTES_DIR = PACKAGE_DIR / "domains"
TEMPLATE_SUFFIX = ".txt"
VARIANT_NAME = re.compile(r"[A-Za-z0-9_-]+")
# The keys of every domain notes file; each becomes a placeholder templates may use.
NOTE_KEYS = (
    "environment",
    "observation_kind",
    "domain_rules",
    "observation_format",
    "error_behavior",
    "common_mistakes",
    "domain_spec",
)


def check_domain(domain: str) -> None:
    """Raise `ConfigError` unless `domain` is one of the seven domains."""
    if domain not in DOMAINS:
        raise ConfigError(f"templates: unknown domain {domain!r}; known: {', '.join(DOMAINS)}")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts v2 before v10."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part)


def _parse_file_name(source: str, file_name: str) -> tuple[str | None, str]:
    """``(domain or None, variant name)`` of a template file; `ConfigError` on any other shape."""
    parts = file_name[: -len(TEMPLATE_SUFFIX)].split(".")
    domain, name = (None, parts[0]) if len(parts) == 1 else (parts[0], parts[-1])
    if len(parts) > 2 or (domain is not None and domain not in DOMAINS) or not VARIANT_NAME.fullmatch(name):
        raise ConfigError(
            f"template file {source}/{file_name}: name it <name>.txt or <domain>.<name>.txt, where the name "
            f"uses letters, digits, '_' or '-' and the domain is one of {', '.join(DOMAINS)}"
        )
    return domain, name


def _read_text(fs, path: str, where: str) -> str:
    with fs.open(path, "rb") as handle:
        raw = handle.read()
    try:
        text = raw.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"template file {where} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        raise ConfigError(f"template file {where} is empty")
    return text


@lru_cache(maxsize=32)
def read_source(source: str) -> dict[tuple[str | None, str], str]:
    """Every template of one directory, keyed by ``(domain or None, name)``."""
    fs, root = fsspec.core.url_to_fs(source)
    if not fs.isdir(root):
        raise ConfigError(f"template directory {source} does not exist or is not a directory")
    found: dict[tuple[str | None, str], str] = {}
    for path in sorted(fs.ls(root, detail=False)):
        file_name = path.rstrip("/").rsplit("/", 1)[-1]
        if not file_name.endswith(TEMPLATE_SUFFIX) or fs.isdir(path):
            continue  # other files (a README.md, notes) may live next to the templates
        found[_parse_file_name(source, file_name)] = _read_text(fs, path, f"{source}/{file_name}")
    return found


@lru_cache(maxsize=256)
def variant_texts(domain: str, extra_dirs: tuple[str, ...] = ()) -> dict[str, str]:
    """Name → template text of every variant available for `domain`."""
    check_domain(domain)
    texts: dict[str, str] = {}
    for source in (str(BUILTIN_DIR), *extra_dirs):
        templates = read_source(source)
        texts.update({name: text for (d, name), text in templates.items() if d is None})
        texts.update({name: text for (d, name), text in templates.items() if d == domain})
    return texts


@lru_cache(maxsize=len(DOMAINS))
def _notes_file(domain: str) -> dict:
    """A domain's notes file (`NOTES_DIR`), parsed once."""
    check_domain(domain)
    with (NOTES_DIR / f"{domain}.toml").open("rb") as handle:
        return tomllib.load(handle)


@lru_cache(maxsize=len(DOMAINS))
def domain_notes(domain: str) -> dict[str, str]:
    """The built-in description of a domain's environment: one text per `NOTE_KEYS` entry, plus ``domain``."""
    notes = _notes_file(domain)
    missing = [key for key in NOTE_KEYS if not str(notes.get(key, "")).strip()]
    if missing:
        raise ConfigError(f"domain notes {NOTES_DIR / f'{domain}.toml'} lack {', '.join(missing)}")
    return {"domain": domain, **{key: str(notes[key]).strip() for key in NOTE_KEYS}}


def fixed_action_space(domain: str) -> str:
    """The built-in action space of a domain whose actions have one fixed form (``action_space`` in its notes
    file; only terminal's keystroke JSON has one), or ""."""
    return str(_notes_file(domain).get("action_space", "")).strip()
