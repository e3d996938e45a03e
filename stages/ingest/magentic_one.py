"""``magentic-one``: Magentic-One multi-agent logs (as in the Who&When failure-attribution set).

One JSON object per run: ``question``, ``history`` (the group chat: ``human``, ``Orchestrator
(thought)``, ``Orchestrator (-> WebSurfer)``, ``WebSurfer``, ``Assistant``, ...) and dataset keys
(``ground_truth``, ``question_ID``, ``mistake_agent`` ...). Native record (two messages)::

    {"role": "Orchestrator (-> WebSurfer)", "content": "Please look up the sixth studio album of Michael Jackson."}
    {"role": "WebSurfer", "content": "I typed 'Michael Jackson sixth studio album' into the browser search bar.\\n\\nHere is a screenshot of [...](https://www.bing.com/...). ..."}

The WebSurfer is the only agent that touches an environment (the browser), so its steps are the
turns (domain ``search``); the orchestrator's planning and the other agents are context.

- A WebSurfer step is a message that describes a browser action in the WebSurfer's fixed
  sentences and then the page it landed on (``Here is a screenshot of [title](url) ...`` with
  metadata and OCR text). The sentence becomes a tool call in the WebSurfer's own tool names:
  ``web_search {query}``, ``visit_url {url}``, ``input_text {input_field, text_value}``,
  ``click {target}``, ``hover {target}``, ``history_back``, ``page_up``, ``page_down``,
  ``scroll_element_up/down {target}``, ``sleep``. When the text before the page description
  is no known sentence (the summary ``answer_question`` / ``summarize_page`` return, or an
  error), the action is ``{"name": "answer_question", "arguments": {}}`` and that text opens the
  observation. A WebSurfer message without a page description is the WebSurfer talking, not
  acting: it is context, counted in ``meta.surfer_replies``.
- The observation is the page description from ``Here is a screenshot of`` on, as the
  orchestrator saw it. ``turn.reasoning`` is the orchestrator's instruction to the WebSurfer
  since its previous step (none when it acts again unprompted), followed by any words of the
  WebSurfer before its action sentence.
  When the run script's own log (traceback, ``FINAL ANSWER``, ``SCENARIO.PY COMPLETE``) was
  appended to a page description, it is cut off and its length noted in ``turn.meta``.
- ``system.task_description``: ``question`` (else the first ``human`` message); ``split_key``:
  ``question_ID``; the final answer (``FINAL ANSWER: …`` of the termination message), the
  ground truth and the dataset's attribution fields go to ``meta``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import SystemPrompt, Trajectory, Turn
from stages.ingest.common import canonical_json, make_trajectory, records_from_container, text_of
from stages.ingest.reading import InputUnit
from stages.ingest.registry import Probe, RawRecord

FORMAT = "magentic-one"
SURFER = "WebSurfer"
PAGE_MARKER = "Here is a screenshot of"
_FINAL_ANSWER = re.compile(r"FINAL ANSWER:\s*(.*)")
HARNESS_END = "SCENARIO.PY COMPLETE"
_HARNESS_LOG = re.compile(r"\n(?:Error processing publish message|Traceback \(most recent call last\):|FINAL ANSWER:)")
_DATASET_KEYS = ("ground_truth", "is_corrected", "mistake_agent", "mistake_step", "mistake_reason", "level")

# The WebSurfer's action sentences, most specific first; named groups become arguments.
_ACTION_SENTENCES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.S))
    for name, pattern in (
        ("web_search", r"I typed '(?P<query>.*)' into the browser search bar\."),
        ("visit_url", r"I typed '(?P<url>.*)' into the browser address bar\."),
        ("input_text", r"I typed '(?P<text_value>.*)' into '(?P<input_field>.*)'\."),
        ("input_text", r"I typed '(?P<text_value>.*)' into the control\."),
        ("input_text", r"I input '(?P<text_value>.*)'\."),
        ("history_back", r"I clicked the browser back button\."),
        ("click", r"I clicked the control\."),
        ("click", r"I clicked '(?P<target>.*)'\."),
        ("hover", r"I hovered over the control\."),
        ("hover", r"I hovered over '(?P<target>.*)'\."),
        ("page_up", r"I scrolled up one page in the browser\.?"),
        ("page_down", r"I scrolled down one page in the browser\.?"),
        ("scroll_element_up", r"I scrolled '(?P<target>.*)' up\."),
        ("scroll_element_up", r"I scrolled the control up\."),
        ("scroll_element_down", r"I scrolled '(?P<target>.*)' down\."),
        ("scroll_element_down", r"I scrolled the control down\."),
        ("sleep", r"I am waiting a short period of time before taking further action\."),
    )
)


def _is_magentic_history(history: Any) -> bool:
    if not isinstance(history, list):
        return False
    roles = {m.get("role") for m in history[:50] if isinstance(m, dict)}
    return SURFER in roles or any(isinstance(r, str) and r.startswith("Orchestrator (") for r in roles)


class MagenticOneAdapter:
    name = FORMAT
    description = "Magentic-One multi-agent logs: history of Orchestrator / WebSurfer / ... messages"
    domains = ("search",)
    default_domain = "search"
    line_records = True  # a .jsonl file may be read as byte ranges of whole lines
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        return 0.95 if isinstance(rec, dict) and _is_magentic_history(rec.get("history")) else 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        return records_from_container(unit, FORMAT, opts)

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        value = record.value()
        history = value.get("history") if isinstance(value, dict) else None
        if not isinstance(history, list) or not all(isinstance(m, dict) for m in history):
            raise InvalidRecord("missing_field", "expected an object with a 'history' list of messages", record.locator)
        if not any(isinstance(m.get("role"), str) and (m["role"] == SURFER or m["role"].startswith("Orchestrator"))
                   for m in history):
            raise InvalidRecord("wrong_format", "the history has no Orchestrator or WebSurfer message", record.locator)
        turns, replies = _turns(history)
        if not turns:
            raise InvalidRecord("no_turns", "the WebSurfer took no browser action in this run", record.locator)
        meta: dict[str, Any] = {
            "agent": "magentic-one",
            "surfer_replies": replies or None,
            "final_answer": _final_answer(history),
        }
        meta.update({k: value[k] for k in _DATASET_KEYS if k in value})
        question_id = value.get("question_ID")
        yield make_trajectory(
            record,
            domain=opts.get("domain") or self.default_domain,
            native_key=f"{record.uri}:{record.locator}",
            turns=turns,
            system=SystemPrompt(task_description=_task_description(value, history)),
            source_kind=opts.get("source_kind") or "public",
            split_key=str(question_id) if question_id not in (None, "") else None,
            meta={k: v for k, v in meta.items() if v is not None},
        )


def _turns(history: list[dict]) -> tuple[list[Turn], int]:
    turns: list[Turn] = []
    replies = 0
    instruction = None
    for index, message in enumerate(history):
        role = message.get("role")
        text = text_of(message.get("content")).strip()
        if role == f"Orchestrator (-> {SURFER})":
            instruction = text
            continue
        if role != SURFER:
            continue
        page_at = text.find(PAGE_MARKER)
        if page_at < 0:
            replies += 1  # the WebSurfer answering in words, no browser action
            continue
        parsed = _parse_action(text[:page_at].strip())
        action, words = parsed if parsed else ({"name": "answer_question", "arguments": {}}, "")
        reasoning = "\n\n".join(part for part in (instruction, words) if part)
        observation, log_chars = _without_harness_log(text[page_at:] if parsed else text)
        meta = {"history_index": index, "harness_log_chars": log_chars or None}
        turns.append(
            Turn(
                action=canonical_json(action),
                observation=observation,
                reasoning=reasoning or None,
                meta=json.dumps({k: v for k, v in meta.items() if v is not None}),
            )
        )
        instruction = None
    return turns, replies


def _parse_action(prefix: str) -> tuple[dict[str, Any], str] | None:
    """The tool call a step's action sentence describes and the surfer's words before it, or None."""
    paragraphs = [p.strip() for p in prefix.split("\n\n") if p.strip()]
    # The action sentence comes last; words the model said with its tool call come before it.
    for i in range(len(paragraphs) - 1, -1, -1):
        for name, pattern in _ACTION_SENTENCES:
            match = pattern.fullmatch(paragraphs[i])
            if match:
                arguments = {k: v for k, v in match.groupdict().items() if v is not None}
                return {"name": name, "arguments": arguments}, "\n\n".join(paragraphs[:i])
    return None  # answer_question / summarize_page put their result where the sentence would be


def _without_harness_log(observation: str) -> tuple[str, int]:
    """Cut the run script's own log (traceback, final answer) that the dataset appended to the last page."""
    if HARNESS_END not in observation:
        return observation, 0
    start = _HARNESS_LOG.search(observation)
    cut = start.start() if start else observation.index(HARNESS_END)
    return observation[:cut].rstrip("\n"), len(observation) - cut


def _task_description(value: dict, history: list[dict]) -> str:
    if isinstance(value.get("question"), str) and value["question"].strip():
        return value["question"].strip()
    return next((text_of(m.get("content")).strip() for m in history if m.get("role") == "human"), "")


def _final_answer(history: list[dict]) -> str | None:
    for message in reversed(history):
        match = _FINAL_ANSWER.search(text_of(message.get("content")))
        if match:
            return match.group(1).strip()
    return None


ADAPTER = MagenticOneAdapter()
