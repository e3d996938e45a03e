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

Two more dialects are read the same way:

- **V1 SDK** event streams (OpenHands software-agent-sdk, evaluation ``output.jsonl`` of
  OpenHands/benchmarks): ``{"kind": "ActionEvent", "id", "action": {"kind": "ExecuteBashAction",
  "command", ...}, "tool_name", "tool_call_id", "tool_call": {"name", "arguments"}, "thought":
  [text parts], "llm_response_id"}`` answered by ``{"kind": "ObservationEvent", "action_id",
  "tool_call_id", "observation": {"kind": "ExecuteBashObservation", "output", "metadata": {"prefix",
  "suffix", "exit_code"}}}`` (or an ``AgentErrorEvent`` / ``UserRejectObservation`` naming the same
  call). Pairing is by ``action_id``, else by ``tool_call_id``. The action is the model's tool call
  (``tool_call.name`` + parsed ``arguments``); without it, ``tool_name`` and the action's fields
  (``kind`` removed). ``FinishAction`` / ``ThinkAction`` are agent-side, as above; the first user
  ``MessageEvent`` is the task when the row has no ``instruction``; a ``SystemPromptEvent``'s
  ``tools`` are the action space.
- **Flattened** streams of older OpenDevin/OpenHands resolver and evaluation outputs: events are
  the dataclass fields themselves (``{"action": "run", "command": "ls", "thought": ...}``,
  ``{"observation": "run", "content": "...", "command_id", "exit_code"}``), without ids, ``cause``,
  ``args`` or ``extras``, possibly stored as ``[action, observation]`` pairs. Without ids they are
  paired by position: each environment action takes the first observation after it and before the
  next action.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import SystemPrompt, Trajectory, Turn
from stages.ingest.common import canonical_json, make_trajectory, records_from_container, records_from_document, text_of
from stages.ingest.reading import InputUnit, container_kind, loads
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


V1_EVENT_KINDS = frozenset(
    {"ActionEvent", "ObservationEvent", "MessageEvent", "SystemPromptEvent", "AgentErrorEvent",
     "UserRejectObservation", "PauseEvent", "Condensation", "CondensationRequest", "ConversationStateUpdateEvent"}
)
V1_AGENT_SIDE_ACTIONS = frozenset({"FinishAction", "ThinkAction"})
V1_AGENT_SIDE_TOOLS = frozenset({"finish", "think"})
# V1 observation kinds that answer an action with an error text instead of an observation object.
_V1_ERROR_EVENTS = frozenset({"AgentErrorEvent", "UserRejectObservation"})


def _str(value: Any) -> str | None:
    """A string field, else None (damaged input may hold any JSON value where a name belongs)."""
    return value if isinstance(value, str) else None


def _is_event(value: Any) -> bool:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, dict) for v in value):
        return _is_event(value[0])  # an [action, observation] pair of an older history
    if not isinstance(value, dict):
        return False
    if _str(value.get("kind")) in V1_EVENT_KINDS:
        return True
    return ("source" in value or "id" in value or isinstance(value.get("action"), str)
            or isinstance(value.get("observation"), str)) and ("action" in value or "observation" in value)


class OpenHandsAdapter:
    name = FORMAT
    description = "OpenHands event streams (JSON event lists, or evaluation JSONL with a 'history' of events)"
    domains = ("swe",)
    default_domain = "swe"
    line_records = True  # a .jsonl file may be read as byte ranges of whole lines
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        if isinstance(rec, dict) and _str(rec.get("kind")) in V1_EVENT_KINDS:
            return 0.95
        if isinstance(rec, dict) and "source" in rec and "id" in rec and ("action" in rec or "observation" in rec):
            return 0.95
        if isinstance(rec, dict) and isinstance(rec.get("action"), str) and set(rec) & {"command", "content", "thought"}:
            return 0.6  # a flattened event (older OpenDevin dataclass fields)
        if (
            isinstance(rec, dict)
            and isinstance(rec.get("history"), list)
            and rec["history"]
            and _is_event(rec["history"][0])
        ):
            return 0.9
        return 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        if container_kind(unit.uri) == "jsonl":
            yield from records_from_container(unit, FORMAT, opts)  # evaluation output: one run per line
            return
        # A JSON list is the event stream of one run, not a list of records.
        yield from records_from_document(unit, FORMAT, opts)

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        value = record.value()
        run = value if isinstance(value, dict) else {"history": value}
        events = run.get("history")
        if isinstance(events, list):
            events = _flatten_pairs(events)
        if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
            raise InvalidRecord(
                "missing_field", "expected a list of events (or an object with 'history')", record.locator
            )
        if events and not any(_str(e.get("kind")) in V1_EVENT_KINDS or "observation" in e or ("action" in e and "role" not in e)
                              for e in events):  # a chat message with a `role` (SWE-agent's history) is no event
            raise InvalidRecord("wrong_format", "no event is an OpenHands action or observation ('action', "
                                "'observation' or a V1 'kind')", record.locator)
        if any(_str(e.get("kind")) in V1_EVENT_KINDS for e in events):
            turns, counts = _v1_turns(events)
        elif _has_ids(events):
            turns, counts = _turns(events)
        else:
            turns, counts = _positional_turns(events)
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
            system=SystemPrompt(
                task_description=_task_description(events, run), action_space=_action_space(events)
            ),
            source_kind=opts.get("source_kind") or "public",
            split_key=str(instance_id) if instance_id not in (None, "") else None,
            meta=meta,
        )


def _flatten_pairs(events: list) -> list:
    """Older histories store ``[action, observation]`` pairs; the stream is their concatenation."""
    if events and all(isinstance(e, list) for e in events):
        return [x for pair in events for x in pair]
    return events


def _has_ids(events: list[dict]) -> bool:
    """Whether observations name their action (``cause``), so pairing by id is possible."""
    return any("observation" in e and e.get("cause") is not None for e in events)


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


def _positional_turns(events: list[dict]) -> tuple[list[Turn], dict[str, Any]]:
    """Flattened streams without ids: an action takes the next observation before the next action."""
    turns: list[Turn] = []
    unanswered = 0
    stray = 0
    pending: dict | None = None
    for event in events:
        if isinstance(event.get("action"), str):
            if pending is not None:
                unanswered += 1
            pending = event if event.get("source", "agent") == "agent" and event["action"] not in AGENT_SIDE_ACTIONS \
                else None
        elif "observation" in event:
            if pending is None:
                stray += 1
                continue
            turns.append(_turn(_as_nested(pending), _as_nested(event)))
            pending = None
    if pending is not None:
        unanswered += 1
    return turns, {"unanswered_actions": unanswered, "unpaired_observations": stray}


# Fields of a flattened event that are bookkeeping, not arguments or output.
_FLAT_EVENT_KEYS = frozenset({"action", "observation", "source", "id", "timestamp", "message", "cause", "content"})


def _as_nested(event: dict) -> dict:
    """A flattened event in the nested shape (``args`` / ``extras``) the id-paired streams use."""
    if "args" in event or "extras" in event:
        return event
    out = {k: event[k] for k in ("action", "observation", "source", "id", "content", "message") if k in event}
    rest = {k: v for k, v in event.items() if k not in _FLAT_EVENT_KEYS}
    if "action" in event:
        if "content" in event and event["action"] != "message":
            rest["content"] = event["content"]  # what a write action writes
        out["args"] = rest
    else:
        out["extras"] = rest
    return out


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
                arguments = loads(arguments) if arguments.strip() else {}
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
    if isinstance(metadata, dict):
        return metadata
    if "exit_code" in extras:  # flattened streams keep the exit code beside the content
        return {"exit_code": extras["exit_code"]}
    return {}


def _observation_text(observation: dict) -> str:
    content = text_of(observation.get("content"))
    metadata = _command_metadata(observation)
    prefix, suffix = metadata.get("prefix"), metadata.get("suffix")
    return f"{prefix if isinstance(prefix, str) else ''}{content}{suffix if isinstance(suffix, str) else ''}"


def _v1_turns(events: list[dict]) -> tuple[list[Turn], dict[str, Any]]:
    """V1 SDK streams: ``ObservationEvent.action_id`` (else ``tool_call_id``) names its ``ActionEvent``."""
    by_action: dict[str, dict] = {}
    by_call: dict[str, dict] = {}
    stray = 0
    for event in events:
        if _str(event.get("kind")) == "ObservationEvent" or _str(event.get("kind")) in _V1_ERROR_EVENTS:
            key = event.get("action_id")
            call = event.get("tool_call_id")
            if isinstance(key, str) and key not in by_action:
                by_action[key] = event
            elif isinstance(call, str) and call not in by_call:
                by_call[call] = event
            else:
                stray += 1
    turns: list[Turn] = []
    unanswered = []
    for event in events:
        if event.get("kind") != "ActionEvent" or not isinstance(event.get("action"), dict):
            continue
        eid = event.get("id") if isinstance(event.get("id"), str) else None
        cid = event.get("tool_call_id") if isinstance(event.get("tool_call_id"), str) else None
        agent_side = _str(event["action"].get("kind")) in V1_AGENT_SIDE_ACTIONS
        if agent_side or _str(event.get("tool_name")) in V1_AGENT_SIDE_TOOLS:
            by_action.pop(eid, None)
            continue
        observation = by_action.pop(eid, None) or by_call.pop(cid, None)
        if observation is None:
            unanswered.append(event.get("id"))
            continue
        turns.append(_v1_turn(event, observation))
    stray += len(by_action) + len(by_call)
    return turns, {"unanswered_actions": unanswered, "unpaired_observations": stray}


def _v1_turn(action: dict, observation: dict) -> Turn:
    body = action["action"]
    call = action.get("tool_call") if isinstance(action.get("tool_call"), dict) else {}
    if call.get("name"):
        arguments = call.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                arguments = {"raw": arguments}
        canonical = {"name": call["name"], "arguments": arguments}
    else:
        args = {k: v for k, v in body.items() if k != "kind" and k not in _AGENT_SIDE_ARGS}
        canonical = {"name": action.get("tool_name") or body.get("kind") or "", "arguments": args}
    obs = observation.get("observation") if isinstance(observation.get("observation"), dict) else {}
    metadata = obs.get("metadata") if isinstance(obs.get("metadata"), dict) else {}
    exit_code = metadata.get("exit_code", obs.get("exit_code"))
    thought = text_of(action.get("thought")) if action.get("thought") else ""
    reasoning = "\n".join(x for x in (action.get("reasoning_content") or "", thought) if isinstance(x, str) and x.strip())
    meta = {
        "action_id": action.get("id"),
        "observation_id": observation.get("id"),
        "action_type": body.get("kind"),
        "observation_type": obs.get("kind") or observation.get("kind"),
        "function_name": action.get("tool_name"),
        "tool_call_id": action.get("tool_call_id"),
        "model_response_id": action.get("llm_response_id"),
        "exit_code": exit_code,
    }
    return Turn(
        action=canonical_json(canonical),
        observation=clean_tool_output(_v1_observation_text(observation, obs, metadata)),
        reasoning=reasoning.strip() or None,
        meta=json.dumps({k: v for k, v in meta.items() if v is not None}, ensure_ascii=False),
    )


def _v1_observation_text(event: dict, obs: dict, metadata: dict) -> str:
    if _str(event.get("kind")) in _V1_ERROR_EVENTS:
        return text_of(event.get("error") or event.get("rejection_reason") or event.get("content"))
    if "output" in obs:
        body = text_of(obs.get("output"))
    elif "content" in obs:
        body = text_of(obs.get("content"))
    else:
        body = text_of(obs.get("message") or obs.get("text") or obs.get("error") or "")
    prefix, suffix = metadata.get("prefix"), metadata.get("suffix")
    return f"{prefix if isinstance(prefix, str) else ''}{body}{suffix if isinstance(suffix, str) else ''}"


def _task_description(events: list[dict], run: dict) -> str:
    if isinstance(run.get("instruction"), str) and run["instruction"].strip():
        return run["instruction"].strip()
    for event in events:
        if event.get("action") == "message" and event.get("source", "user") == "user":
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            return text_of(args.get("content") or event.get("message") or event.get("content")).strip()
        if event.get("kind") == "MessageEvent" and event.get("source") == "user":
            message = event.get("llm_message") if isinstance(event.get("llm_message"), dict) else {}
            return text_of(message.get("content")).strip()
    return ""


def _action_space(events: list[dict]) -> str:
    for event in events:
        if event.get("action") == "system" and isinstance(event.get("args"), dict) and event["args"].get("tools"):
            return canonical_json(event["args"]["tools"])
        if event.get("kind") == "SystemPromptEvent" and event.get("tools"):
            return canonical_json(event["tools"])
    return ""


def _run_meta(events: list[dict], run: dict) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for event in events:
        if event.get("action") == "finish" and event.get("source", "agent") == "agent":
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            meta["final_message"] = args.get("final_thought") or args.get("thought") or event.get("message")
        body = event.get("action")
        if event.get("kind") == "ActionEvent" and isinstance(body, dict) and body.get("kind") == "FinishAction":
            meta["final_message"] = body.get("message")
    timestamps = [e["timestamp"] for e in events if isinstance(e.get("timestamp"), str)]
    if timestamps:
        meta["started"], meta["ended"] = timestamps[0], timestamps[-1]
    for key in ("instance_id", "test_result", "metadata"):
        if run.get(key) is not None:
            meta[key] = run[key]
    return meta


ADAPTER = OpenHandsAdapter()
