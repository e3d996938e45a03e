"""Declared signatures of SWE-agent 1.x tool bundles, and the command-line parser that uses them.

SWE-agent 1.x declares each tool command in its bundle's ``config.yaml``: a ``signature`` (the order
of the arguments on the command line) and a list of ``arguments`` with ``name``, ``type``
(``string`` | ``integer`` | ``array`` with ``items``), ``required`` and an ``argument_format``.
The default format is the bare value (a positional argument); a format such as ``--view_range
{{value|join(' ')}}`` makes it an option. When the agent turns a call into a command line it
fills each argument's format, quoting string values for the shell, and leaves absent optional
arguments empty::

    str_replace_editor view /repo/a.py  --view_range 10 20
    str_replace_editor str_replace /repo/a.py   --old_str 'x = 1' --new_str 'x = 2'
    str_replace_editor insert /repo/a.py    --new_str 'import os' --insert_line 3

The system prompt that documents these commands shows the signature but not the formats, so the
signatures below are kept here, as the bundles declare them (checked against SWE-agent's
``tools/edit_anthropic``, ``tools/search``, ``tools/submit`` and ``tools/review_on_submit_m``
bundles of the 1.x series, and the ``-f``/``--force`` flag of the review_on_submit ``submit`` script). `parse_tool_command` reads a command line back into typed arguments
(``{"command": "view", "path": "/repo/a.py", "view_range": [10, 20]}``), the shape a
function-calling run records for the same call. A command line that does not fit its declared
signature (an unknown option, a missing required argument, a value of the wrong type, words left
over, unbalanced quotes) raises `CommandParseError`: it is never guessed into a wrong value.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

_INTEGER = re.compile(r"[+-]?\d+")


class CommandParseError(ValueError):
    """A command line that does not fit the declared signature of its tool."""


@dataclass(frozen=True)
class ToolArgument:
    name: str
    type: str  # "string" | "integer" | "array" | "boolean" (an option without a value)
    required: bool
    option: str | None = None  # "--view_range" when the argument is written as an option
    items: str | None = None  # item type of an array
    aliases: tuple[str, ...] = ()  # other spellings of the option ("--force" for "-f")


@dataclass(frozen=True)
class ToolSignature:
    """One command of a bundle; `arguments` in signature (command-line) order."""

    name: str
    bundle: str
    arguments: tuple[ToolArgument, ...]

    @property
    def positional(self) -> tuple[ToolArgument, ...]:
        return tuple(a for a in self.arguments if a.option is None)

    @property
    def options(self) -> dict[str, ToolArgument]:
        out = {}
        for a in self.arguments:
            for spelling in (a.option, *a.aliases) if a.option else ():
                out[spelling] = a
        return out


def _arg(name: str, type_: str = "string", required: bool = False, option: bool = False, items: str | None = None):
    return ToolArgument(name, type_, required, f"--{name}" if option else None, items)


TOOLS: dict[str, ToolSignature] = {
    t.name: t
    for t in (
        ToolSignature(
            "str_replace_editor",
            "edit_anthropic",
            (
                _arg("command", required=True),
                _arg("path", required=True),
                _arg("file_text", option=True),
                _arg("view_range", "array", option=True, items="integer"),
                _arg("old_str", option=True),
                _arg("new_str", option=True),
                _arg("insert_line", "integer", option=True),
            ),
        ),
        ToolSignature("find_file", "search", (_arg("file_name", required=True), _arg("dir"))),
        ToolSignature("search_dir", "search", (_arg("search_term", required=True), _arg("dir"))),
        ToolSignature("search_file", "search", (_arg("search_term", required=True), _arg("file"))),
        # tools/submit declares ``submit [<target_file>]``; the review_on_submit bundles' submit script
        # also takes ``-f``/``--force`` (submit without the review), which the agent itself may send.
        ToolSignature(
            "submit",
            "submit, review_on_submit_m",
            (_arg("target_file"), ToolArgument("force", "boolean", False, "-f", aliases=("--force",))),
        ),
    )
}
# Tools whose arguments include valued options: only the declared signature can read their command lines.
OPTION_TOOLS = frozenset(
    name for name, t in TOOLS.items() if any(a.option and a.type != "boolean" for a in t.arguments)
)


def _typed(tool: str, arg: ToolArgument, word: str) -> Any:
    if arg.type == "integer":
        if not _INTEGER.fullmatch(word):
            raise CommandParseError(f"{tool}: argument {arg.name} must be an integer, got {word!r}")
        return int(word)
    return word


def parse_tool_command(text: str, tool: ToolSignature) -> dict[str, Any]:
    """The arguments of one command line of `tool` (its name first), typed by the declaration."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise CommandParseError(f"{tool.name}: {exc}") from None
    if not words or words[0] != tool.name:
        raise CommandParseError(f"not a {tool.name} command")
    options = tool.options
    positional = list(tool.positional)
    found: dict[str, Any] = {}
    i = 1
    while i < len(words):
        word = words[i]
        if word in options:
            arg = options[word]
            if arg.name in found:
                raise CommandParseError(f"{tool.name}: option {word} given twice")
            if arg.type == "boolean":
                found[arg.name] = True
            elif arg.type == "array":
                values = []
                while i + 1 < len(words) and _INTEGER.fullmatch(words[i + 1]) and arg.items == "integer":
                    values.append(int(words[i + 1]))
                    i += 1
                if arg.items != "integer" or not values:
                    raise CommandParseError(f"{tool.name}: option {word} needs integer values")
                found[arg.name] = values
            else:
                if i + 1 >= len(words):
                    raise CommandParseError(f"{tool.name}: option {word} has no value")
                found[arg.name] = _typed(tool.name, arg, words[i + 1])
                i += 1
        elif word.startswith("-") and len(word) > 1 and options and not _INTEGER.fullmatch(word):
            raise CommandParseError(f"{tool.name}: unknown option {word}")
        elif positional:
            arg = positional.pop(0)
            found[arg.name] = _typed(tool.name, arg, word)
        else:
            raise CommandParseError(f"{tool.name}: unexpected argument {word!r}")
        i += 1
    missing = [a.name for a in tool.arguments if a.required and a.name not in found]
    if missing:
        raise CommandParseError(f"{tool.name}: missing required argument {', '.join(missing)}")
    return {a.name: found[a.name] for a in tool.arguments if a.name in found}
