"""Rule verifiers: deterministic 0/1 checks of a predicted observation against the reference.

A verifier only judges what the reference fixes regardless of hidden environment state; the
rest is left to the rubric judge. `verifier_kind` picks one kind per sample from its domain and
reference observation (the rl pool records it in its ``verifier`` column when it is built);
`verify` runs it. A sample whose reference allows none gets ``"none"`` and no rule reward.
A reference that does not fit the verifier asked for raises `ReferenceMismatch` (the caller gives no
rule reward); a prediction a verifier cannot read (too deeply nested, a number of more digits than
Python converts) fails the check like any other wrong prediction, so a degenerate output can neither
crash the caller nor escape a failing check.

Kinds and their scope (the docstring of each check says exactly what it compares):

- ``json_fields`` — any domain whose reference is a JSON object or array (tool results);
- ``terminal`` — ``terminal`` and ``swe`` references that are not JSON: exit status and the
  deterministic lines of the output;
- ``ui_elements`` — ``android``, ``web`` and ``os`` screens rendered as indexed element lines:
  which elements are present and absent.
"""

from __future__ import annotations

import json
import re
from typing import Any

NO_VERIFIER = "none"
JSON_FIELDS, TERMINAL, UI_ELEMENTS = "json_fields", "terminal", "ui_elements"
VERIFIER_KINDS = (JSON_FIELDS, TERMINAL, UI_ELEMENTS)
UI_DOMAINS = frozenset({"android", "web", "os"})
TERMINAL_DOMAINS = frozenset({"terminal", "swe"})

FREE_TEXT_CHARS = 80
_VOLATILE_KEY = re.compile(
    r"time|date|created|updated|modified|elapsed|duration|latency|uuid|etag|nonce|request_?id|trace_?id",
    re.IGNORECASE,
)



class ReferenceMismatch(ValueError):
    """The reference gives the verifier nothing to check (the sample then has no rule reward)."""


# ----------------------------------------------------------------------------------- JSON fields

def _json_documents(text: str) -> list[Any] | None:
    """The JSON values `text` holds one after another (tools print several objects in a row); None when it is
    not JSON, or JSON that Python cannot read (nested deeper than its recursion limit, an integer of more digits
    than it converts)."""
    decoder, s, pos, docs = json.JSONDecoder(), text.strip(), 0, []
    while pos < len(s):
        try:
            value, pos = decoder.raw_decode(s, pos)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError, as is the digit limit
            return None
        docs.append(value)
        while pos < len(s) and s[pos].isspace():
            pos += 1
    return docs or None


def _json_container(text: str) -> Any:
    """A JSON object or array (several concatenated ones become one array); None for anything else."""
    s = text.strip()
    if not s or s[0] not in "[{":
        return None
    docs = _json_documents(s)
    if docs is None or not all(isinstance(d, dict | list) for d in docs):
        return None
    value = docs[0] if len(docs) == 1 else docs
    return value if value else None


def _is_free_text(value: Any) -> bool:
    return isinstance(value, str) and (len(value) > FREE_TEXT_CHARS or "\n" in value)


def _same_fields(ref: Any, pred: Any) -> bool:
    # a stack, not recursion: JSON that parses can still be nested deeper than comparing it recursively allows
    todo: list[tuple[Any, Any, str]] = [(ref, pred, "")]
    while todo:
        ref, pred, key = todo.pop()
        if isinstance(ref, dict):
            if not isinstance(pred, dict) or ref.keys() != pred.keys():
                return False
            todo += [(v, pred[k], str(k)) for k, v in ref.items()]
        elif isinstance(ref, list):
            if not isinstance(pred, list) or len(ref) != len(pred):
                return False
            todo += [(r, p, key) for r, p in zip(ref, pred)]
        elif _is_free_text(ref) or (key and _VOLATILE_KEY.search(key)):
            if type(pred) is not type(ref):
                return False
        elif type(pred) is not type(ref) or pred != ref:
            return False
    return True


def verify_json_fields(prediction: str, reference: str) -> bool:
    """Structured fields of a JSON tool result match exactly.

    Passes when the prediction parses as JSON and has the reference's structure — the same keys
    in every object, the same length in every array — and every scalar leaf is equal in type and
    value, except two kinds of leaves that only need the same type: free text (a string longer
    than `FREE_TEXT_CHARS` characters or holding a newline: article bodies, snippets) and values
    under a volatile key (time, date, created/updated, duration, uuid, request id …). Key order
    and whitespace do not matter.
    """
    ref = _json_container(reference)
    if ref is None:
        raise ReferenceMismatch("reference is not a JSON object or array")
    docs = _json_documents(prediction)
    if docs is None:
        return False
    return _same_fields(ref, docs[0] if len(docs) == 1 else docs)


# -------------------------------------------------------------------------------------- terminal

_EXIT_PATTERNS = (
    re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>"),
    re.compile(r"\bexit(?:\s+|_)(?:code|status)\b\s*[:=]?\s*(-?\d+)", re.IGNORECASE),
)
_EXIT_DIGITS = 20  # more is no exit status (and beyond 4,300 Python's int() refuses the digits)
_WRAPPER_LINE = re.compile(r"^\s*</?(?:returncode|output)>.*$|^\s*<returncode>.*</returncode>\s*$")
_VOLATILE_LINE = re.compile(
    r"\b\d{1,2}:\d{2}(?::\d{2})?\b"  # clock times
    r"|\b\d{4}-\d{2}-\d{2}\b"  # dates
    r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\b"
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,}\b"  # hashes, container ids
    r"|\b0x[0-9a-fA-F]+\b"  # addresses
    r"|\b\d+(?:\.\d+)?\s*(?:ms|µs|us|ns|s|sec|secs|seconds|min)\b"  # durations
    r"|\b\d+(?:\.\d+)?\s*[KMGT]i?B(?:/s)?\b"  # sizes and speeds
    r"|\b\d+(?:\.\d+)?%"  # progress
    r"|\bpid\s*[:=]?\s*\d+",
    re.IGNORECASE,
)


def exit_status(text: str) -> int | None:
    """The exit status an observation shows (``<returncode>N</returncode>``, ``exit code: N``); None when it shows
    none, or a number too long to be one."""
    for pattern in _EXIT_PATTERNS:
        m = pattern.search(text)
        if m:
            digits = m.group(1).lstrip("-")
            return int(m.group(1)) if len(digits) <= _EXIT_DIGITS else None
    return None


def deterministic_lines(text: str) -> list[str]:
    """Non-blank output lines (right-stripped) without clock times, dates, hashes, addresses,
    durations, sizes, percentages or PIDs; exit-status and ``<output>`` wrapper lines excluded."""
    lines = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line.strip() or _WRAPPER_LINE.match(line) or _VOLATILE_LINE.search(line):
            continue
        lines.append(line)
    return lines


def _is_subsequence(needles: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(any(n == h for h in it) for n in needles)


def verify_terminal(prediction: str, reference: str) -> bool:
    """Exit status and deterministic lines of terminal output match.

    Passes when (a) the prediction shows the same exit status as the reference, if the reference
    shows one, and (b) every deterministic line of the reference (`deterministic_lines`) appears
    in the prediction, whole and in the same order (lines compared right-stripped; the prediction
    may add lines). Volatile lines — times, dates, hashes, sizes, durations — are the rubric's.
    """
    ref_status = exit_status(reference)
    if ref_status is not None and exit_status(prediction) != ref_status:
        return False
    wanted = deterministic_lines(reference)
    if ref_status is None and not wanted:
        raise ReferenceMismatch("reference has neither an exit status nor a deterministic line")
    got = [line.rstrip() for line in prediction.splitlines()]
    return _is_subsequence(wanted, got)


# ----------------------------------------------------------------------------------- UI elements

_ELEMENT_LINE = re.compile(r"^\s*\[\s*\d+\]\s*(?:\|(.*))?$")


def element_identities(text: str) -> set[str]:
    """Identities of the indexed element lines of a rendered screen.

    An element line is ``[N] | field | field …`` (`stages.ingest.android_render`, the web and
    desktop renderers); its identity is its fields without the index and without ``bounds=…``
    (class, text, name, resource id, state flags). Elements without any such field are skipped.
    """
    out = set()
    for line in text.splitlines():
        m = _ELEMENT_LINE.match(line)
        if not m or not m.group(1):
            continue
        fields = [f.strip() for f in m.group(1).split(" | ")]
        ident = " | ".join(f for f in fields if f and not f.startswith("bounds="))
        if ident:
            out.add(ident)
    return out


def verify_ui_elements(prediction: str, reference: str) -> bool:
    """Presence and absence of UI elements on a screen match.

    Passes when the set of element identities (`element_identities`) of the prediction equals the
    reference's: every reference element is present and no element the reference lacks is
    predicted. Indices, bounds, order and repeated elements do not matter.
    """
    wanted = element_identities(reference)
    if not wanted:
        raise ReferenceMismatch("reference has no identifiable element line")
    return element_identities(prediction) == wanted


# ------------------------------------------------------------------------------------- dispatch

VERIFIERS = {JSON_FIELDS: verify_json_fields, TERMINAL: verify_terminal, UI_ELEMENTS: verify_ui_elements}


def verifier_kind(domain: str, reference: str) -> str:
    """The verifier that applies to a sample of `domain` with this reference, or `NO_VERIFIER`."""
    if _json_container(reference) is not None:
        return JSON_FIELDS
    if domain in TERMINAL_DOMAINS and (exit_status(reference) is not None or deterministic_lines(reference)):
        return TERMINAL
    if domain in UI_DOMAINS and element_identities(reference):
        return UI_ELEMENTS
    return NO_VERIFIER


def verify(kind: str, prediction: str, reference: str) -> bool | None:
    """Run verifier `kind`; None for `NO_VERIFIER` (no rule reward). Unknown kinds are an error."""
    if kind == NO_VERIFIER or not kind:
        return None
    if kind not in VERIFIERS:
        raise ValueError(f"unknown verifier kind {kind!r}; known: {', '.join(VERIFIER_KINDS)}")
    return VERIFIERS[kind](prediction, reference)
