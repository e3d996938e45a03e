"""``openhands``: OpenHands (formerly OpenDevin) event streams.

A run is a list of events; an event is either an action or an observation, and an observation
names the action that caused it. Stored as a JSON list (one run per file) or as evaluation
output, JSONL lines ``{"instance_id", "instruction", "history": [events], ...}``. Native record
(an action and its observation, abridged)::

    {"id": 5, "source": "agent", "action": "run", "args": {"command": "ls", "thought": "..."}, "tool_call_metadata": {...}}
    {"id": 6, "source": "agent", "observation": "run", "cause": 5, "content": "a.py", "extras": {"metadata": {...}}}

Mapping to the unified schema (domain ``swe``):

- One turn per agent action that an observation answers (``observation.cause == action.id``).
  The action is canonical tool-call JSON ``{"name": "execute_bash", "arguments": {"command": "ls"}}``
  taken from the model's own tool call in ``tool_call_metadata``; without it, the action type
  and its arguments (agent-side keys such as ``thought`` removed) stand in:
  ``{"name": "run", "arguments": {"command": "ls"}}``. ``tool_call_metadata`` (function name,
  tool-call id, model response id and model; not the whole response) goes to ``turn.meta``
  with the event ids, and ``args.thought`` is ``turn.reasoning``.
- The observation is the text the agent was shown: ``metadata.prefix + content +
  metadata.suffix`` for command outputs (``[The command completed with exit code 0.]``), else
  ``content``; escape codes removed, ``\\r`` overwrites collapsed.
- An environment action with no observation (the run was cut off, or the log lost it) is
  dropped and counted in ``meta.unanswered_actions``: an empty observation would teach that the
  command printed nothing. Agent-side actions (``message``, ``finish``, ``system``, ``think``,
  ``recall``, ...) are not environment steps and never turns; the final ``finish`` message goes
  to ``meta``. Observations caused by no agent action (state changes) are counted, not turns.
- ``system.task_description``: the first user message (or the JSONL line's ``instruction``);
  ``system.action_space``: the tool list of the ``system`` event when present, else empty (older
  streams do not record the declared tools). ``split_key``: ``instance_id`` when present.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import SystemPrompt, Trajectory, Turn
from stages.ingest.common import canonical_json, make_trajectory, records_from_container, text_of
from stages.ingest.reading import DEFAULT_MAX_RECORD_BYTES, InputUnit, container_of, read_document
from stages.ingest.registry import Probe, RawRecord
from stages.ingest.terminal_text import clean_tool_output

FORMAT = "openhands"
AGENT_SIDE_ACTIONS = frozenset(
    {"message", "finish", "system", "think", "recall", "reject", "change_agent_state", "condensation", "delegate"}
)
# Bookkeeping keys OpenHands stores beside an action's real arguments.
_AGENT_SIDE_ARGS = frozenset(
    {
        "thought",
        "impl_source",
        "translated_ipython_code",
        "confirmation_state",
        "security_risk",
        "hidden",
        "blocking",
        "is_input",
        "wait_for_response",
        "image_urls",
        "include_extra",
    }
)


def _is_event(value: Any) -> bool:
    return isinstance(value, dict) and "source" in value and ("action" in value or "observation" in value)


class OpenHandsAdapter:
    name = FORMAT
    description = "OpenHands event streams (JSON event lists, or evaluation JSONL with a 'history' of events)"
    domains = ("swe",)
    default_domain = "swe"
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        if _is_event(rec) and "id" in rec:
            return 0.95
        if (
            isinstance(rec, dict)
            and isinstance(rec.get("history"), list)
            and rec["history"]
            and _is_event(rec["history"][0])
        ):
            return 0.9
        return 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        if container_of(unit.uri) == "jsonl":
            yield from records_from_container(unit, FORMAT, opts)  # evaluation output: one run per line
            return
        data = read_document(unit.uri, int(opts.get("max_record_bytes") or DEFAULT_MAX_RECORD_BYTES))
        if isinstance(data, InvalidRecord):
            yield data
            return
        try:
            value = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            yield InvalidRecord("malformed_json", str(exc), "document", unit.uri)
            return
        # A JSON list is the event stream of one run, not a list of records.
        yield RawRecord(unit.uri, "document", FORMAT, json.dumps(value, ensure_ascii=False))

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        value = record.value()
        run = value if isinstance(value, dict) else {"history": value}
        events = run.get("history")
        if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
            raise InvalidRecord(
                "missing_field", "expected a list of events (or an object with 'history')", record.locator
            )
        turns, counts = _turns(events)
        if not turns:
            raise InvalidRecord("no_turns", "no agent action in the stream has an observation", record.locator)
        meta: dict[str, Any] = {"agent": "openhands", **{k: v for k, v in counts.items() if v}}
        meta.update(_run_meta(events, run))
        instance_id = run.get("instance_id")
        yield make_trajectory(
            record,
            domain=opts.get("domain") or self.default_domain,
            native_key=f"{record.uri}:{record.locator}",
            turns=turns,
            system=SystemPrompt(task_description=_task_description(events, run), action_space=_action_space(events)),
            source_kind=opts.get("source_kind") or "public",
            split_key=str(instance_id) if instance_id not in (None, "") else None,
            meta=meta,
        )


def _event_id(value: Any) -> int | str | None:
    return value if isinstance(value, int | str) else None


def _is_environment_action(event: dict) -> bool:
    kind = event.get("action")
    return event.get("source") == "agent" and isinstance(kind, str) and kind not in AGENT_SIDE_ACTIONS


def _turns(events: list[dict]) -> tuple[list[Turn], dict[str, Any]]:
    observation_of: dict[Any, dict] = {}
    stray = 0
    action_ids = {_event_id(e.get("id")) for e in events if "action" in e and e.get("source") == "agent"} - {None}
    for event in events:
        if "observation" in event:
            cause = _event_id(event.get("cause"))
            if cause in action_ids and cause not in observation_of:
                observation_of[cause] = event
            else:
                stray += 1
    turns = []
    unanswered = []
    for event in events:
        if not _is_environment_action(event):
            continue
        observation = observation_of.get(_event_id(event.get("id")))
        if observation is None:
            unanswered.append(event.get("id"))
            continue
        turns.append(_turn(event, observation))
    return turns, {"unanswered_actions": unanswered, "unpaired_observations": stray}


def _turn(action: dict, observation: dict) -> Turn:
    args = action.get("args") if isinstance(action.get("args"), dict) else {}
    metadata = action.get("tool_call_metadata") if isinstance(action.get("tool_call_metadata"), dict) else {}
    thought = args.get("thought") if isinstance(args.get("thought"), str) else ""
    response = metadata.get("model_response") if isinstance(metadata.get("model_response"), dict) else {}
    meta = {
        "action_id": action.get("id"),
        "observation_id": observation.get("id"),
        "action_type": action.get("action"),
        "observation_type": observation.get("observation"),
        "function_name": metadata.get("function_name"),
        "tool_call_id": metadata.get("tool_call_id"),
        "model_response_id": response.get("id"),
        "model": response.get("model"),
        "exit_code": _command_metadata(observation).get("exit_code"),
    }
    return Turn(
        action=canonical_json(_canonical_action(action, args, metadata, response)),
        observation=clean_tool_output(_observation_text(observation)),
        reasoning=thought.strip() or None,
        meta=json.dumps({k: v for k, v in meta.items() if v is not None}, ensure_ascii=False),
    )


def _canonical_action(action: dict, args: dict, metadata: dict, response: dict) -> dict[str, Any]:
    call = _tool_call(response, metadata.get("tool_call_id"))
    if call is not None:
        arguments = call.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                arguments = {"raw": arguments}  # what the model sent, even when it is not JSON
        return {"name": call.get("name") or metadata.get("function_name") or "", "arguments": arguments}
    name = metadata.get("function_name") or action.get("action") or ""
    return {"name": name, "arguments": {k: v for k, v in args.items() if k not in _AGENT_SIDE_ARGS}}


def _tool_call(response: dict, call_id: Any) -> dict | None:
    choices = response.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict) and call.get("id") == call_id and isinstance(call.get("function"), dict):
                return call["function"]
    return None


def _command_metadata(observation: dict) -> dict:
    extras = observation.get("extras") if isinstance(observation.get("extras"), dict) else {}
    metadata = extras.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _observation_text(observation: dict) -> str:
    content = text_of(observation.get("content"))
    metadata = _command_metadata(observation)
    prefix, suffix = metadata.get("prefix"), metadata.get("suffix")
    return f"{prefix if isinstance(prefix, str) else ''}{content}{suffix if isinstance(suffix, str) else ''}"


def _task_description(events: list[dict], run: dict) -> str:
    if isinstance(run.get("instruction"), str) and run["instruction"].strip():
        return run["instruction"].strip()
    for event in events:
        if event.get("source") == "user" and event.get("action") == "message":
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            return text_of(args.get("content") or event.get("message")).strip()
    return ""


def _action_space(events: list[dict]) -> str:
    for event in events:
        if event.get("action") == "system" and isinstance(event.get("args"), dict) and event["args"].get("tools"):
            return canonical_json(event["args"]["tools"])
    return ""


def _run_meta(events: list[dict], run: dict) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for event in events:
        if event.get("action") == "finish" and event.get("source") == "agent":
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            meta["final_message"] = args.get("final_thought") or args.get("thought") or event.get("message")
    timestamps = [e["timestamp"] for e in events if isinstance(e.get("timestamp"), str)]
    if timestamps:
        meta["started"], meta["ended"] = timestamps[0], timestamps[-1]
    for key in ("instance_id", "test_result", "metadata"):
        if run.get(key) is not None:
            meta[key] = run[key]
    return meta


ADAPTER = OpenHandsAdapter()
