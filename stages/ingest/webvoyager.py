"""``webvoyager``: WebVoyager ``interact_messages.json`` logs (one browsing task per file).

The file is the OpenAI chat the agent had with the browser harness (screenshots omitted).
Native messages (abridged)::

    {"role": "user", "content": [{"type": "text", "text": "Now given a task: Find ... Please interact with https://www.amazon.com/
     and get the answer. \\nObservation: please analyze the attached screenshot ...\\n[0]: \\".us\\", \\"Amazon\\";\\t[2]: <input> ..."}]}
    {"role": "assistant", "content": "Thought: The search box is [2].\\n\\nAction: Type [2]; green Xbox controller"}

Mapping to the unified schema (domain ``web``):

- task_description: the task sentence of the first user message (with its "Please interact with
  <site>" part); split_key: the task id from the folder name (``taskAmazon--0`` → ``Amazon--0``);
  traj_id: the folder name and a hash of the file's content (two runs of one task differ).
- each assistant message → one turn: ``Thought:`` → reasoning; ``Action:`` → canonical JSON
  (``{"action": "click", "element": 5}``, ``{"action": "type", "element": 3, "text": "..."}``,
  ``{"action": "scroll", "target": "WINDOW" | "element": n, "direction": "up"|"down"}``,
  ``wait``, ``go_back``, ``google``, ``{"action": "answer", "text": "..."}``), read the way the
  harness reads it (the first action pattern found, in the harness's order). A reply the harness
  could not execute (no ``Thought:``/``Action:``, or no known action) becomes
  ``{"action": "invalid", "text": <reply or action text>}``: the harness answered it with an error
  message, which is that turn's observation, so the turn is real environment behaviour.
- observation: the next user message. What stays: the page's labelled elements, one per line
  (``[ 2] | input | "Search Amazon"`` — the label, the tag for inputs/buttons/textareas, the
  element's quoted text(s) as the harness printed them), and the harness's notes about the
  action (a typing warning, a downloaded PDF's summary). What goes: the instructions repeated in
  every message ("please analyze the attached screenshot …"). Text-only runs (an accessibility
  tree instead of a labelled screenshot) keep the tree lines as they are. Error replies ("The
  action you have chosen cannot be executed …", "Format ERROR …") are kept verbatim.
- initial_state: the elements of the first user message.
- the ANSWER turn's observation is empty: the episode ends and the harness shows nothing; the
  answer also goes to ``meta.answer``. A final non-answer action with no reply after it (the
  step limit was reached) is dropped and named in ``meta.unobserved_final_action``.
- observations the harness cut from its context ("Observation: A screenshot and some texts.
  (Omitted in context.)") are lost states: the trajectory keeps the turns after the last lost
  state, that state's successor becoming initial_state; ``meta.omitted_turns`` counts the rest.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import Demonstration, SystemPrompt, Trajectory, Turn
from stages.ingest.common import canonical_json, make_trajectory, records_from_document, text_of
from stages.ingest.desktop_render import DEFAULT_LIMITS, RenderLimits, cap_lines
from stages.ingest.reading import InputUnit
from stages.ingest.registry import Probe, RawRecord

WEB_ACTION_SPACE = """\
Web actions, one JSON object per turn; elements are the numeric labels of the current page:
{"action": "click", "element": N}
{"action": "type", "element": N, "text": "..."} (clears the field, types, presses Enter)
{"action": "scroll", "target": "WINDOW", "direction": "up"|"down"} or {"action": "scroll", "element": N, "direction": ...}
{"action": "wait"}  {"action": "go_back"}  {"action": "google"} (opens the Google search page)
{"action": "answer", "text": "..."} (ends the task)
The observation lists the labelled elements of the page after the action, one per line."""

# The harness's own grammar (run.py of WebVoyager), tried in its order on the action text.
_ACTION_PATTERNS = [
    ("click", re.compile(r"Click \[?(\d+)\]?")),
    ("type", re.compile(r"Type \[?(\d+)\]?[; ]+\[?(.[^\]]*)\]?")),
    ("scroll", re.compile(r"Scroll \[?(\d+|WINDOW)\]?[; ]+\[?(up|down)\]?")),
    ("wait", re.compile(r"^Wait")),
    ("go_back", re.compile(r"^GoBack")),
    ("google", re.compile(r"^Google")),
    ("answer", re.compile(r"ANSWER[; ]+(.*)", re.S)),
]
_MARKERS = re.compile(r"Thought:|Action:|Observation:")
# Instructions the harness repeats in every observation message; they say nothing about the page.
_INSTRUCTIONS = (
    "please analyze the attached screenshot and give the Thought and Action.",
    "Please analyze the response given by Assistant, then consider whether to continue iterating or not.",
    "The screenshot of the current page is also attached, give the Thought and Action.",
    "The accessibility tree of the current page is also given, give the Thought and Action.",
    "please analyze the accessibility tree and give the Thought and Action.",
    "I've provided the tag name of each element and the text it contains (if text exists).",
    "Note that <textarea> or <input> may be textbox, but not exactly.",
    "Please focus more on the screenshot and then refer to the textual information.",
)
_OMITTED = re.compile(r"^\s*An? [^\n]*\(Omitted in context\.\)\s*$")
_ELEMENT_START = re.compile(r"(?:^|\t)\[(\d+)\]: ")
_TAG = re.compile(r"<([A-Za-z][A-Za-z0-9-]*)> ")
_TASK = re.compile(r"Now given a task:(.*?)(?:Observation:|$)", re.S)
_SITE = re.compile(r"Please interact with (\S+) and get the answer")
_SNIFF_ACTION = re.compile(r"Action: ?(?:Click|Type|Scroll|Wait|GoBack|Google|ANSWER)\b")


@dataclass(frozen=True)
class Observation:
    """One user message of the log, read: `text` is what the turn keeps; `omitted` marks a lost state."""

    text: str
    omitted: bool = False


class WebVoyagerAdapter:
    name = "webvoyager"
    description = "WebVoyager interact_messages.json (chat with labelled page elements)"
    domains = ("web",)
    default_domain = "web"
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        head = probe.head
        if probe.container != "json" or not head.lstrip().startswith("[") or '"role"' not in head:
            return 0.0
        harness = "Now given a task:" in head or bool(_SNIFF_ACTION.search(head))
        return 0.95 if harness and "Thought:" in head and "Observation:" in head else 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        """The whole message list as one record."""
        yield from records_from_document(unit, self.name, opts)

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        yield normalize_messages(record, opts.get("domain") or self.default_domain, opts.get("source_kind") or "public")


def normalize_messages(record: RawRecord, domain: str, source_kind: str) -> Trajectory:
    """One WebVoyager chat → one trajectory (raises `InvalidRecord`)."""
    messages = record.value()
    if not isinstance(messages, list):
        raise InvalidRecord("wrong_type", f"expected a list of messages, got {type(messages).__name__}")
    chat = [(i, _role_and_text(i, m)) for i, m in enumerate(messages)]
    chat = [(i, rt) for i, rt in chat if rt[0] != "system"]
    if not chat or chat[0][1][0] != "user":
        raise InvalidRecord("missing_task", "the first non-system message must be the user's task", "message 0")
    first_text = chat[0][1][1]
    task = _TASK.search(first_text)
    task_text = (task[1] if task else first_text.split("Observation:", 1)[0]).strip()
    marker = first_text.find("Observation:")
    states = [read_observation(first_text[marker:]) if marker >= 0 else Observation("", omitted=True)]

    turns: list[tuple[dict, str | None, int]] = []  # (action, reasoning, message index)
    expected = "assistant"
    for i, (role, text) in chat[1:]:
        if role != expected:
            raise InvalidRecord(
                "unexpected_message", f"message {i} is from {role}, expected {expected}", f"message {i}"
            )
        if role == "assistant":
            turns.append((*parse_reply(text), i))
        else:
            states.append(read_observation(text))
        expected = "user" if expected == "assistant" else "assistant"
    if not turns:
        raise InvalidRecord("no_turns", "the log has no assistant action")
    if marker < 0 and all(action["action"] == "invalid" and reasoning is None for action, reasoning, _ in turns):
        # neither a screen in the task message nor a single `Thought: … Action: …` reply: another format's chat
        raise InvalidRecord("wrong_format", "no WebVoyager observation in the first message and no reply in its "
                            "Thought:/Action: form", "document")

    meta: dict[str, Any] = {"session": _session_of(record.uri)}
    site = _SITE.search(first_text)
    if site:
        meta["website"] = site[1]
    last_action = turns[-1][0]
    if last_action["action"] == "answer":
        meta["answer"] = last_action["text"]
        if len(states) == len(turns):
            states.append(Observation(""))  # the episode ends: nothing more is shown
    if len(states) == len(turns):
        meta["unobserved_final_action"] = last_action
        turns = turns[:-1]
    # Keep the turns after the last lost state (states[k] is the state before turn k, states[k + 1] after it).
    start = max((k + 1 for k, state in enumerate(states) if state.omitted), default=0)
    if start >= len(turns):
        raise InvalidRecord("missing_state", "no turn has both of its states in the log", "document")
    if start:
        meta["omitted_turns"] = start
    out_turns = [
        Turn(canonical_json(action), states[k + 1].text, reasoning, json.dumps({"message": index}))
        for k, (action, reasoning, index) in enumerate(turns)
        if k >= start
    ]
    return make_trajectory(
        record,
        domain=domain,
        native_key=f"{meta['session']}:{hashlib.sha256(record.payload.encode()).hexdigest()[:16]}",
        turns=out_turns,
        system=SystemPrompt(task_text, WEB_ACTION_SPACE, states[start].text, web_demonstrations()),
        source_kind=source_kind,
        split_key=_task_id(meta["session"]),
        meta=meta,
    )


def web_demonstrations() -> list[Demonstration]:
    """The fixed demonstrations of this adapter's web trajectories (SPEC §4), an invented shop rendered by
    `render_web_elements` as the harness's pages are, so they show the observation format the turns have."""
    return [Demonstration(action, observation) for action, observation in _web_demonstrations()]


@lru_cache(maxsize=1)
def _web_demonstrations() -> tuple[tuple[str, str], ...]:
    results = render_web_elements(
        '[0]: "Northwind Supplies", "Home";\t[1]: <input> "Search";\t[2]: "Cart", "0 items in cart";\t'
        '[3]: "Results for \u201cusb-c cable\u201d";\t[4]: "USB-C to USB-C Cable, 2 m, 100 W";\t[5]: "$12.99";\t'
        '[6]: "4.6 out of 5 stars. 812";\t[7]: "USB-C to USB-A Cable, 1 m";\t[8]: "$8.49";'
    )
    product = render_web_elements(
        '[0]: "Northwind Supplies", "Home";\t[1]: <input> "Search";\t[2]: "Cart", "0 items in cart";\t'
        '[3]: "USB-C to USB-C Cable, 2 m, 100 W";\t[4]: "$12.99";\t[5]: "In stock";\t'
        '[6]: <button> "Add to Cart";\t[7]: "Customer reviews";'
    )
    return (
        (canonical_json({"action": "type", "element": 1, "text": "usb-c cable"}), "\n".join(results)),
        (canonical_json({"action": "click", "element": 4}), "\n".join(product)),
    )


def parse_reply(text: str) -> tuple[dict[str, Any], str | None]:
    """An assistant reply → (canonical action, reasoning), as the harness would execute it."""
    if "Thought:" not in text or "Action:" not in text:
        return {"action": "invalid", "text": text.strip()}, None
    parts = _MARKERS.split(text)
    thought, action_text = parts[1].strip(), parts[2].strip()
    return parse_action(action_text), thought or None


def parse_action(text: str) -> dict[str, Any]:
    """``Type [3]; hello`` → ``{"action": "type", "element": 3, "text": "hello"}``."""
    for kind, pattern in _ACTION_PATTERNS:
        match = pattern.search(text)
        if not match:
            continue
        if kind == "click":
            return {"action": "click", "element": int(match[1])}
        if kind == "type":
            return {"action": "type", "element": int(match[1]), "text": match[2]}
        if kind == "scroll":
            where = {"target": "WINDOW"} if match[1] == "WINDOW" else {"element": int(match[1])}
            return {"action": "scroll", **where, "direction": match[2]}
        if kind == "answer":
            answer = match[1].strip()
            # "ANSWER; [text]" wraps the answer in the format's brackets; "[a] and [b]" is an answer itself.
            if answer.startswith("[") and answer.endswith("]") and "]" not in answer[1:-1]:
                answer = answer[1:-1].strip()
            return {"action": "answer", "text": answer}
        return {"action": kind}
    return {"action": "invalid", "text": text}


def read_observation(text: str, limits: RenderLimits = DEFAULT_LIMITS) -> Observation:
    """A user message → the observation text the turn keeps (instructions dropped, elements one per line)."""
    marker = text.find("Observation:")
    if marker < 0:
        return Observation(text.strip())  # an error reply from the harness, kept as it is
    rest = text[marker + len("Observation:") :]
    if _OMITTED.match(rest):
        return Observation("", omitted=True)
    ends = [rest.find(s) + len(s) for s in _INSTRUCTIONS if s in rest]
    header_end = max(ends) if ends else (rest.find("\n") if "\n" in rest else len(rest))
    note = rest[:header_end]
    for sentence in _INSTRUCTIONS:
        note = note.replace(sentence, "")
    note = "\n".join(" ".join(line.split()) for line in note.splitlines() if line.strip())
    body = rest[header_end:].lstrip(" ").removeprefix("\n")
    lines = [note] if note else []
    if "accessibility tree" in rest[:header_end]:
        lines.extend(line.rstrip() for line in body.splitlines() if line.strip())
    else:
        lines.extend(render_web_elements(body))
    text_out, _shown = cap_lines(lines, limits)
    return Observation(text_out)


def render_web_elements(body: str) -> list[str]:
    """The harness's ``[2]: <input> "Search";\\t[5]: "EN", "Choose a language";`` list → one line per element."""
    starts = list(_ELEMENT_START.finditer(body))
    if not starts:
        return [line.rstrip() for line in body.splitlines() if line.strip()]
    lines = [body[: starts[0].start()].strip()] if body[: starts[0].start()].strip() else []
    for n, match in enumerate(starts):
        end = starts[n + 1].start() if n + 1 < len(starts) else len(body)
        entry = body[match.end() : end].strip().removesuffix(";").strip()
        entry = " ".join(entry.split("\n"))
        tag = _TAG.match(entry)
        fields = [f"[{int(match[1]):>2}]"]
        if tag:
            fields.append(tag[1])
            entry = entry[tag.end() :]
        fields.append(entry)
        lines.append(" | ".join(fields))
    return lines


def _role_and_text(index: int, message: Any) -> tuple[str, str]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise InvalidRecord("malformed_message", f"message {index} has no role", f"message {index}")
    return message["role"], text_of(message.get("content"))


def _session_of(uri: str) -> str:
    return posixpath.basename(posixpath.dirname(uri.rstrip("/"))) or posixpath.basename(uri)


def _task_id(session: str) -> str | None:
    # The harness names each task folder "task<id>", e.g. taskAmazon--0.
    return session[len("task") :] if session.startswith("task") and len(session) > len("task") else None


ADAPTER = WebVoyagerAdapter()
