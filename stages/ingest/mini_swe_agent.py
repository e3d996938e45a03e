"""``mini-swe-agent``: mini-swe-agent trajectories (``.traj.json``), a chat of bash commands.

The file is the chat itself, either a bare message list or ``{"messages": [...], "info": {...},
"trajectory_format": "mini-swe-agent-1"}``. Each assistant message holds exactly one fenced bash
block; the next user message carries the shell's answer. Native record (two messages)::

    {"role": "assistant", "content": "Let me look around.\\n\\n```bash\\nls -la\\n```"}
    {"role": "user", "content": "<returncode>0</returncode>\\n<output>\\ntotal 44\\n...</output>"}

Mapping to the unified schema (domain ``terminal``):

- One turn per assistant message with exactly one bash block (fence ``bash``, ``sh`` or
  ``mswea_bash_command``) and the user message that answers it. The action is keystroke JSON,
  ``[{"keystrokes": "ls -la\\n"}]`` (no duration: every command runs to completion); the text
  around the block is ``turn.reasoning``.
- The observation is the answering message as the agent saw it, ``<returncode>``/``<output>``
  wrapper included (escape codes removed, ``\\r`` overwrites collapsed); the return code is also
  kept in ``turn.meta``. The final submission message (a diff, no wrapper; mini-swe-agent 2 gives it the role
  ``exit``) is an observation too.
- mini-swe-agent 2's tool-calling models (``trajectory_format`` ``mini-swe-agent-1.1``) put each command in a
  ``bash`` tool call (``{"command": ...}``; also in ``extra.actions``), answered by a ``tool`` message of the same
  ``tool_call_id`` (``content`` rendered as above). Each call is a turn; the message's text is the reasoning of
  its first. Native record::

    {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "call_1", "type": "function",
     "function": {"name": "bash", "arguments": "{\\"command\\": \\"ls -la\\"}"}}]}
    {"role": "tool", "tool_call_id": "call_1", "content": "<returncode>0</returncode>\\n<output>\\n...</output>"}

- An assistant message with zero or several blocks (or no ``bash`` call) was rejected by the agent's harness, and the
  reply is a format complaint, not the shell: that pair is not a turn and is counted in ``meta``
  (``format_errors``), as is an action left without an answer (``unanswered_actions``).
- ``system.task_description`` is the task of the first user message (its ``<pr_description>``,
  or the text before the template's instructions); the system prompt only fixes the response
  format, so the action space stays the terminal domain's. ``split_key`` is the file name
  without ``.traj.json`` (mini-swe-agent names runs by instance id); ``info`` goes to ``meta``.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterator
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import SystemPrompt, Trajectory, Turn
from stages.ingest.common import make_trajectory, records_from_document, text_of
from stages.ingest.reading import InputUnit, split_compression
from stages.ingest.registry import Probe, RawRecord
from stages.ingest.terminal_text import clean_tool_output, keystroke_action
from stages.ingest.tool_calls import parse_arguments

FORMAT = "mini-swe-agent"
_BASH_BLOCK = re.compile(r"```(?:bash|sh|mswea_bash_command)[ \t]*\n(.*?)\n?```", re.S)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_PR_DESCRIPTION = re.compile(r"<pr_description>(.*?)</pr_description>", re.S)
# Where mini-swe-agent's instance templates switch from the task to their own instructions.
_TEMPLATE_SECTIONS = ("\n## Recommended Workflow", "\n## Important Rules", "\n<instructions>", "\n# Task Instructions")


class MiniSweAgentAdapter:
    name = FORMAT
    description = "mini-swe-agent .traj.json chats: one bash block per assistant turn, <returncode>/<output> replies"
    domains = ("terminal",)
    default_domain = "terminal"
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        if isinstance(rec, dict) and str(rec.get("trajectory_format", "")).startswith("mini-swe-agent"):
            return 0.99
        looks_like_chat = isinstance(rec, dict) and ("role" in rec or isinstance(rec.get("messages"), list))
        if not looks_like_chat:
            return 0.0
        head = probe.head
        has_block = "```bash" in head or "```mswea_bash_command" in head
        if has_block and "<returncode>" in head:
            return 0.95
        return 0.8 if split_compression(probe.uri)[0].endswith(".traj.json") and has_block else 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        # The whole file is one run, whether a bare message list or an object around it.
        yield from records_from_document(unit, FORMAT, opts)

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        value = record.value()
        messages = value.get("messages") if isinstance(value, dict) else value
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise InvalidRecord("missing_field", "expected a list of chat messages", record.locator)
        if not any(m.get("role") == "assistant" for m in messages):
            raise InvalidRecord("wrong_format", "no assistant message: not a chat of the agent's commands", record.locator)
        turns, counts = _turns(messages)
        info = value.get("info") if isinstance(value, dict) and isinstance(value.get("info"), dict) else {}
        meta: dict[str, Any] = {"agent": "mini-swe-agent", **{k: v for k, v in counts.items() if v}}
        meta.update({k: info[k] for k in ("exit_status", "submission", "model_stats", "mini_version") if k in info})
        yield make_trajectory(
            record,
            domain=opts.get("domain") or self.default_domain,
            native_key=f"{record.uri}:{record.locator}",
            turns=turns,
            system=SystemPrompt(task_description=_task_description(messages)),
            source_kind=opts.get("source_kind") or "public",
            split_key=_run_name(record.uri),
            meta=meta,
        )


def _turns(messages: list[dict]) -> tuple[list[Turn], dict[str, int]]:
    turns: list[Turn] = []
    counts = {"format_errors": 0, "unanswered_actions": 0}
    answered: set[int] = set()  # the replies taken, by position
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        text = text_of(message.get("content"))
        calls = _bash_calls(message)
        if calls is not None:  # the tool-calling models: a `bash` call per action, each answered by a `tool` message
            if not calls:
                counts["format_errors"] += 1
                continue
            reasoning = text.strip() or None
            for call_id, command in calls:
                reply = _tool_reply(messages, i + 1, call_id, answered)
                if reply is None:
                    counts["unanswered_actions"] += 1
                    continue
                turns.append(_turn(command, reply, reasoning))
                reasoning = None  # the message's text goes before its first action
            continue
        blocks = _BASH_BLOCK.findall(text)
        reply = messages[i + 1] if i + 1 < len(messages) else None
        if len(blocks) != 1:
            counts["format_errors"] += 1
            continue
        if reply is None or reply.get("role") not in ("user", "tool", "exit"):
            counts["unanswered_actions"] += 1
            continue
        turns.append(_turn(blocks[0].strip("\n"), reply, _BASH_BLOCK.sub("", text).strip() or None))
    return turns, counts


def _turn(command: str, reply: dict, reasoning: str | None) -> Turn:
    observation = text_of(reply.get("content"))
    returncode = _RETURNCODE.search(observation)
    return Turn(
        action=keystroke_action(command + "\n"),
        observation=clean_tool_output(observation),
        reasoning=reasoning,
        meta=json.dumps({"returncode": int(returncode.group(1))}) if returncode else None,
    )


def _bash_calls(message: dict) -> list[tuple[str | None, str]] | None:
    """(call id, command) of each action of a tool-calling model's message; None for a text model's message.

    mini-swe-agent 2's tool-calling models (``litellm_toolcall_model``, ``actions_toolcall``) offer one ``bash``
    tool with a ``command`` argument and keep the parsed actions in ``extra.actions`` (``command``,
    ``tool_call_id``). A call to another tool, or without a command, was refused as a format error and never
    ran: the message then has no action (an empty list)."""
    raw = message.get("tool_calls")
    if isinstance(raw, list) and raw:
        calls = []
        for call in raw:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or function.get("name") != "bash":
                return []
            arguments = parse_arguments(function.get("arguments"))
            command = arguments.get("command") if isinstance(arguments, dict) else None
            if not isinstance(command, str):
                return []
            calls.append((call.get("id"), command))
        return calls
    extra = message.get("extra")
    actions = extra.get("actions") if isinstance(extra, dict) else None
    if isinstance(actions, list) and actions and all(isinstance(a, dict) and "tool_call_id" in a for a in actions):
        if not all(isinstance(a.get("command"), str) for a in actions):
            return []
        return [(a["tool_call_id"], a["command"]) for a in actions]
    return None


def _tool_reply(messages: list[dict], start: int, call_id: str | None, answered: set[int]) -> dict | None:
    """The message after `start` that answers `call_id`, before the next assistant message: the ``tool`` message
    of that id (the next one where calls have no id), or else the ``exit`` message that ends the run (mini-swe-agent
    2 ends on it, holding the submission, when the command submitted). `answered` holds the positions taken."""
    for at in range(start, len(messages)):
        message = messages[at]
        role = message.get("role")
        if role == "assistant":
            return None
        if at in answered:
            continue
        if (role == "tool" and (call_id is None or message.get("tool_call_id") in (call_id, None))) or role == "exit":
            answered.add(at)
            return message
    return None


def _task_description(messages: list[dict]) -> str:
    first_user = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
    described = _PR_DESCRIPTION.search(first_user)
    if described:
        return described.group(1).strip()
    cut = min((first_user.find(s) for s in _TEMPLATE_SECTIONS if s in first_user), default=len(first_user))
    return first_user[:cut].strip()


def _run_name(uri: str) -> str | None:
    name = posixpath.basename(split_compression(uri)[0])
    for suffix in (".traj.json", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or None
    return name or None


ADAPTER = MiniSweAgentAdapter()
