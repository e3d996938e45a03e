"""Tool calls paired with their results, shared by the chat-shaped adapters (openai-messages,
sharegpt, atif): calls wait in the order they were made, and each result goes to the call with its
id, or to the oldest waiting call; answered calls become turns in call order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from schemas.errors import InvalidRecord, OptionError
from schemas.trajectory import Turn
from stages.ingest.common import canonical_json
from stages.ingest.reading import json_error_where, loads


def parse_arguments(raw: Any) -> Any:
    """Tool-call arguments as a value: JSON text is parsed when valid, anything else is kept as given. No arguments
    (``null``, or the empty string some servers send for a tool without parameters) are ``{}``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str):
        try:
            return loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def tool_action(name: str, arguments: Any) -> str:
    """Canonical action text of one tool call: ``{"name": ..., "arguments": ...}``."""
    return canonical_json({"name": name, "arguments": parse_arguments(arguments)})


def orphans_policy(opts: dict[str, Any]) -> str:
    """``quarantine`` (default) or ``skip`` from ``opts["orphans"]``; anything else is an `OptionError`. It is
    also the option check (``check_options``) of the adapters whose only option it is."""
    value = opts.get("orphans") or "quarantine"
    if value not in ("quarantine", "skip"):
        raise OptionError("orphans", f"must be 'quarantine' or 'skip', not {value!r}")
    return value


@dataclass
class _Call:
    name: str
    action: str
    call_id: str | None
    reasoning: str | None
    observation: str | None = None


@dataclass
class ToolCallPairing:
    """Tool calls in the order they were made, each waiting for its result; turns come out in call order."""

    calls: list[_Call] = field(default_factory=list)

    def call(self, name: str, arguments: Any, call_id: str | None = None, reasoning: str | None = None) -> None:
        self.calls.append(_Call(name, tool_action(name, arguments), call_id, reasoning))

    def answer_by_id(self, call_id: str, observation: str) -> bool:
        """Give the result to the unanswered call with this id; False when there is none."""
        for c in self.calls:
            if c.observation is None and c.call_id == call_id:
                c.observation = observation
                return True
        return False

    def answer_next(self, observation: str, name: str | None = None) -> bool:
        """Give the result to the oldest unanswered call (of this name, if given); False when there is none."""
        for c in self.calls:
            if c.observation is None and (name is None or c.name == name):
                c.observation = observation
                return True
        return False

    def turns(self) -> list[Turn]:
        out = []
        for c in self.calls:
            if c.observation is not None:
                meta = json.dumps({"tool_call_id": c.call_id}) if c.call_id else None
                out.append(Turn(action=c.action, observation=c.observation, reasoning=c.reasoning, meta=meta))
        return out

    def pending(self) -> list[str]:
        """Names of the calls still waiting for a result, oldest first."""
        return [c.name for c in self.calls if c.observation is None]

    def unanswered(self) -> int:
        return sum(1 for c in self.calls if c.observation is None)


def decoded_field(value: Any, what: str, locator: str) -> Any:
    """A field that may hold JSON text (CSV cells) as a value."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidRecord("malformed_json", f"{what}: {json_error_where(exc)}", locator) from None
    return value


def action_space_of(tools: Any, locator: str) -> str:
    """The declared tools as canonical JSON text ('' when none)."""
    tools = decoded_field(tools, "tools", locator)
    if tools in (None, "", []):
        return ""
    return tools if isinstance(tools, str) else canonical_json(tools)
