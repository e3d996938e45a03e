"""World-model system prompts: twelve variants per domain, and user templates (SPEC §7).

A world model plays the environment. Its system prompt is built from the five schema fields of
the trajectory — ``task_description``, ``action_space``, ``initial_state``, ``demonstrations``
and ``simulation_instruction`` — wrapped in a template. Built-in variants, for every domain:

- ``v0`` — a short constraint-style prompt (about 30 lines with typical fields): be the
  environment, output only the observation, stay faithful to the state, never act as the agent.
  Used by the rl and eval pools.
- ``v1`` — a plain description of the session, used for cpt.
- ``v2`` … ``v11`` — the sft variants, from brief role statements through checklists, tagged
  sections and contracts to ``v11``, a long specification of how the domain's environment
  behaves (observation format, state, errors, common mistakes).

The pool → variant mapping lives in config (``templates.mapping``); user template directories
are listed in ``templates.dirs``.

**Template files.** A template directory holds UTF-8 text files named ``<name>.txt`` (a variant
for every domain) or ``<domain>.<name>.txt`` (for one domain; it wins over ``<name>.txt`` of the
same directory). Names use letters, digits, ``_`` and ``-``. Files without ``.txt`` are ignored; a
``.txt`` file with another kind of name, an empty one or one that is not UTF-8 is a ``ConfigError``.
Directories are read after the built-in one, in the order given, and a later one replaces a
variant of the same name, so a user can add ``myprompt`` or rewrite ``v0``. Directories may be
local paths or fsspec URLs (``s3://…``); each is read once per process. Example
``terse.txt``::

    You simulate {environment}. Reply with {observation_kind} and nothing else.

    ## Tools
    {action_space}

    ## Examples
    {demonstrations}

Placeholders are ``{name}`` with these names:

- the five fields: ``{task_description}``, ``{action_space}``, ``{initial_state}``,
  ``{demonstrations}`` (numbered ``Example N / Action: / Observation:`` blocks) and
  ``{simulation_instruction}``;
- the built-in notes about the trajectory's domain: ``{domain}`` (its name), ``{environment}``,
  ``{observation_kind}``, ``{domain_rules}``, ``{observation_format}``, ``{error_behavior}``,
  ``{common_mistakes}``, ``{domain_spec}`` (the texts in ``stages/templates/domains/``).

Other ``{…}`` text stays as written. Values are inserted as they are and never scanned again, so
braces and ``$`` inside a task or an action space are safe.

**Nothing is lost, nothing is empty.** A paragraph (lines between blank lines) that mentions an
empty value is left out whole — keep a heading in the same paragraph as its placeholder and it
goes away with an empty field. Every non-empty field appears verbatim in the prompt whichever
variant is chosen: a field that the template does not mention (or that only sits in a dropped
paragraph) is appended at the end under a heading (``## Action space``, ``## Demonstrations`` …).
A field holding only whitespace counts as empty. Output is a pure function of the trajectory's
fields, the domain and the template text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import lru_cache

from schemas.errors import ConfigError
from schemas.trajectory import Trajectory
from stages.filters import parse_action
from stages.templates.fill import field_values, fill_template
from stages.templates.library import (
    check_domain,
    domain_notes,
    fixed_action_space,
    natural_key,
    read_source,
    variant_texts,
)

__all__ = ["implied_action_space", "list_variants", "reload_templates", "render_system", "templates_digest"]


def _dirs(extra_dirs: Sequence[str]) -> tuple[str, ...]:
    # Config gives a list, callers may give Paths; the cache needs one hashable spelling.
    return tuple(str(d) for d in extra_dirs)


def list_variants(domain: str, extra_dirs: Sequence[str] = ()) -> list[str]:
    """Names of every template variant available for `domain` (built-in and user), v2 before v10."""
    check_domain(domain)
    return sorted(variant_texts(domain, _dirs(extra_dirs)), key=natural_key)


def render_system(traj: Trajectory, variant: str, extra_dirs: tuple[str, ...] = ()) -> str:
    """The system prompt of `traj` under template `variant`; `ConfigError` for an unknown variant."""
    texts = variant_texts(traj.domain, _dirs(extra_dirs))
    if variant not in texts:
        known = ", ".join(sorted(texts, key=natural_key))
        raise ConfigError(f"templates: unknown variant {variant!r} for domain {traj.domain}; known: {known}")
    fields, notes = field_values(traj.system), domain_notes(traj.domain)
    implied = "" if fields["action_space"] else implied_action_space(traj.domain, [t.action for t in traj.turns])
    if implied:  # fills a template's {action_space}; not a field the trajectory declares, so never appended
        del fields["action_space"]
        notes = {**notes, "action_space": implied}
    return fill_template(texts[variant], fields, notes)


def implied_action_space(domain: str, actions: Sequence[str]) -> str:
    """The action space SPEC §4 fixes for `domain`, when every action has the domain's fixed form (terminal:
    keystroke JSON); "" otherwise. What a trajectory that declares none is rendered with: its system prompt
    then says what its actions mean, as a declared one would."""
    space = fixed_action_space(domain)
    return space if space and actions and all(map(_is_keystrokes, actions)) else ""


def _is_keystrokes(action: str) -> bool:
    """A terminal action as the adapters write it: a JSON list of ``{"keystrokes": str, ...}`` objects."""
    steps = parse_action(action) if action.startswith("[{") else None
    return isinstance(steps, list) and bool(steps) and all(
        isinstance(s, dict) and isinstance(s.get("keystrokes"), str) for s in steps)


def templates_digest(extra_dirs: Sequence[str]) -> str:
    """sha256 of the text of every template in `extra_dirs` (in order), "" without any: what samples rendered
    with them depend on besides the folders' names (a template edited in place renders other samples)."""
    return _digest(_dirs(extra_dirs)) if extra_dirs else ""


@lru_cache(maxsize=8)
def _digest(dirs: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for source in dirs:
        texts = sorted(((d or "", name), text) for (d, name), text in read_source(source).items())
        digest.update(json.dumps([source, texts], ensure_ascii=False).encode())
    return digest.hexdigest()


def reload_templates() -> None:
    """Forget the template texts read so far: the next use reads the folders again (each run and each export
    starts with this, so a process that runs again sees templates edited since)."""
    read_source.cache_clear()
    variant_texts.cache_clear()
    _digest.cache_clear()
