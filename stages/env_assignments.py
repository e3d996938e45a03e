"""Where an assignment is configuration, not code: there a bare word of letters is a value, not a name.

`stages.redact` keeps an unquoted all-letters value (``password=password``, ``password: str``) because in code it
is a variable or a type. In an environment assignment it can only be a literal, so ``export DB_PASSWORD=letmein``
must lose ``letmein``. `assignment_context` tells the two apart from the text around one assignment whose key
already names a secret:

- ``ENVIRONMENT`` — ``export NAME=…`` (also ``declare``, ``typeset``, ``readonly``, ``local``), ``env NAME=…``,
  ``sudo NAME=…``, ``-e``/``--env``/``--build-arg NAME=…`` (Docker, Podman), ``--from-literal=name=…`` (a Kubernetes
  secret), Dockerfile ``ENV``/``ARG NAME=…`` and ``ENV NAME value``, each with any earlier ``A=1`` on the same
  command; and for an UPPER_CASE name only (lower-case ones are keyword arguments: ``password=password,``): a
  command prefix or ``.env`` line ``NAME=value`` at the start of a line, after a prompt (``$ ``, ``# ``), after
  ``;``/``&&``/``|``/``(`` or an opening quote, ended by whitespace or the end of the command (``NAME=v,`` or
  ``NAME=v)`` is a call), a compose list item ``- NAME=value``, and a compose/Kubernetes ``NAME: value`` line. There
  any literal counts — also what the generic ``token``/``secret`` keys keep (``API_TOKEN=abcdef…``, a short
  ``SECRET_KEY=letmein``): those allowances exist for tokenizer entries, logprobs and prose, which an environment
  does not hold;
- ``MAPPING`` — a lower- or mixed-case ``name: value`` line (YAML, a credentials block in a prompt: ``Password:
  theagentcompany``). Decided: its value is taken as a secret too, but only when it is alone on its line (an
  optional ``# comment`` aside), is all lower-case letters, is no type name (``str``, ``string``, ``bool`` …), and
  the key does not end with it. So ``password: letmein`` in a database.yml goes, while the code that shares the
  shape stays: annotations (``password: str``, ``token: string;``, ``password: str = None``, ``password: str,``),
  class names (``token: Token``, ``password: SecretStr``), a JS or Ruby object's last entry (``password:
  password``), and a value followed by more (``Password: see below``). The generic-key allowances still hold there
  (``token: identifier`` in a lexer dump stays). A ``key = value`` or ``key=value`` line of an INI file (a MySQL
  option file's ``[client]`` / ``password = letmein``) is a ``MAPPING`` too when a ``[section]`` header line comes
  before it, the key starts its line and the value ends it, and the value is not the key's own name; without a header
  such a line stays, as it shares its shape with Python's ``password = password`` or a keyword argument on a line of
  its own. So is a line of a Java ``.properties`` file (``spring.datasource.password=changeme``): a dotted key alone at
  the line's start (no ``self.``/``this.``), ``=`` without spaces or ``: ``, and a value that ends the line and is not
  the key's last name.

A letters-only value is still kept when it is dotted or followed by ``(`` or ``[`` (``os.environ[…]``,
``get_password()``), and a capitalised value in a ``NAME: value`` line stays as a possible type name.
"""

from __future__ import annotations

import re

ENVIRONMENT = "environment"
MAPPING = "mapping"

_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REACH = 256  # characters looked back on the line for the command that holds an assignment
# Earlier assignments of the same command (`A=1 B="x y" NAME=…`).
_PRIOR = r"(?:[A-Za-z_][A-Za-z0-9_]*=(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']*)[ \t]+)*"
_INDENT = r"(?:[ \t]|\\t)*"  # also JSON-escaped tabs
# `before` is the line up to the key, after a "\x00" when the line's start lies beyond the reach: `\A` is a line start.
_EXPLICIT = re.compile(
    r"(?:(?<![\w-])(?:export|declare|typeset|readonly|local|env|sudo)(?:[ \t]+-{1,2}[\w-]+)*[ \t]+" + _PRIOR
    + r"|(?<![\w-])(?:-e|--env|--build-arg|--from-literal)(?:[ \t]+|=)"
    + r"|\A" + _INDENT + r"(?:ENV|ARG)[ \t]+" + _PRIOR + r")\Z"
)
_COMMAND_START = re.compile(r"(?:\A" + _INDENT + r"(?:-[ \t]+)?|[;&|(`\"'][ \t]*|[$#%>][ \t]+)" + _PRIOR + r"\Z")
_LINE_PREFIX = re.compile(_INDENT + r"(?:[-*][ \t]+)?")  # a `name: value` line's indentation and list marker
_DOCKERFILE_ENV = re.compile(r"\A" + _INDENT + r"ENV[ \t]+\Z")
# What may follow an unquoted value of a command: whitespace, the command's end, a closing quote or an escape.
_COMMAND_END = frozenset(["", " ", "\t", "\r", "\n", ";", "&", "|", "\\", '"', "'", "`"])
# The rest of a `name: value` line: an optional comment, then the line's end (also JSON-escaped) or a closing quote.
_LINE_END = re.compile(r"[ \t]*(?:[ \t]#[^\n\\]*)?(?:\Z|[\r\n\"'`]|\\[nr\"'])")
_LEGACY_VALUE = re.compile(
    r"[ \t]+(?:(?P<q>[\"'])(?P<qv>[^\"'\n\\]{1,512})(?P=q)|(?P<uv>[^\s\"'\\](?:[^\n\"'\\]{0,510}[^\s\"'\\])?))"
    r"[ \t]*(?=\Z|[\r\n\"']|\\[nr])"
)
_LOWER_WORD = re.compile(r"[a-z]+")
_INDENT_ONLY = re.compile(_INDENT)
_PROPERTIES_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)+")
_CODE_OBJECTS = frozenset(["self", "this", "cls", "super"])
_INI_SECTION = re.compile(r"^[ \t]*\[[A-Za-z0-9_][A-Za-z0-9_ .:-]{0,63}\][ \t]*\r?$", re.MULTILINE)  # `[client]`
_TYPE_NAMES = frozenset([
    "str", "string", "int", "integer", "float", "double", "number", "bool", "boolean", "bytes", "bytearray", "list",
    "dict", "set", "frozenset", "tuple", "object", "any", "unknown", "never", "void", "symbol", "bigint", "char", "text",
    "varchar", "uuid", "date", "datetime", "timestamp", "binary", "blob", "array", "map",
])


def _unescaped(text: str, key_start: int) -> int:
    """Where a key starts that a JSON escape before it glued a letter to (``\\nPassword`` is found as
    ``nPassword``)."""
    return key_start + 1 if text[key_start - 1 : key_start] == "\\" and text[key_start : key_start + 1] in "nrt" else key_start


def _line_before(text: str, key_start: int) -> str:
    """The text from the start of the key's line (a real or a JSON-escaped line break) up to the key."""
    low = max(0, key_start - _REACH)
    cut = max(text.rfind("\n", low, key_start), text.rfind("\r", low, key_start))
    escaped = max(text.rfind("\\n", low, key_start), text.rfind("\\r", low, key_start))
    start = max(cut + 1, escaped + 2 if escaped >= 0 else -1)
    if start > 0 or low == 0:
        return text[max(start, 0) : key_start]
    return "\x00" + text[low:key_start]


def assignment_context(text: str, key_start: int, key_end: int, value_start: int, value_end: int, value: str,
                       quoted: bool) -> str | None:
    """``ENVIRONMENT``, ``MAPPING`` or None (code, or no telling) for the assignment of `value` to the key at
    ``text[key_start:key_end]``; the value's token (with its quotes) spans ``value_start:value_end``."""
    key_start = _unescaped(text, key_start)
    key = text[key_start:key_end]
    if not _SHELL_NAME.fullmatch(key):
        return MAPPING if _properties_line(text, key_start, key, text[key_end:value_start], value, value_end, quoted) else None
    separator = text[key_end:value_start]
    upper = key == key.upper()
    if separator == "=":
        # the cheap checks first: most assignments in code are keyword arguments (`password=password,`)
        following = text[value_end : value_end + 1]
        ends_command = quoted or following in _COMMAND_END
        if not ends_command and following != ")":
            return None
        before = _line_before(text, key_start)
        if _EXPLICIT.search(before) or (upper and ends_command and _COMMAND_START.search(before)):
            return ENVIRONMENT
    if separator.strip(" \t") == "=":
        return MAPPING if _ini_line(text, key_start, key, value, value_end, quoted) else None
    if separator[:1] != ":" or separator[1:].strip(" \t") or len(separator) < 2:
        return None
    if not _LINE_END.match(text, value_end):
        return None
    if not quoted and (not _LOWER_WORD.fullmatch(value) or value in _TYPE_NAMES):
        return None
    if not upper and (quoted or key.lower().endswith(value)):
        return None
    before = _line_before(text, key_start)
    if before[-1:] not in ("\"", "'", "`") and not _LINE_PREFIX.fullmatch(before):
        return None
    return ENVIRONMENT if upper else MAPPING


def _ini_line(text: str, key_start: int, key: str, value: str, value_end: int, quoted: bool) -> bool:
    """A ``key = value`` line of an INI file: the key starts its line, the value ends it, a ``[section]`` header line
    comes before it (within 64 KiB), and the value is not the key's own name (``password = password``)."""
    if quoted or key.lower().endswith(value.lower()) or not _LINE_END.match(text, value_end):
        return False
    if not _INDENT_ONLY.fullmatch(_line_before(text, key_start)):
        return False
    return _INI_SECTION.search(text, max(0, key_start - 65536), key_start) is not None


def _properties_line(text: str, key_start: int, key: str, separator: str, value: str, value_end: int,
                     quoted: bool) -> bool:
    """A line of a Java ``.properties`` file (``spring.datasource.password=changeme``, ``db.password: letmein``): a
    dotted key that starts its line and is no object's attribute (``self.``, ``this.``), ``=`` without spaces or ``:``
    and a space, and a value that ends the line and is not the key's own last name (``self.password=password``)."""
    if quoted or not _PROPERTIES_KEY.fullmatch(key) or key.split(".", 1)[0] in _CODE_OBJECTS:
        return False
    if separator != "=" and (separator[:1] != ":" or not separator[1:] or separator[1:].strip(" \t")
                             or value.lower() in _TYPE_NAMES):  # `config.password: str` annotates
        return False
    if key.rsplit(".", 1)[1].lower().endswith(value.lower()) or not _LINE_END.match(text, value_end):
        return False
    return _INDENT_ONLY.fullmatch(_line_before(text, key_start)) is not None


def dockerfile_env_value(text: str, key_start: int, key_end: int) -> tuple[int, int, bool] | None:
    """The span of the value in a Dockerfile's legacy ``ENV NAME value`` line (the rest of the line) and whether it
    was quoted, or None."""
    key_start = _unescaped(text, key_start)
    if not _SHELL_NAME.fullmatch(text[key_start:key_end]) or not _DOCKERFILE_ENV.search(_line_before(text, key_start)):
        return None
    m = _LEGACY_VALUE.match(text, key_end)
    if m is None:
        return None
    group = "qv" if m.group("qv") is not None else "uv"
    return m.start(group), m.end(group), group == "qv"
