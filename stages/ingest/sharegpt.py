"""``sharegpt``: ShareGPT conversations with function calls (the LLaMA-Factory / Glaive dialect).

Native record (one JSON list item, abridged)::

    {"conversations": [{"from": "human", "value": "Weather in Paris?"}, {"from": "function_call", "value":
     "{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Paris\\"}}"}, {"from": "observation", "value": "18C"}]}

``from`` is one of ``system``, ``human``/``user``, ``gpt``/``assistant``, ``function_call``, ``observation``
(also ``tool``); the record may carry ``system`` (text) and ``tools`` (JSON text or a list). A
``function_call`` value is a JSON object ``{name, arguments}`` or a list of them (parallel calls).

Mapping to the unified schema:

- each called function is one turn: action = ``{"name": ..., "arguments": {...}}`` (arguments parsed from
  JSON text when valid, else kept as the raw string); observation = the next unanswered ``observation``,
  paired in order (the dialect has no call ids);
- reasoning = a ``gpt`` message directly followed by the ``function_call`` (first of parallel calls only);
  the last ``gpt`` message that is not followed by a call is ``meta.final_answer``;
- task_description = the first human message; later ones are kept in ``meta.user_messages``; the system
  text (field or message) instructs the agent, so it is kept in ``meta.system_prompt``;
- action_space = the ``tools`` field as canonical JSON ('' when absent);
- an observation with no call waiting is quarantined as ``orphan_tool_result`` unless ``orphans=skip``
  (counted in ``meta.orphan_tool_results``); a call without an observation is counted in
  ``meta.unanswered_tool_calls``;
- traj_id from ``id`` (else file + locator); split_key = ``task_id`` when present, else traj_id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import DOMAINS, SystemPrompt, Trajectory
from stages.ingest.common import make_trajectory, records_from_container, strip_ansi
from stages.ingest.reading import InputUnit, loads
from stages.ingest.registry import Probe, RawRecord
from stages.ingest.tool_calls import ToolCallPairing, action_space_of, orphans_policy

FORMAT = "sharegpt"
_USER = ("human", "user")
_ASSISTANT = ("gpt", "assistant", "bot")
_RESULT = ("observation", "tool")


def parse_function_call(value: Any, where: str, locator: str) -> list[tuple[str, Any]]:
    """``(name, arguments)`` of each call in a ``function_call`` value (one object or a list)."""
    if isinstance(value, str):
        try:
            value = loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidRecord(
                "malformed_tool_call", f"{where}: function_call is not JSON ({exc.msg})", locator
            ) from None
    calls = value if isinstance(value, list) else [value]
    out = []
    for call in calls:
        name = call.get("name") if isinstance(call, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidRecord("malformed_tool_call", f"{where}: a function call has no name", locator)
        out.append((name, call.get("arguments", call.get("parameters"))))
    return out


def normalize_sharegpt(record: RawRecord, opts: dict[str, Any]) -> Trajectory:
    """One ShareGPT conversation → one trajectory; raises `InvalidRecord`."""
    loc = record.locator
    value = record.value()
    if not isinstance(value, dict):
        raise InvalidRecord("wrong_type", f"a record must be an object, not {type(value).__name__}", loc)
    messages = value.get("conversations")
    if messages is None:
        raise InvalidRecord("missing_field", "no conversations field", loc)
    if not isinstance(messages, list):
        raise InvalidRecord("wrong_type", f"conversations must be a list, not {type(messages).__name__}", loc)
    orphans = orphans_policy(opts)
    pairing = ToolCallPairing()
    users: list[str] = []
    systems = [value["system"]] if isinstance(value.get("system"), str) and value["system"] else []
    pending_text: str | None = None  # the last gpt message, until we know whether a call follows it
    final_answer = None
    orphan_count = 0
    for i, msg in enumerate(messages):
        where = f"message {i}"
        if (
            not isinstance(msg, dict)
            or not isinstance(msg.get("from"), str)
            or not isinstance(msg.get("value"), str | list | dict)
        ):
            raise InvalidRecord("malformed_message", f"{where}: expected an object with 'from' and 'value'", loc)
        role, text = msg["from"], msg["value"]
        if role == "function_call":
            for k, (name, arguments) in enumerate(parse_function_call(text, where, loc)):
                pairing.call(name, arguments, reasoning=pending_text if k == 0 else None)
            pending_text = None
            continue
        if pending_text is not None:
            final_answer = pending_text
            pending_text = None
        if not isinstance(text, str):
            raise InvalidRecord("malformed_message", f"{where}: a {role} value must be text", loc)
        if role in _USER:
            users.append(text)
        elif role in _ASSISTANT:
            pending_text = text if text.strip() else None
        elif role in _RESULT:
            if not pairing.answer_next(strip_ansi(text)):
                if orphans == "skip":
                    orphan_count += 1
                    continue
                raise InvalidRecord("orphan_tool_result", f"{where}: an observation has no function call waiting", loc)
        elif role == "system":
            systems.append(text)
        else:
            raise InvalidRecord("malformed_message", f"{where}: unknown 'from' value {role!r}", loc)
    if pending_text is not None:
        final_answer = pending_text
    native = value.get("id")
    task = value.get("task_id")
    meta = {
        "system_prompt": "\n\n".join(systems) or None,
        "final_answer": final_answer,
        "user_messages": users[1:] or None,
        "orphan_tool_results": orphan_count or None,
        "unanswered_tool_calls": pairing.unanswered() or None,
    }
    return make_trajectory(
        record,
        domain=opts.get("domain") or ShareGPTAdapter.default_domain,
        native_key=str(native) if isinstance(native, str | int) else f"{record.uri}:{loc}",
        turns=pairing.turns(),
        system=SystemPrompt(
            task_description=users[0] if users else "", action_space=action_space_of(value.get("tools"), loc)
        ),
        source_kind=opts.get("source_kind") or "public",
        split_key=str(task) if isinstance(task, str | int) else None,
        meta={k: v for k, v in meta.items() if v is not None},
    )


class ShareGPTAdapter:
    name = FORMAT
    description = "ShareGPT conversations[{from, value}] with function_call / observation messages"
    domains = DOMAINS
    default_domain = "mcp"
    line_records = True  # a .jsonl file may be read as byte ranges of whole lines
    options = {"orphans": "quarantine (default) or skip: what to do with an observation whose call is missing"}
    check_options = staticmethod(orphans_policy)

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        conv = rec.get("conversations") if isinstance(rec, dict) else None
        if isinstance(conv, list) and conv and isinstance(conv[0], dict) and {"from", "value"} <= conv[0].keys():
            return 0.9
        return 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        return records_from_container(unit, self.name, opts)

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        yield normalize_sharegpt(record, opts)


ADAPTER = ShareGPTAdapter()
