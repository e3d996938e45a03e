"""``swe-agent``: SWE-agent trajectory files (``.traj``), one run per file.

A ``.traj`` is one JSON object: ``trajectory`` (the executed steps), ``history`` (the chat the
model saw: system prompt, demonstration, task, then actions and observations) and ``info``
(``exit_status``, ``submission``, ``model_stats``). Native record (one step, abridged)::

    {"trajectory": [{"action": "open setup.py\\n", "observation": "[File: /repo/setup.py (94 lines total)]...",
                     "thought": "Let's look at setup.py.", "response": "...", "state": "{\\"open_file\\": \\"n/a\\"}"}]}

Mapping to the unified schema (domain ``swe``; ``--opt domain=terminal`` for terminal-style runs):

- One turn per trajectory step. ``observation`` is the step's raw tool output (escape codes
  removed, ``\\r`` overwrites collapsed); the shell state SWE-agent appends to it in the chat
  (``(Open file: …)``, ``(Current directory: …)``) is kept in ``turn.meta["state"]``.
  ``thought`` is ``turn.reasoning``.
- Actions, whatever syntax the run used, become one canonical shape,
  ``{"name": TOOL, "arguments": {...}}``:

  * plain commands (a fenced block, or ``<command>…</command>`` in the XML dialect): a command
    documented in the system prompt's ``COMMANDS:`` section is parsed by its signature,
    ``open src/app.py 40`` → ``{"name": "open", "arguments": {"path": "src/app.py",
    "line_number": "40"}}``, and a multi-line body (``edit 3:5`` … ``end_of_edit``) becomes the
    signature's body argument (``replacement_text``); values are the strings as typed.
    SWE-agent 1.x tools whose bundles declare options (``str_replace_editor view /f.py
    --view_range 10 20``, ``--old_str '…' --new_str '…'``) are parsed by the bundle's declared
    signature and argument types (`stages.ingest.swe_agent_tools`): ``{"command": "view", "path":
    "/f.py", "view_range": [10, 20]}``, the shape function calling records. A command that does not
    fit its signature is quarantined as ``unparsable_command`` (step and reason in the detail),
    never given a guessed value. Anything else is shell: ``{"name": "bash", "arguments":
    {"command": "ls -la"}}`` (``command`` is the one key of raw command text). An empty action
    stays empty (``""``), so the empty-action filter sees it.
  * XML function calls (``<function=str_replace_editor><parameter=command>view</parameter>…``)
    and native function calling (``tool_calls`` on the history message) keep their tool name and
    arguments; several calls in one step become a list of such objects.

  With ``domain=terminal`` the action is keystroke JSON of the command line instead.
- A history-only ``.traj`` (a demonstration file: ``history`` and no ``trajectory``) becomes turns
  from ``history``: each assistant message with an ``action`` or ``tool_calls`` and the tool/user
  message that answers it (the ``(Open file: …)`` state lines removed); an action nobody answered
  is counted in ``meta.unanswered_actions``. A history whose messages speak in other roles than
  SWE-agent's chat roles (``system``, ``user``, ``assistant``, ``tool``), such as a Magentic-One
  log's ``Orchestrator (thought)`` and ``WebSurfer``, is another format: ``wrong_format``.
- ``system.task_description``: the first task message of ``history`` (its ``<pr_description>``, or
  the text before ``INSTRUCTIONS:``);
  ``system.action_space``: the ``COMMANDS:`` documentation of the system prompt (else the whole
  system prompt); ``system.demonstrations``: the (action, observation) pairs of the demonstration
  shown to the model, when it is a ``--- DEMONSTRATION ---`` transcript or a run of ``is_demo``
  messages (a demonstration that cannot be split is counted in ``meta``, not guessed).
- ``split_key``: the instance id (``info.instance_id``, else the file name: a SWE-bench style
  ``owner__repo-1234`` prefix, else the name without ``.traj``). ``info.exit_status``,
  ``submission`` and ``model_stats`` go to ``meta``; ``outcome`` only when ``info`` states a
  result (``resolved`` / ``reward``), as a submission alone does not say whether it was right.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import Demonstration, Outcome, SystemPrompt, Trajectory, Turn
from stages.ingest.common import canonical_json, make_trajectory, records_from_document, text_of
from stages.ingest.reading import InputUnit, loads, split_compression
from stages.ingest.registry import Probe, RawRecord
from stages.ingest.swe_agent_tools import OPTION_TOOLS, TOOLS, CommandParseError, parse_tool_command
from stages.ingest.terminal_text import clean_tool_output, keystroke_action

FORMAT = "swe-agent"
_XML_COMMAND = re.compile(r"<command>\n?(.*?)\n?</command>", re.S)
_XML_FUNCTION = re.compile(r"<function=([\w.-]+)>(.*?)</function>", re.S)
_XML_PARAMETER = re.compile(r"<parameter=([\w.-]+)>\n?(.*?)\n?</parameter>", re.S)
_SWE_BENCH_ID = re.compile(r"^[\w.-]+?__[\w.-]+?-\d+(?=$|\.)")
_PR_DESCRIPTION = re.compile(r"<pr_description>(.*?)</pr_description>", re.S)
_STATE_LINES = re.compile(r"\n*\(Open file: [^\n]*\)\n\(Current directory: [^\n]*\)\s*$")
_QUOTED = re.compile(r"'[^']*'|\"(?:\\.|[^\"\\])*\"|\\.", re.S)
_PROMPT_STATE = re.compile(r"\n*\(Open file: [^\n]*\)\n\(Current directory: [^\n]*\)\s*(?:bash-\$[ \t]*)?\s*$")


class SweAgentAdapter:
    name = FORMAT
    description = "SWE-agent .traj files: trajectory steps, chat history, info"
    domains = ("swe", "terminal")
    default_domain = "swe"
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        if not isinstance(rec, dict):
            return 0.0
        if not isinstance(rec.get("trajectory"), list):
            history = rec.get("history")
            is_traj = split_compression(probe.uri)[0].endswith(".traj")
            if is_traj and isinstance(history, list) and history and isinstance(history[0], dict):
                return 0.9 if "role" in history[0] else 0.0  # a demonstration file: history only
            return 0.0
        steps = rec["trajectory"]
        if steps and isinstance(steps[0], dict) and "action" in steps[0] and "observation" in steps[0]:
            return 0.95
        return 0.9 if split_compression(probe.uri)[0].endswith(".traj") and "history" in rec else 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        yield from records_from_document(unit, FORMAT, opts)

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        value = record.value()
        history_only = (
            isinstance(value, dict) and "trajectory" not in value and isinstance(value.get("history"), list)
        )
        if not isinstance(value, dict) or not (isinstance(value.get("trajectory"), list) or history_only):
            raise InvalidRecord("missing_field", "a .traj must be an object with a 'trajectory' list", record.locator)
        domain = opts.get("domain") or self.default_domain
        history = value.get("history") or []
        if not isinstance(history, list) or not all(isinstance(m, dict) for m in history):
            raise InvalidRecord("wrong_type", "'history' must be a list of message objects", record.locator)
        if history_only:
            _check_chat_roles(history, record.locator)
        info = value.get("info") if isinstance(value.get("info"), dict) else {}
        system_text = next((text_of(m.get("content")) for m in history if m.get("role") == "system"), "")
        commands = parse_commands_doc(system_text)
        unanswered = 0
        if history_only:
            steps, unanswered = _steps_from_history(history)
            turns = _turns(steps, history, commands, domain, record.locator)
            demos, demo_status = [], None
        else:
            turns = _turns(value["trajectory"], history, commands, domain, record.locator)
            demos, demo_status = _demonstrations(history, commands)
        meta = {"agent": "swe-agent", "environment": value.get("environment"), "demonstration": demo_status}
        if history_only:
            meta.update({"history_only": True, "unanswered_actions": unanswered or None})
        meta.update({k: info[k] for k in ("exit_status", "submission", "model_stats") if k in info})
        yield make_trajectory(
            record,
            domain=domain,
            native_key=f"{record.uri}:{record.locator}",
            turns=turns,
            system=SystemPrompt(
                task_description=_task_description(history),
                action_space=_action_space(system_text),
                demonstrations=demos,
            ),
            source_kind=opts.get("source_kind") or "public",
            split_key=_instance_id(record.uri, info),
            outcome=_outcome(info),
            meta={k: v for k, v in meta.items() if v is not None},
        )


def _turns(
    steps: list[Any], history: list[dict], commands: dict[str, CommandSignature], domain: str, locator: str
) -> list[Turn]:
    answers = [m for m in history if m.get("role") == "assistant" and not m.get("is_demo")]
    cursor = 0
    turns = []
    for i, step in enumerate(steps, 1):
        if not isinstance(step, dict) or not isinstance(step.get("action"), str):
            raise InvalidRecord("missing_field", f"step {i} has no action text", locator)
        message, cursor = _message_of(step, answers, cursor)
        try:
            action, syntax = _canonical_action(step, message, commands)
        except CommandParseError as exc:
            raise InvalidRecord("unparsable_command", f"step {i}: {exc}", locator) from None
        if domain == "terminal" and syntax != "empty":
            action = keystroke_action(_command_line(step, syntax))
        meta: dict[str, Any] = {"syntax": syntax, "state": _state(step.get("state"))}
        if message and isinstance(message.get("tool_calls"), list):
            meta["tool_call_ids"] = [c.get("id") for c in message["tool_calls"] if isinstance(c, dict)] or None
        if "execution_time" in step:
            meta["execution_time"] = step["execution_time"]
        thought = step.get("thought")
        turns.append(
            Turn(
                action=action,
                observation=clean_tool_output(text_of(step.get("observation"))),
                reasoning=thought.strip() or None if isinstance(thought, str) else None,
                meta=json.dumps({k: v for k, v in meta.items() if v is not None}, ensure_ascii=False),
            )
        )
    return turns


# The roles of SWE-agent's history: a chat between the model and its environment.
_CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})


def _check_chat_roles(history: list[dict], locator: str) -> None:
    """A history-only record is SWE-agent's when its messages speak in SWE-agent's chat roles. A multi-agent log
    holds a role/content history too (Magentic-One's ``Orchestrator (thought)``, ``WebSurfer``): read as a
    demonstration it has no assistant action and was filtered as a run without turns, not named wrong."""
    others = sorted({str(m.get("role")) for m in history if m.get("role") not in _CHAT_ROLES})
    if others:
        shown = ", ".join(repr(r) for r in others[:4]) + (", …" if len(others) > 4 else "")
        raise InvalidRecord("wrong_format", f"the history speaks in roles SWE-agent does not use ({shown}); SWE-agent's "
                            f"are {', '.join(sorted(_CHAT_ROLES))}", locator)


def _steps_from_history(history: list[dict]) -> tuple[list[dict], int]:
    """Trajectory steps rebuilt from a history-only file, and the number of unanswered actions."""
    messages = [m for m in history if not m.get("is_demo")] or history
    steps = []
    unanswered = 0
    for i, message in enumerate(messages):
        calls = message.get("tool_calls")
        action = message.get("action")
        has_calls = isinstance(calls, list) and bool(calls)
        if message.get("role") != "assistant" or not (isinstance(action, str) or has_calls):
            continue
        reply = messages[i + 1] if i + 1 < len(messages) else None
        if reply is None or reply.get("role") not in ("user", "tool"):
            unanswered += 1
            continue
        thought = message.get("thought")
        steps.append(
            {
                "action": action if isinstance(action, str) else "",
                "observation": _PROMPT_STATE.sub("", text_of(reply.get("content"))),
                "thought": thought if isinstance(thought, str) else text_of(message.get("content")),
                "response": text_of(message.get("content")),
                "tool_calls": calls if has_calls else None,
            }
        )
    return steps, unanswered


def _message_of(step: dict, answers: list[dict], cursor: int) -> tuple[dict | None, int]:
    """The history message that issued this step (matched by action text), and the next cursor."""
    for j in range(cursor, len(answers)):
        if answers[j].get("action") == step["action"]:
            return answers[j], j + 1
    return None, cursor


def _canonical_action(step: dict, message: dict | None, commands: dict[str, CommandSignature]) -> tuple[str, str]:
    """Canonical JSON of the step's action and the syntax it was written in."""
    calls = step.get("tool_calls") or (message or {}).get("tool_calls")
    if isinstance(calls, list) and calls:
        parsed = [_tool_call(c) for c in calls]
        return canonical_json(parsed[0] if len(parsed) == 1 else parsed), "function_calling"
    response = step.get("response") if isinstance(step.get("response"), str) else ""
    if not step["action"].strip() and "<function=" not in response and "<command>" not in response:
        return "", "empty"  # nothing was sent: an empty action, for the empty-action filter to see
    for text in (step["action"], response):
        functions = _XML_FUNCTION.findall(text)
        if functions:
            parsed = [{"name": name, "arguments": _xml_parameters(body)} for name, body in functions]
            return canonical_json(parsed[0] if len(parsed) == 1 else parsed), "xml_function"
    xml = _XML_COMMAND.search(step["action"]) or _XML_COMMAND.search(response)
    if xml:
        command = step["action"] if "<command>" not in step["action"] and step["action"].strip() else xml.group(1)
        return canonical_json(parse_command(command, commands)), "xml"
    return canonical_json(parse_command(step["action"], commands)), "plain"


def _tool_call(call: Any) -> dict[str, Any]:
    function = call.get("function", call) if isinstance(call, dict) else {}
    function = function if isinstance(function, dict) else {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            arguments = {"raw": arguments}  # a model can emit broken JSON; it is what was sent
    return {"name": function.get("name") or "", "arguments": arguments if arguments is not None else {}}


def _xml_parameters(body: str) -> dict[str, str]:
    return dict(_XML_PARAMETER.findall(body))


def _command_line(step: dict, syntax: str) -> str:
    command = step["action"]
    if syntax == "xml" and "<command>" in command:
        command = _XML_COMMAND.search(command).group(1)
    return command if command.endswith("\n") else command + "\n"


def _state(state: Any) -> Any:
    try:
        return loads(state) if isinstance(state, str) and state.strip() else state or None
    except json.JSONDecodeError:
        return state


def _task_description(history: list[dict]) -> str:
    for message in history:
        if message.get("role") != "user" or message.get("is_demo"):
            continue
        text = text_of(message.get("content"))
        if "--- DEMONSTRATION ---" in text:
            continue
        described = _PR_DESCRIPTION.search(text)
        return described.group(1).strip() if described else text.split("\nINSTRUCTIONS:", 1)[0].strip()
    return ""


def _action_space(system_text: str) -> str:
    start = system_text.find("COMMANDS:")
    if start < 0:
        return system_text.strip()
    end = system_text.find("RESPONSE FORMAT:", start)
    return system_text[start : end if end > 0 else None].strip()


def _demonstrations(
    history: list[dict], commands: dict[str, CommandSignature]
) -> tuple[list[Demonstration], str | None]:
    """The demonstration's (action, observation) pairs and a status for ``meta``."""
    transcript = next(
        (text_of(m.get("content")) for m in history if "--- DEMONSTRATION ---" in text_of(m.get("content"))), None
    )
    if transcript is not None:
        try:
            demos = _transcript_pairs(transcript, commands)
        except CommandParseError:
            demos = []
        return (demos, "parsed") if demos else ([], "unparsed")
    demo_messages = [m for m in history if m.get("is_demo")]
    if not demo_messages:
        return [], None
    demos = []
    for i, message in enumerate(demo_messages[:-1]):
        reply = demo_messages[i + 1]
        if message.get("role") == "assistant" and reply.get("role") in ("user", "tool"):
            step = {"action": message.get("action") or "", "response": text_of(message.get("content"))}
            try:
                action, _ = _canonical_action(step, message, commands)
            except CommandParseError:
                return [], "unparsed"
            observation = _STATE_LINES.sub("", text_of(reply.get("content")))
            demos.append(Demonstration(action=action, observation=clean_tool_output(observation)))
    return (demos, "parsed") if demos else ([], "unparsed")


def _transcript_pairs(transcript: str, commands: dict[str, CommandSignature]) -> list[Demonstration]:
    """Split a rendered demonstration into (command, output) pairs; [] when the layout is not recognized."""
    body = transcript.split("--- DEMONSTRATION ---", 1)[1].split("--- END OF DEMONSTRATION ---", 1)[0]
    # Each observation ends with the shell prompt line; the text before the first one is the task.
    chunks = re.split(r"(?m)^bash-\$[ \t]*\n?", body)[1:]
    demos = []
    for chunk in chunks:
        lines = chunk.split("\n")
        fence = _command_fence(lines, commands)
        if fence is None:
            return []
        start, end = fence
        observation = "\n".join(lines[end + 1 :])
        if not observation.strip() and chunk is chunks[-1]:
            break  # the closing action of a demonstration has no recorded output
        action = canonical_json(parse_command("\n".join(lines[start + 1 : end]), commands))
        demos.append(Demonstration(action=action, observation=clean_tool_output(_STATE_LINES.sub("", observation))))
    return demos


def _command_fence(lines: list[str], commands: dict[str, CommandSignature]) -> tuple[int, int] | None:
    """Line numbers of the bare ``` lines that open and close the command block of a response."""
    opening = next((i for i, line in enumerate(lines) if line.strip() == "```"), None)
    if opening is None or opening + 1 >= len(lines):
        return None
    signature = commands.get(lines[opening + 1].split(" ", 1)[0])
    search_from = opening + 1
    if signature and signature.terminator:
        # A multi-line body may itself contain fences; the block closes after its terminator.
        search_from = next(
            (i for i in range(opening + 1, len(lines)) if lines[i].strip() == signature.terminator), opening + 1
        )
    closing = next((i for i in range(search_from, len(lines)) if lines[i].strip() == "```" and i > opening), None)
    return (opening, closing) if closing is not None else None


def _instance_id(uri: str, info: dict) -> str | None:
    if isinstance(info.get("instance_id"), str) and info["instance_id"]:
        return info["instance_id"]
    name = posixpath.basename(split_compression(uri)[0])
    stem = name[: -len(".traj")] if name.endswith(".traj") else posixpath.splitext(name)[0]
    match = _SWE_BENCH_ID.match(stem)
    return match.group(0) if match else stem or None


def _outcome(info: dict) -> Outcome | None:
    resolved = info.get("resolved")
    reward = info.get("reward", info.get("score"))
    if not isinstance(resolved, bool) and not isinstance(reward, int | float):
        return None
    return Outcome(
        success=resolved if isinstance(resolved, bool) else None,
        reward=float(reward) if isinstance(reward, int | float) and not isinstance(reward, bool) else None,
    )


# --- plain commands, parsed by the signatures the system prompt documents -------------------


@dataclass(frozen=True)
class CommandSignature:
    """``edit <start_line>:<end_line>`` / ``<replacement_text>`` / ``end_of_edit`` as match groups."""

    groups: tuple[tuple[bool, tuple[re.Pattern[str], ...]], ...]  # (optional, word patterns)
    body: str | None = None  # argument name of the lines after the command line
    terminator: str | None = None  # the line that ends the body


def parse_commands_doc(system_text: str) -> dict[str, CommandSignature]:
    """Signatures of the ``COMMANDS:`` section (``name:`` / ``  signature: …`` blocks), by command name."""
    signatures: dict[str, CommandSignature] = {}
    lines = system_text.split("\n")
    name = None
    i = 0
    while i < len(lines):
        header = re.fullmatch(r"([\w.-]+):", lines[i])
        if header:
            name = header.group(1)
        sig = re.fullmatch(r"  signature: (.*)", lines[i])
        if sig and name:
            extra = []
            # Body lines of a multi-line signature are not indented (``<replacement_text>``, ``end_of_edit``).
            while i + 1 < len(lines) and lines[i + 1].strip() and not lines[i + 1].startswith(" "):
                if re.fullmatch(r"[\w.-]+:", lines[i + 1]):
                    break
                extra.append(lines[i + 1].strip())
                i += 1
            signatures[name] = _signature(sig.group(1), extra)
        i += 1
    return signatures


def _signature(first_line: str, extra: list[str]) -> CommandSignature:
    groups = []
    for token in re.findall(r"\[[^\]]*\]|\S+", first_line.strip())[1:]:
        optional = token.startswith("[") and token.endswith("]")
        words = token[1:-1].split() if optional else [token]
        groups.append((optional, tuple(_word_pattern(w) for w in words)))
    body = re.fullmatch(r"<(\w+)>", extra[0]) if extra else None
    return CommandSignature(
        groups=tuple(groups),
        body=body.group(1) if body else None,
        terminator=extra[-1] if body and len(extra) >= 2 else None,
    )


def _word_pattern(word: str) -> re.Pattern[str]:
    # Quotes in a signature tell the model to quote; shlex has already removed them from the command.
    parts = re.split(r"<(\w+)>", word.replace("'", "").replace('"', ""))
    regex = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
    return re.compile(regex, re.S)


def parse_command(command: str, commands: dict[str, CommandSignature]) -> dict[str, Any]:
    """``{"name": …, "arguments": {…}}`` for one plain command (see the module docstring).

    Raises `CommandParseError` when the command names a tool but does not fit its signature.
    """
    text = command.strip("\n")
    first_line, _, rest = text.partition("\n")
    name = first_line.split(maxsplit=1)[0] if first_line.strip() else ""
    one_line = "\n" not in _QUOTED.sub("", text)  # quoted values may span lines; a script may not
    if name in OPTION_TOOLS and one_line:
        return {"name": name, "arguments": parse_tool_command(text, TOOLS[name])}
    signature = commands.get(name)
    if signature is None and name in TOOLS and one_line:
        return {"name": name, "arguments": parse_tool_command(text, TOOLS[name])}
    if signature is None or (rest and signature.body is None):
        return {"name": "bash", "arguments": {"command": text}}
    raw_args = first_line.strip()[len(name) :].strip()
    try:
        arguments = _match_groups(signature.groups, shlex.split(raw_args), 0)
    except ValueError:
        raise CommandParseError(f"{name}: unbalanced quotes in {raw_args!r}") from None
    if arguments is None:
        raise CommandParseError(f"{name}: {raw_args!r} does not fit the documented signature")
    if signature.body is not None and rest:
        body = rest.split("\n")
        if signature.terminator and body[-1].strip() == signature.terminator:
            body = body[:-1]
        arguments[signature.body] = "\n".join(body)
    return {"name": name, "arguments": arguments}


def _match_groups(groups: tuple, argv: list[str], pos: int) -> dict[str, str] | None:
    """Assign shell words to signature groups in order, trying optional groups both ways."""
    if not groups:
        return {} if pos == len(argv) else None
    (optional, patterns), rest = groups[0], groups[1:]
    words = argv[pos : pos + len(patterns)]
    if len(words) == len(patterns):
        found: dict[str, str] = {}
        for word, pattern in zip(words, patterns):
            match = pattern.fullmatch(word)
            if match is None:
                break
            found.update(match.groupdict())
        else:
            tail = _match_groups(rest, argv, pos + len(patterns))
            if tail is not None:
                return {**found, **tail}
    return _match_groups(rest, argv, pos) if optional else None


ADAPTER = SweAgentAdapter()
