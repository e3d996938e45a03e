"""``atif``: Harbor's Agent Trajectory Interchange Format (ATIF v1.x), one trajectory per JSON document.

Native record (abridged)::

    {"schema_version": "ATIF-v1.2", "session_id": "s1", "agent": {"name": "terminus-2", "version": "2.0"}, "steps": [
     {"step_id": 2, "source": "agent", "message": "List files.", "tool_calls": [{"tool_call_id": "c1",
     "function_name": "bash_command", "arguments": {"keystrokes": "ls\\n"}}], "observation": {"results": [{"content": "a b"}]}}]}

Containers: a JSON document (``trajectory.json``), a JSON list of them, or JSONL with one per line. A step has
``source`` (``system`` | ``user`` | ``agent``), ``message`` (text, or content parts since v1.6), optional
``reasoning_content``, ``tool_calls[{tool_call_id, function_name, arguments}]``, ``observation.results
[{source_call_id, content}]`` and ``is_copied_context``.

Mapping to the unified schema:

- agent steps become turns. A result with ``source_call_id`` pairs with that call of the same step (one turn
  per call). Results without an id pair with the remaining calls in order when the counts match; otherwise
  (Terminus-2 writes one terminal screen for several keystroke calls) the remaining calls form one turn
  with all those results joined. An agent step with results but no tool call is a turn whose action is
  its message. A result naming a call the step does not have is quarantined as ``orphan_tool_result``
  unless ``orphans=skip`` (counted in ``meta.orphan_tool_results``); a call without any result is counted in
  ``meta.unanswered_tool_calls``;
- action = the calls as keystroke JSON (``[{"keystrokes": ..., "duration": ...}]``, the terminal action
  format) when every call's arguments hold ``keystrokes``; else ``{"name", "arguments"}`` for one call, or a
  list of those for a grouped turn. reasoning = ``reasoning_content`` and ``message`` joined (first call only);
- steps with ``is_copied_context`` (context carried over from an earlier run) are never turns: their
  (action, observation) pairs become ``system.demonstrations``;
- task_description = the first user step (copied or not); later user messages go to ``meta.user_messages``;
  system steps instruct the agent, so their text is kept in ``meta.system_prompt`` (a system step with an
  observation is an infrastructure event: ``meta.system_events``);
- action_space = ``agent.tool_definitions`` as canonical JSON when present (later versions), else '';
- an agent message with no call and no result is not a turn; the last one is ``meta.final_answer``;
- traj_id from ``session_id`` (+ ``trajectory_id`` when present, + the record's locator when the container
  holds several documents: one file may repeat a session id); split_key from the task the document's
  ``extra`` names (``task``, ``task_id`` or ``task_name``: an OpenThoughts-Agent export gives every trajectory of a
  batch run one ``session_id``, the run's, and each its task in ``extra.task``), else from ``session_id``
  without a ``-cont-N`` suffix, so the continuations of one run stay in one pool.

Dialects met in the wild, read with the same rules:

- **streaming** ``.atif.jsonl``: a ``{"__header__": true, "schema_version", "session_id", "agent", ...}`` line,
  then one step per line; the whole file is one document (a broken line is quarantined, the rest still read);
- **chat style** (Terminus-2 runs converted from chat logs): no ``tool_calls``; the agent ``message`` holds the
  Terminus JSON reply ``{"analysis", "plan", "commands": [{"keystrokes", "duration"}], "task_complete"}``
  (possibly after some text) and the terminal output is the next ``source: "user"`` step. The commands are
  the action (keystroke JSON), ``analysis`` and ``plan`` the reasoning, that user step the observation (it is
  not a user message); a reply with no commands is the final answer. The first user step is Terminus-2's
  prompt: its instructions to the agent (kept in ``meta.system_prompt``), then ``Task Description:`` (the
  task_description) and ``Current terminal state:`` (the first screen: initial_state);
- **separate result steps** (near-ATIF exports): an agent step with calls and no results, followed by a
  ``user`` or ``system`` step that carries only ``observation.results`` (no ``source_call_id``): those results
  answer that agent step's calls, by id when given, else by the in-order rule above.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import DOMAINS, Demonstration, SystemPrompt, Trajectory, Turn, make_traj_id
from stages.ingest.common import canonical_json, make_trajectory, records_from_container, strip_ansi, text_of
from stages.ingest.reading import (
    InputUnit,
    container_kind,
    iter_container,
    max_record_bytes,
    read_head,
)
from stages.ingest.registry import Probe, RawRecord
from stages.ingest.tool_calls import action_space_of, orphans_policy, parse_arguments

FORMAT = "atif"
SOURCES = ("system", "user", "agent")
_CONTINUATION = re.compile(r"-cont-\d+$")
# Terminus-2's first prompt: its instructions to the agent, then "Task Description:\n{instruction}\n\n
# Current terminal state:\n{terminal_state}" (terminal-bench's terminus-2 prompt template; the chat-style sample
# in ../shared/data/atif follows it).
_TERMINUS_FRAME = re.compile(r"(?:\A|\n)Task Description:\n(?P<task>.*?)\n\nCurrent terminal state:\n(?P<screen>.*)\Z", re.S)


def split_terminus_prompt(text: str) -> tuple[str, str, str] | None:
    """(the agent's instructions, the task, the first screen) of a Terminus-2 first prompt; None for other text."""
    found = _TERMINUS_FRAME.search(text)
    if found is None or not found["task"].strip():
        return None
    return text[: found.start()].strip(), found["task"].strip(), strip_ansi(found["screen"]).rstrip()
_MAX_REPLY_STARTS = 64  # where a Terminus reply may begin inside an agent message


def calls_action(calls: list[dict]) -> str:
    """Canonical action text for the tool calls of one turn (see the module docstring)."""
    args = [parse_arguments(c.get("arguments")) for c in calls]
    if all(isinstance(a, dict) and "keystrokes" in a for a in args):
        return canonical_json(args)
    named = [{"name": c["function_name"], "arguments": a} for c, a in zip(calls, args)]
    return canonical_json(named[0] if len(named) == 1 else named)


@dataclass
class StepTurns:
    """The turns of one agent step and what could not become a turn."""

    turns: list[Turn] = field(default_factory=list)
    orphans: int = 0
    unanswered: int = 0


def _checked_calls(step: dict, where: str, loc: str) -> list[dict]:
    calls = step.get("tool_calls") or []
    if not isinstance(calls, list):
        raise InvalidRecord("malformed_tool_call", f"{where}: tool_calls must be a list", loc)
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("function_name"), str) or not call["function_name"]:
            raise InvalidRecord("malformed_tool_call", f"{where}: a tool call has no function_name", loc)
    return calls


def _checked_results(step: dict, where: str, loc: str) -> list[dict]:
    obs = step.get("observation")
    if obs is None:
        return []
    results = obs.get("results") if isinstance(obs, dict) else None
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise InvalidRecord("malformed_observation", f"{where}: observation.results must be a list of objects", loc)
    return results


def agent_step_turns(step: dict, where: str, loc: str, orphans: str) -> StepTurns:
    """Pair the calls and results of one agent step into turns, in call order."""
    calls = _checked_calls(step, where, loc)
    results = _checked_results(step, where, loc)
    message = text_of(step.get("message"))
    thought = text_of(step.get("reasoning_content")).strip()
    reasoning = "\n\n".join(p for p in (thought, message.strip()) if p) or None
    out = StepTurns()
    observed: dict[int, str] = {}  # call index -> observation
    loose: list[str] = []  # results that name no call
    for res in results:
        text = strip_ansi(text_of(res.get("content")))
        ref = res.get("source_call_id")
        if ref is None:
            loose.append(text)
            continue
        index = next((i for i, c in enumerate(calls) if c.get("tool_call_id") == ref and i not in observed), None)
        if index is not None:
            observed[index] = text
        elif orphans == "skip":
            out.orphans += 1
        else:
            raise InvalidRecord(
                "orphan_tool_result", f"{where}: a result names call {ref!r}, which this step did not make", loc
            )
    if not calls:
        if loose:  # an action taken without the tool-calling format: the message is the action
            out.turns.append(Turn(action=message, observation="\n".join(loose), reasoning=thought or None))
        return out
    remaining = [i for i in range(len(calls)) if i not in observed]
    groups: dict[int, list[int]] = {i: [i] for i in observed}
    if loose and len(loose) == len(remaining):
        for i, text in zip(remaining, loose):
            observed[i], groups[i] = text, [i]
    elif loose and remaining:
        observed[remaining[0]], groups[remaining[0]] = "\n".join(loose), remaining
    elif remaining:
        out.unanswered = len(remaining)
    elif loose:
        if orphans != "skip":
            raise InvalidRecord(
                "orphan_tool_result", f"{where}: {len(loose)} result(s) left with no call to pair with", loc
            )
        out.orphans += len(loose)
    for n, i in enumerate(sorted(observed)):
        action = calls_action([calls[g] for g in groups[i]])
        out.turns.append(Turn(action=action, observation=observed[i], reasoning=reasoning if n == 0 else None))
    return out


@dataclass
class AtifContent:
    """Everything a trajectory document holds, sorted into turns, context and meta."""

    turns: list[Turn] = field(default_factory=list)
    demonstrations: list[Demonstration] = field(default_factory=list)
    task: str | None = None
    user_messages: list[str] = field(default_factory=list)
    system_prompts: list[str] = field(default_factory=list)
    system_events: list[str] = field(default_factory=list)
    final_answer: str | None = None
    orphans: int = 0
    unanswered: int = 0
    copied_steps: int = 0
    terminus_replies: int = 0  # agent messages holding a Terminus JSON reply (the chat style)


def terminus_reply(message: str) -> dict | None:
    """The Terminus JSON reply (an object with a ``commands`` list) inside an agent message, or None."""
    decoder = json.JSONDecoder()
    start = message.find("{")
    attempts = 0
    while start != -1 and attempts < _MAX_REPLY_STARTS:  # bounded: a message may hold much code
        attempts += 1
        try:
            value, _ = decoder.raw_decode(message, start)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("commands"), list):
            return value
        start = message.find("{", start + 1)
    return None


def _keystrokes(commands: list) -> list[dict] | None:
    out = []
    for c in commands:
        if not isinstance(c, dict) or not isinstance(c.get("keystrokes"), str):
            return None
        out.append({k: c[k] for k in ("keystrokes", "duration") if k in c})
    return out


def _results_only(step: dict) -> bool:
    """A non-agent step that carries tool results and nothing to call: the answer to the previous calls."""
    obs = step.get("observation")
    return (
        step.get("source") in ("user", "system")
        and not step.get("tool_calls")
        and isinstance(obs, dict)
        and isinstance(obs.get("results"), list)
        and bool(obs["results"])
    )


def _calls_without_results(step: dict) -> bool:
    obs = step.get("observation")
    return bool(step.get("tool_calls")) and not (isinstance(obs, dict) and obs.get("results"))


def read_steps(steps: list, loc: str, orphans: str) -> AtifContent:
    """Sort the steps of one document (see the module docstring for the rules)."""
    content = AtifContent()
    pending_chat: tuple[str, str | None, bool] | None = None  # keystroke action, reasoning, copied
    for n, step in enumerate(steps):
        where = f"step {step.get('step_id', n + 1) if isinstance(step, dict) else n + 1}"
        if not isinstance(step, dict) or step.get("source") not in SOURCES:
            raise InvalidRecord(
                "malformed_step", f"{where}: expected an object with source in {', '.join(SOURCES)}", loc
            )
        if step.get("_answered"):
            continue  # a result step already merged into the agent step before it
        copied = step.get("is_copied_context") is True
        content.copied_steps += copied
        message = text_of(step.get("message"))
        if pending_chat is not None:
            action, reasoning, was_copied = pending_chat
            pending_chat = None
            if step["source"] == "user" and not step.get("observation"):
                turn = Turn(action=action, observation=strip_ansi(message), reasoning=reasoning)
                if was_copied:
                    content.demonstrations.append(Demonstration(turn.action, turn.observation))
                else:
                    content.turns.append(turn)
                continue
            content.unanswered += 1
        if step["source"] == "agent" and _calls_without_results(step) and n + 1 < len(steps):
            following = steps[n + 1]
            if isinstance(following, dict) and _results_only(following):
                step = {**step, "observation": following["observation"]}
                steps[n + 1] = {**following, "_answered": True}
        if step["source"] == "agent" and not step.get("tool_calls") and not step.get("observation"):
            reply = terminus_reply(message)
            commands = _keystrokes(reply["commands"]) if reply else None
            if commands:
                thought = text_of(step.get("reasoning_content")).strip()
                parts = [thought, *(reply.get(k) for k in ("analysis", "plan"))]
                reasoning = "\n\n".join(p.strip() for p in parts if isinstance(p, str) and p.strip()) or None
                pending_chat = (canonical_json(commands), reasoning, copied)
                content.terminus_replies += 1
                continue
            if reply is not None:  # a reply without commands ends the run
                content.final_answer = message
                continue
        if step["source"] == "system":
            # Since v1.2 a system step with an observation records an infrastructure event (checkpoint,
            # context management), not a prompt.
            events = content.system_events if step.get("observation") else content.system_prompts
            if message:
                events.append(message)
        elif step["source"] == "user":
            if content.task is None:
                content.task = message
            else:
                content.user_messages.append(message)
        else:
            got = agent_step_turns(step, where, loc, orphans)
            content.orphans += got.orphans
            content.unanswered += got.unanswered
            if copied:
                content.demonstrations += [Demonstration(t.action, t.observation) for t in got.turns]
            else:
                content.turns += got.turns
                if not got.turns and not step.get("tool_calls") and message.strip():
                    content.final_answer = message
    if pending_chat is not None:
        content.unanswered += 1
    return content


def normalize_atif(record: RawRecord, opts: dict[str, Any]) -> Trajectory:
    """One ATIF trajectory document → one trajectory; raises `InvalidRecord`."""
    loc = record.locator
    doc = record.value()
    if not isinstance(doc, dict):
        raise InvalidRecord("wrong_type", f"a trajectory must be an object, not {type(doc).__name__}", loc)
    steps = doc.get("steps")
    if steps is None:
        raise InvalidRecord("missing_field", "no steps field", loc)
    if not isinstance(steps, list):
        raise InvalidRecord("wrong_type", f"steps must be a list, not {type(steps).__name__}", loc)
    content = read_steps(list(steps), loc, orphans_policy(opts))
    initial_state = None
    framed = split_terminus_prompt(content.task) if content.terminus_replies and content.task else None
    if framed is not None:  # the chat style: the task and the first screen, without the agent's instructions
        instructions, content.task, initial_state = framed
        if instructions:
            content.system_prompts.insert(0, instructions)
    agent = doc.get("agent") if isinstance(doc.get("agent"), dict) else {}
    session = doc.get("session_id")
    session = str(session) if isinstance(session, str | int) and str(session) else None
    native = f"{session}:{doc['trajectory_id']}" if session and doc.get("trajectory_id") else session
    if native and loc != "document":
        native = f"{native}@{loc}"  # several documents in one file may share a session id
    task = _task_of(doc.get("extra"))
    if task:
        split_key = make_traj_id(FORMAT, f"task\x00{task}")
    else:
        split_key = make_traj_id(FORMAT, _CONTINUATION.sub("", session)) if session else None
    meta = {
        "schema_version": doc.get("schema_version"),
        "session_id": session,
        "agent": {k: agent[k] for k in ("name", "version", "model_name") if agent.get(k)} or None,
        "system_prompt": "\n\n".join(content.system_prompts) or None,
        "user_messages": content.user_messages or None,
        "system_events": content.system_events or None,
        "final_answer": content.final_answer,
        "final_metrics": doc.get("final_metrics") or None,
        "notes": doc.get("notes") or None,
        "copied_context_steps": content.copied_steps or None,
        "orphan_tool_results": content.orphans or None,
        "unanswered_tool_calls": content.unanswered or None,
    }
    return make_trajectory(
        record,
        domain=opts.get("domain") or AtifAdapter.default_domain,
        native_key=native or f"{record.uri}:{loc}",
        turns=content.turns,
        system=SystemPrompt(
            task_description=content.task or "",
            action_space=action_space_of(agent.get("tool_definitions"), loc),
            initial_state=initial_state,
            demonstrations=content.demonstrations,
        ),
        source_kind=opts.get("source_kind") or "public",
        split_key=split_key,
        meta={k: v for k, v in meta.items() if v is not None},
    )


class AtifAdapter:
    name = FORMAT
    description = "Harbor's Agent Trajectory Interchange Format (ATIF v1.x) trajectory documents"
    domains = DOMAINS
    default_domain = "terminal"
    line_records = True  # a .jsonl file may be read as byte ranges of whole lines
    options = {"orphans": "quarantine (default) or skip: what to do with a result whose call is missing"}
    check_options = staticmethod(orphans_policy)

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        if not isinstance(rec, dict):
            return 0.0
        version = rec.get("schema_version")
        if isinstance(version, str) and version.upper().startswith("ATIF"):
            return 0.95
        steps = rec.get("steps")
        if isinstance(steps, list) and steps and isinstance(steps[0], dict) and steps[0].get("source") in SOURCES:
            return 0.6  # ATIF-shaped steps without the version tag some converters forget
        return 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        if container_kind(unit.uri) != "jsonl":
            yield from records_from_container(unit, self.name, opts)
            return
        items = iter_container(unit.uri, max_record_bytes(opts))
        first = next(items, None)
        if first is None:
            return
        if isinstance(first, InvalidRecord) or not (isinstance(first[1], dict) and first[1].get("__header__") is True):
            # one trajectory document per line
            for item in itertools.chain([first], items):
                if isinstance(item, InvalidRecord):
                    yield item
                else:
                    yield RawRecord(unit.uri, item[0], self.name, json.dumps(item[1], ensure_ascii=False, default=str))
            return
        # streaming ATIF: a header line, then one step per line; the file is one document
        doc = {k: v for k, v in first[1].items() if k != "__header__"}
        doc["steps"] = []
        for item in items:
            if isinstance(item, InvalidRecord):
                yield item
            else:
                doc["steps"].append(item[1])
        yield RawRecord(unit.uri, "document", self.name, json.dumps(doc, ensure_ascii=False, default=str))

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        yield normalize_atif(record, opts)


def is_streaming_atif(uri: str) -> bool:
    """Whether a JSONL file is streaming ATIF (a ``__header__`` line, then steps): one document, never split."""
    try:
        head = read_head(uri, 4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    first = head.lstrip().split("\n", 1)[0]
    return bool(re.match(r'\{\s*"__header__"\s*:\s*true\b', first))


def _task_of(extra: Any) -> str | None:
    """The task id a document's ``extra`` names, if any (``task``, ``task_id``, ``task_name``: a string or a number)."""
    if not isinstance(extra, dict):
        return None
    for key in ("task", "task_id", "task_name"):
        value = extra.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return None


ADAPTER = AtifAdapter()
