"""References: values that name a secret kept elsewhere instead of holding one (SPEC §10 keeps them).

A value is a reference only when the whole of it is one of these shapes; a value that merely starts like one is a
literal and may be a secret (``"$3cr3tP@ss"``, ``"<K9#mZ>q2"``, ``"{Xy9z}Abc1"``, ``"<|im_end|>abcDEF123456"``, and a
forged ``"<SECRET:password>hunter2pw"``):

- shell and compose variables: ``$NAME``, ``$1``, ``${NAME}``, ``${NAME:-default}`` (and ``-``, ``:=``, ``=``, ``:+``,
  ``+``, ``:?message``, ``?``), ``$(command)``, PowerShell's ``$env:NAME``, GitHub Actions' ``${{ secrets.NAME }}``;
- templates: ``{{ jinja }}``, Python format fields (``{name}``, ``{}``, ``{0}``, ``{user.password!r:>8}``),
  ``%(name)s``, ``%s``;
- angle placeholders of words, hyphens and underscores (``<your-token>``, ``<API_KEY>``, ``<your password here>``),
  tokenizer special tokens (``<s>``, ``</s>``, ``<|endoftext|>``) and a redaction placeholder alone (``<SECRET:jwt>``);
- environment lookups: ``process.env.NAME``, ``process.env["NAME"]``, ``os.environ["NAME"]``,
  ``os.environ.get("NAME")``, ``os.getenv("NAME")``, ``getenv("NAME")``.

The default of ``${NAME:-default}`` is a literal the shell falls back to (``${DB_PASSWORD:-Sup3rS3cret}``), so
`reference_defaults` hands it back for the caller to judge like any assigned value.
"""

from __future__ import annotations

import re

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ENV_KEY = r"(?P<q{n}>['\"])[\w.\-]{{1,128}}(?P=q{n})"
_REFERENCE = (
    r"\$?\{\{[^{}\n]{1,256}\}\}"  # {{ jinja }}, ${{ secrets.NAME }}
    r"|\$\{[#!]?" + _NAME + r"(?:\[[^\]\n]{0,64}\])?"
    r"(?:(?P<op>:?[-=+?])(?P<default>(?:[^{}\n]|\$\{[^{}\n]{0,128}\}){0,256}))?\}"
    r"|\$\{[0-9@*#?$!]\}"
    r"|\$\((?:[^()\n]|\([^()\n]{0,256}\)){1,256}\)"  # $(command), one level of nesting
    r"|\$env:" + _NAME + r"|\$(?:" + _NAME + r"|[0-9@*#?$!])"
    r"|\{(?:" + _NAME + r"(?:\.\w+|\[[^\]\n]{0,64}\])*|\d{0,3})(?:![rsa])?(?::[^{}\n]{0,32})?\}"
    r"|%\([\w.\-]{1,64}\)[sdifrx]|%s"
    r"|<SECRET:[a-z_]+>|<\|[\w\-]{1,64}\|>"
    r"|</?[A-Za-z][\w\-]{0,63}(?: [\w\-]{1,63}){0,7}>"
    r"|process\.env(?:\." + _NAME + r"|\[" + _ENV_KEY.format(n=1) + r"\])"
    r"|os\.environ\[" + _ENV_KEY.format(n=2) + r"\]"
    r"|(?:os\.environ\.get|os\.getenv|getenv)\(" + _ENV_KEY.format(n=3) + r"\)"
)
_WHOLE = re.compile(_REFERENCE)
# The bracketed shapes a value may start with (``${DB_PASSWORD}``, ``$(cat f)``, ``{{ pw }}``, ``{pw}``, ``%(pw)s``,
# ``<your-password>``), for value classes that stop at brackets: a rule takes such a start whole with what follows it,
# so that ``{Xy9z}Abc1`` is judged as one value, not as a reference and a word. A brace followed by a quote opens an
# object (``{"type":"string"}``, also JSON-escaped), never one value, so that start leaves quotes out.
BRACKETED_START = (
    r"(?:\$?\{\{[^{}\n]{1,256}\}\}|\$\{(?:[^{}\s]|\$\{[^{}\s]{0,128}\}){1,256}\}"
    r"|\$\((?:[^()\n]|\([^()\n]{0,256}\)){1,256}\)|\{[^{}\s\"'`\\]{0,256}\}|%\([^()\s]{1,64}\)|<[^<>\s]{1,256}>)"
)
# A reference at the start of a value that a rule's value class cut short (``--password=$(cat f)`` stops at the
# space): it must end where the value's context would, not run on into more characters.
_AT = re.compile(r"(?:" + _REFERENCE + r")(?=[\s\"'`,;&|)\]}>\\]|\Z)")


def _defaults(m: re.Match) -> list[str]:
    """The literal a reference falls back to: ``:-``/``-``/``:=``/``=`` defaults and ``:+``/``+`` alternatives
    (``:?`` carries an error message, not a value)."""
    op = m.group("op")
    return [m.group("default")] if op and not op.endswith("?") and m.group("default") else []


def reference_defaults(value: str) -> list[str] | None:
    """None when `value` is not a whole reference; else the literals it falls back to (mostly none)."""
    m = _WHOLE.fullmatch(value)
    return None if m is None else _defaults(m)


def reference_at(text: str, start: int) -> tuple[int, list[str]] | None:
    """A reference starting at `start` and ending where a value ends (whitespace, a quote or closing punctuation):
    its end and its fallback literals, or None."""
    m = _AT.match(text, start)
    return None if m is None else (m.end(), _defaults(m))
