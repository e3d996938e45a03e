"""``openai-messages``: OpenAI chat-completions conversations with tool calls.

Native record (one JSONL line, abridged)::

    {"messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": null, "tool_calls":
     [{"id": "c1", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}]},
     {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "18C, sunny"}]}], "tools": [...]}

Containers: JSONL of ``{messages, tools?}``; a JSON list of runs with a ``messages`` or ``traj`` field; a JSON
document that is itself one message list; CSV or Parquet with a messages column (JSON text or a list), e.g.
MCP-Atlas ``TASK, ENABLED_TOOLS, PROMPT, TRAJECTORY``. ``messages_path`` (``a.b.-1``) reaches a conversation
nested elsewhere in the record.

Mapping to the unified schema:

- each tool call is one turn: action = ``{"name": ..., "arguments": {...}}`` (arguments parsed from their JSON
  string when valid, else kept as the raw string); observation = the result's text (text parts joined);
  reasoning = the assistant text sent with the call (on the first of parallel calls only, not repeated);
- results pair with calls by ``tool_call_id`` (a result without an id takes the oldest unanswered call); the
  legacy ``function_call`` / ``role=function`` dialect pairs in order by function name. A result whose call is
  unknown is quarantined as ``orphan_tool_result``, unless ``orphans=skip`` drops it and counts it in
  ``meta.orphan_tool_results``. A call that never got a result (a run cut short) cannot be a turn: it is
  counted in ``meta.unanswered_tool_calls``;
- typed-part content (LLaMA-Factory's tool-use sets): ``content`` is a list of ``{"type": "text" | "reasoning" |
  "tool_call", "value": ...}``; text parts are the content, reasoning parts the reasoning, and each tool_call
  part (a JSON string ``{"name", "arguments"}``) one call; ``tools`` may be a JSON string. A tool reply
  without an id that answers several pending calls at once and holds a JSON list of exactly that many results
  is split in order, one result per call (a result ``{"name", "content"}`` gives its ``content``);
- task_description = the prompt field/column (``PROMPT``/``prompt``) when present, else the first user
  message; later user messages are kept in ``meta.user_messages``;
- the system message instructs the agent, not the environment, so it is kept in ``meta.system_prompt`` and
  never becomes the world model's simulation instruction;
- action_space = the declared tools (``tools``, or the tools column, where MCP-Atlas lists tool names) as
  canonical JSON, empty when none is declared;
- assistant text without a tool call is not a turn; the last such text is ``meta.final_answer``;
- split_key = the task id (``TASK``/``task_id``/``instance_id``, or ``task_column``), else traj_id; traj_id
  comes from the native id (``id``/``traj_id``/``session_id``, or ``id_column``), else file + locator.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import DOMAINS, SystemPrompt, Trajectory, Turn
from stages.ingest.common import (
    canonical_json,
    load_document,
    make_trajectory,
    records_from_container,
    strip_ansi,
    text_of,
)
from stages.ingest.openai_options import OPENAI_OPTIONS, check_openai_options
from stages.ingest.reading import InputUnit, container_kind, loads
from stages.ingest.registry import Probe, RawRecord
from stages.ingest.tool_calls import (
    ToolCallPairing,
    action_space_of,
    decoded_field,
    orphans_policy,
    parse_arguments,
)

FORMAT = "openai-messages"
MESSAGE_FIELDS = ("messages", "traj", "TRAJECTORY", "trajectory")
TOOLS_FIELDS = ("tools", "ENABLED_TOOLS")
PROMPT_FIELDS = ("PROMPT", "prompt")
TASK_FIELDS = ("TASK", "task_id", "instance_id")
ID_FIELDS = ("id", "traj_id", "session_id", "ID")
# Unused scalar fields of a record are kept in meta up to this size (MCP-Atlas GTFA_CLAIMS fits); larger ones
# are only named, so a huge column cannot bloat every trajectory.
MAX_META_FIELD_CHARS = 16384
_SYSTEM_ROLES = ("system", "developer")


# ---------------------------------------------------------------- locating the conversation in a record


def resolve_path(value: Any, path: str, locator: str) -> Any:
    """The value at a dotted path with list indices (``answer_generation.train_messages.-1``)."""
    current = value
    for part in path.split("."):
        if isinstance(current, list):
            try:
                current = current[int(part)]
            except (ValueError, IndexError):
                raise InvalidRecord(
                    "missing_field", f"messages_path {path!r}: no list item {part!r}", locator
                ) from None
        elif isinstance(current, dict) and part in current:
            current = current[part]
        else:
            raise InvalidRecord("missing_field", f"messages_path {path!r}: no field {part!r}", locator)
    return current


def is_chat(value: Any) -> bool:
    """Whether a value is a non-empty list of chat messages (objects with a ``role``)."""
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value[:8])


def uses_tools(messages: list) -> bool:
    """Whether a message list holds a tool call or a tool result."""
    return any(m.get("tool_calls") or m.get("function_call") or m.get("role") in ("tool", "function") for m in messages)


def find_chat_path(value: Any, wanted: Callable[[Any], bool] = is_chat, depth: int = 4, prefix: str = "") -> str | None:
    """Dotted path of the first nested value that is `wanted` (a chat list by default), or None.

    The search is bounded: four levels deep, and the first eight items of each list.
    """
    if depth < 0:
        return None
    if prefix and wanted(value):
        return prefix
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = [(str(i), v) for i, v in enumerate(value[:8])]
    else:
        return None
    for key, child in items:
        if isinstance(child, dict | list):
            found = find_chat_path(child, wanted, depth - 1, f"{prefix}.{key}" if prefix else key)
            if found:
                return found
    return None


def _pick(record: dict, option: str | None, candidates: tuple[str, ...]) -> tuple[str | None, Any]:
    if option:
        return option, record.get(option)
    for key in candidates:
        if record.get(key) not in (None, ""):
            return key, record[key]
    return None, None


def locate_messages(value: Any, opts: dict[str, Any], locator: str) -> tuple[list, dict, str | None]:
    """The message list of a record, the record's fields (``{}`` for a bare list) and the field it came from."""
    fields = value if isinstance(value, dict) else {}
    if opts.get("messages_path"):
        messages, used = resolve_path(value, opts["messages_path"], locator), None
    elif isinstance(value, list):
        messages, used = value, None
    elif isinstance(value, dict):
        used, messages = _pick(value, opts.get("messages_column"), MESSAGE_FIELDS)
        if used is None or messages is None:
            hint = find_chat_path(value)
            where = f"; a chat list was found at {hint!r}: set messages_path" if hint else ""
            wanted = opts.get("messages_column") or ", ".join(MESSAGE_FIELDS)
            raise InvalidRecord("missing_field", f"no messages field ({wanted}){where}", locator)
        messages = decoded_field(messages, used, locator)
        if isinstance(messages, dict) and isinstance(messages.get("messages"), list):
            messages = messages["messages"]
    else:
        raise InvalidRecord(
            "wrong_type", f"a record must be an object or a message list, not {type(value).__name__}", locator
        )
    if not isinstance(messages, list):
        raise InvalidRecord("wrong_type", f"messages must be a list, not {type(messages).__name__}", locator)
    return messages, fields, used


# ---------------------------------------------------------------- walking the messages


@dataclass
class Conversation:
    """What a message list holds besides its turns."""

    turns: list[Turn]
    first_user: str | None = None
    user_messages: list[str] = field(default_factory=list)
    system_prompt: str | None = None
    final_answer: str | None = None
    orphans: int = 0
    unanswered: int = 0


def _reasoning(message: dict) -> str | None:
    parts = [text_of(message.get(k)).strip() for k in ("reasoning_content", "content")]
    text = "\n\n".join(p for p in parts if p)
    return text or None


def _add_calls(pairing: ToolCallPairing, message: dict, where: str, locator: str) -> bool:
    """Register the message's tool calls (modern or legacy); False when it has none."""
    calls = message.get("tool_calls")
    legacy = message.get("function_call")
    if not calls and not legacy:
        return False
    reasoning = _reasoning(message)
    if legacy:
        calls = [{"function": legacy}]
    if not isinstance(calls, list):
        raise InvalidRecord("malformed_tool_call", f"{where}: tool_calls must be a list", locator)
    for call in calls:
        fn = call.get("function", call) if isinstance(call, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidRecord("malformed_tool_call", f"{where}: a tool call has no function name", locator)
        call_id = None if legacy else call.get("id")
        pairing.call(name, fn.get("arguments"), call_id if isinstance(call_id, str) else None, reasoning)
        reasoning = None  # parallel calls share one text: it belongs to the first
    return True


TYPED_PART_TYPES = frozenset({"text", "reasoning", "tool_call"})


def is_typed_content(content: Any) -> bool:
    """Whether a content is a list of typed parts ``{"type": ..., "value": ...}`` (not OpenAI ``text`` parts)."""
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(p, dict) and "value" in p and isinstance(p.get("type"), str) and p["type"] in TYPED_PART_TYPES
                for p in content)
    )


def untyped_message(msg: dict, where: str, locator: str) -> dict:
    """A message with typed-part content rewritten as content text, reasoning and ``tool_calls``."""
    if not is_typed_content(msg.get("content")):
        return msg
    texts, reasoning, calls = [], [], []
    for part in msg["content"]:
        value = part["value"]
        if part["type"] == "tool_call":
            call = parse_arguments(value)
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise InvalidRecord(
                    "malformed_tool_call", f"{where}: a tool_call part is not a JSON object with a name", locator
                )
            calls.append({"function": {"name": call["name"], "arguments": call.get("arguments")}})
        elif isinstance(value, str):
            (reasoning if part["type"] == "reasoning" else texts).append(value)
    out = {k: v for k, v in msg.items() if k != "content"}
    out["content"] = "\n".join(texts)
    if reasoning:
        out["reasoning_content"] = "\n".join(reasoning)
    if calls:
        out["tool_calls"] = calls
    return out


def _split_results(observation: str, pending: list[str]) -> list[str] | None:
    """One reply for several calls: its JSON list of results, one per pending call in order, else None. A reply for
    one call is unwrapped only where its one result names that call (``[{"name": ..., "content": ...}]``, as
    LLaMA-Factory writes replies for one call and for several alike): a tool may well return a list."""
    if not pending or not observation.lstrip().startswith("["):
        return None
    try:
        results = loads(observation)
    except json.JSONDecodeError:
        return None
    if not isinstance(results, list) or len(results) != len(pending):
        return None
    if len(pending) == 1 and not (isinstance(results[0], dict) and results[0].keys() == {"name", "content"}
                                  and results[0]["name"] == pending[0]):
        return None
    out = []
    for result, name in zip(results, pending):
        if isinstance(result, dict) and "content" in result:
            if result.get("name") not in (None, name):
                return None
            content = result["content"]
            out.append(content if isinstance(content, str) else canonical_json(content))
        else:
            out.append(result if isinstance(result, str) else canonical_json(result))
    return out


def walk_messages(messages: list, locator: str, orphans: str = "quarantine") -> Conversation:
    """Pair tool calls with their results and collect the task, system prompt and final answer."""
    pairing = ToolCallPairing()
    conv = Conversation(turns=[])
    systems: list[str] = []
    for i, msg in enumerate(messages):
        where = f"message {i}"
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise InvalidRecord("malformed_message", f"{where}: expected an object with a role", locator)
        msg = untyped_message(msg, where, locator)
        role = msg["role"]
        if role in _SYSTEM_ROLES:
            systems.append(text_of(msg.get("content")))
        elif role == "user":
            text = text_of(msg.get("content"))
            if conv.first_user is None:
                conv.first_user = text
            else:
                conv.user_messages.append(text)
        elif role == "assistant":
            if not _add_calls(pairing, msg, where, locator) and text_of(msg.get("content")).strip():
                conv.final_answer = text_of(msg.get("content"))
        elif role in ("tool", "function"):
            observation = strip_ansi(text_of(msg.get("content")))
            call_id, name = msg.get("tool_call_id"), msg.get("name")
            split = None if isinstance(call_id, str) or role != "tool" else _split_results(observation, pairing.pending())
            if split is not None:
                paired = all(pairing.answer_next(part) for part in split)
            elif role == "tool" and isinstance(call_id, str):
                paired = pairing.answer_by_id(call_id, observation)
            else:  # by position; by name where the result names a pending call (parallel calls answered out of order)
                named = role == "function" or (isinstance(name, str) and name in pairing.pending())
                paired = pairing.answer_next(observation, name if named else None)
            if not paired:
                if orphans == "skip":
                    conv.orphans += 1
                    continue
                ref = f"call id {call_id!r}" if call_id else f"function {name!r}" if name else "no call id"
                raise InvalidRecord(
                    "orphan_tool_result", f"{where}: a {role} result ({ref}) has no matching call", locator
                )
        else:
            raise InvalidRecord("malformed_message", f"{where}: unknown role {role!r}", locator)
    conv.turns = pairing.turns()
    conv.unanswered = pairing.unanswered()
    conv.system_prompt = "\n\n".join(s for s in systems if s) or None
    return conv


def _scalar_fields(fields: dict, used: set[str]) -> tuple[dict, list[str]]:
    kept, omitted = {}, []
    for key, value in fields.items():
        if key in used or not isinstance(value, str | int | float | bool):
            continue
        if isinstance(value, str) and len(value) > MAX_META_FIELD_CHARS:
            omitted.append(key)
        else:
            kept[key] = value
    return kept, omitted


def _as_id(value: Any) -> str | None:
    return str(value) if isinstance(value, str | int) and str(value) else None


# ---------------------------------------------------------------- the adapter


class OpenAIMessagesAdapter:
    name = FORMAT
    description = "OpenAI chat messages with tool_calls / role=tool results (JSONL, JSON, CSV, Parquet)"
    domains = DOMAINS
    default_domain = "mcp"
    line_records = True  # a .jsonl file may be read as byte ranges of whole lines
    options = OPENAI_OPTIONS
    check_options = staticmethod(check_openai_options)

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        if not isinstance(rec, dict):
            return 0.0
        if probe.container in ("csv", "parquet"):
            for key in MESSAGE_FIELDS:
                cell = rec.get(key)
                if isinstance(cell, str) and '"role"' in cell[:4096]:
                    return 0.9
                if is_chat(cell):
                    return 0.9
            return 0.0
        messages = next((rec[k] for k in ("messages", "traj") if k in rec), None)
        if is_chat(messages):
            # A declared tool list marks the tool-calling dialect; a bare chat list is generic, so framework
            # adapters that recognise their own markers in it must win.
            return 0.9 if isinstance(rec.get("tools"), list) else 0.7
        if "role" in rec and ("content" in rec or "tool_calls" in rec):
            return 0.6  # the first message of a JSON document that is one conversation
        # A nested chat is only claimed when it calls tools: other logs nest plain {role, content} lists too.
        return 0.55 if find_chat_path(rec, lambda v: is_chat(v) and uses_tools(v)) else 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        if container_kind(unit.uri) == "json":
            return self._read_json(unit, opts)
        return records_from_container(unit, self.name, opts)

    def _read_json(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        # A JSON list is either runs (one record each) or one conversation; the generic reader cannot tell.
        value = load_document(unit, opts)
        if isinstance(value, InvalidRecord):
            yield value
            return
        if isinstance(value, list) and not is_chat(value):
            for i, item in enumerate(value):
                yield RawRecord(unit.uri, f"item {i}", self.name, json.dumps(item, ensure_ascii=False))
        else:
            yield RawRecord(unit.uri, "document", self.name, json.dumps(value, ensure_ascii=False))

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        yield normalize_openai_messages(record, opts)


def normalize_openai_messages(record: RawRecord, opts: dict[str, Any]) -> Trajectory:
    """One record (conversation + its fields) → one trajectory; raises `InvalidRecord`."""
    loc = record.locator
    messages, fields, messages_key = locate_messages(record.value(), opts, loc)
    conv = walk_messages(messages, loc, orphans_policy(opts))
    tools_key, tools = _pick(fields, opts.get("tools_column"), TOOLS_FIELDS)
    prompt_key, prompt = _pick(fields, opts.get("prompt_column"), PROMPT_FIELDS)
    task_key, task = _pick(fields, opts.get("task_column"), TASK_FIELDS)
    id_key, native = _pick(fields, opts.get("id_column"), ID_FIELDS)
    task_description = prompt if isinstance(prompt, str) else conv.first_user or ""
    user_messages = conv.user_messages
    if isinstance(prompt, str) and conv.first_user is not None:
        user_messages = [conv.first_user, *user_messages]
    kept, omitted = _scalar_fields(fields, {k for k in (messages_key, tools_key, prompt_key, task_key, id_key) if k})
    meta = {
        "system_prompt": conv.system_prompt,
        "final_answer": conv.final_answer,
        "user_messages": user_messages or None,
        "orphan_tool_results": conv.orphans or None,
        "unanswered_tool_calls": conv.unanswered or None,
        "messages_path": opts.get("messages_path"),
        "fields": kept or None,
        "omitted_fields": omitted or None,
    }
    native_id = _as_id(native)
    return make_trajectory(
        record,
        domain=opts.get("domain") or OpenAIMessagesAdapter.default_domain,
        native_key=native_id or f"{record.uri}:{loc}",
        turns=conv.turns,
        system=SystemPrompt(task_description=task_description, action_space=action_space_of(tools, loc)),
        source_kind=opts.get("source_kind") or "public",
        split_key=_as_id(task),
        meta={k: v for k, v in meta.items() if v is not None},
    )


ADAPTER = OpenAIMessagesAdapter()
