"""Filling a template text with a trajectory's system fields and a domain's notes.

Substitution works on the template, never on the values: the template is scanned once for
``{name}`` placeholders and each is replaced by its value, so braces, ``$`` or placeholder-like
text inside a value are copied as they are. Unknown ``{name}``s are left in the text unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

from schemas.trajectory import Demonstration, SystemPrompt

# The five schema fields (SPEC §4), in schema order; this order is also the order in which
# fields that a template leaves out are appended.
FIELD_NAMES = ("task_description", "action_space", "initial_state", "demonstrations", "simulation_instruction")
FIELD_HEADINGS = {
    "task_description": "Task",
    "action_space": "Action space",
    "initial_state": "Initial state",
    "demonstrations": "Demonstrations",
    "simulation_instruction": "Simulation instruction",
}
PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
# A paragraph ends at one or more blank lines (lines holding at most spaces or tabs).
PARAGRAPH_BREAK = re.compile(r"\n(?:[ \t]*\n)+")
EMPTY_OBSERVATION = "(empty)"


def demonstrations_block(demos: list[Demonstration]) -> str:
    """Example action/observation pairs as numbered, readable blocks ('' when there are none)."""
    blocks = []
    for i, demo in enumerate(demos, 1):
        # An empty observation is a real answer (a command that prints nothing); say so visibly.
        observation = demo.observation if demo.observation.strip() else EMPTY_OBSERVATION
        blocks.append(f"Example {i}\nAction:\n{demo.action}\nObservation:\n{observation}")
    return "\n\n".join(blocks)


def field_values(system: SystemPrompt) -> dict[str, str]:
    """The five fields as text; a missing or whitespace-only field becomes ''."""
    values = {
        "task_description": system.task_description or "",
        "action_space": system.action_space or "",
        "initial_state": system.initial_state or "",
        "demonstrations": demonstrations_block(list(system.demonstrations or [])),
        "simulation_instruction": system.simulation_instruction or "",
    }
    return {name: value if value.strip() else "" for name, value in values.items()}


@lru_cache(maxsize=1024)
def _paragraphs(template: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """The template's paragraphs with the placeholder names each one mentions."""
    text = template.replace("\r\n", "\n").strip()
    return tuple((p.strip(), frozenset(PLACEHOLDER.findall(p))) for p in PARAGRAPH_BREAK.split(text) if p.strip())


def fill_template(template: str, fields: Mapping[str, str], context: Mapping[str, str]) -> str:
    """Fill `template` with the five `fields` and the `context` values (domain notes).

    A paragraph that mentions an empty value is left out whole, so a heading written next to
    its placeholder disappears with it. A non-empty field that no kept paragraph carries is
    appended at the end under its own heading, unless its text already stands there as whole
    lines: no field is ever lost, and none is said twice.
    """
    values = {**context, **fields}
    kept: list[str] = []
    carried: set[str] = set()
    for paragraph, names in _paragraphs(template):
        known = names & values.keys()
        if any(not values[name] for name in known):
            continue  # an empty value: this paragraph would be a heading with nothing under it
        kept.append(PLACEHOLDER.sub(lambda m: values.get(m[1], m[0]), paragraph))
        carried |= known
    for name in FIELD_NAMES:
        if fields.get(name) and name not in carried and not _holds_lines("\n\n".join(kept), fields[name]):
            kept.append(f"## {FIELD_HEADINGS[name]}\n{fields[name]}")
    return "\n\n".join(kept)


def _holds_lines(text: str, value: str) -> bool:
    """Whether `value` stands in `text` as whole lines: a field another field already holds (the initial screen
    inside an evaluator's system prompt read back as the simulation instruction) is not appended a second time,
    while a short value that merely occurs inside a sentence still gets its heading."""
    start = text.find(value)
    while start >= 0:
        end = start + len(value)
        if (start == 0 or text[start - 1] == "\n") and (end == len(text) or text[end] == "\n"):
            return True
        start = text.find(value, start + 1)
    return False
