"""``agentworldbench``: AgentWorldBench evaluation rows, rebuilt into the trajectories they were cut from.

Native record (one JSONL row of the official layout, abridged)::

    {"task": "terminal", "id": "t7-2", "system_str": "You simulate a Linux terminal...", "turn_idx": 2, "total_turns": 3,
     "prompt": ["### Turn 1\\n**Current State:**\\n$ \\n\\n**Action:**\\n```json\\n[...]\\n```", "### Turn 2\\n...```\\n\\nThink...",
                "### Turn 3\\n..."],
     "response": ["**Environment Observation:**\\na b", "...", "..."], "current_prompt": "### Turn 2\\n...```"}

A row asks for one turn of a trajectory. In the official layout (the evaluator's ``eval.py``) ``prompt``
and ``response`` hold every turn of the trajectory as strings: the user turn prompts (the evaluated
one may end with an instruction to answer inside ``<predicted_observation>``, others may too) and the
ground-truth observations (bare, after an ``**Environment Observation:**`` marker, or wrapped in
``<predicted_observation>``); ``current_prompt`` is the evaluated turn's prompt, with or without that
instruction, and must be the same turn as ``prompt[turn_idx - 1]``. The older layout is read too:
``prompt`` the history only (user turn prompts and assistant ``**Environment Observation:**`` messages, as
``{role, content}`` objects or plain alternating strings, user first), ``response`` the one reference. A
turn prompt is ``### Turn N``, then on the first turn optional ``**Task Instruction:**`` and
``**Current State:**`` sections (in that order), then ``**Action:**`` and a fenced json block; text after
the block is ignored.

Grouping: rows of one trajectory repeat its history, so they are grouped by (``system_str``, the parsed first
turn: action, state and instruction) and, inside a group, a row whose turns agree with a longer row's
(same actions, same observations up to surrounding whitespace) is absorbed by it; rows that disagree stay
separate trajectories, so two runs that merely start alike are never merged. Grouping holds one file's
rows in memory (evaluation files are small).

Mapping to the unified schema: turns = every turn of the longest row (an official row holds them all; an
older-layout row its history plus its evaluated turn); every turn some row evaluated has
``meta.evaluated``. initial_state = the first turn's current state; task_description = its task
instruction ('' when absent); the row's ``system_str`` is the world-model prompt it was evaluated with, so
it becomes ``simulation_instruction`` — without the ``## Task`` / ``## Initial state`` sections a template
appended for those two fields, when it ends with exactly them (`simulation_instruction_of`).
The domain comes from ``task`` when it names one (``opts["domain"]`` wins); traj_id from the longest
row's id and turn; ``meta`` keeps task, row ids and ``total_turns`` (a rebuilt trajectory can be shorter).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import DOMAINS, SystemPrompt, Trajectory, Turn
from stages.ingest.common import make_trajectory
from stages.ingest.reading import InputUnit, iter_container, max_record_bytes
from stages.ingest.registry import Probe, RawRecord
from stages.templates import implied_action_space
from stages.templates.fill import FIELD_HEADINGS

FORMAT = "agentworldbench"
ROW_FIELDS = {
    "task": str,
    "id": (str, int),
    "prompt": list,
    "response": list,
    "current_prompt": str,
    "system_str": str,
    "turn_idx": int,
    "total_turns": int,
}
ACTION_MARK = "**Action:**\n```json\n"
OBSERVATION_MARKER = "**Environment Observation:**"
OBSERVATION_PREFIX = OBSERVATION_MARKER + "\n"
OPEN_TAG, CLOSE_TAG = "<predicted_observation>", "</predicted_observation>"
_HEADER = re.compile(r"### Turn (\d+)\n")
_SECTIONS = ("Task Instruction", "Current State")
# Task names that say their domain without naming it.
_DOMAIN_ALIASES = {
    "shell": "terminal",
    "bash": "terminal",
    "browser": "web",
    "mobile": "android",
    "phone": "android",
    "desktop": "os",
    "computer": "os",
    "tool": "mcp",
    "tools": "mcp",
}


def _sections(body: str) -> dict[str, str]:
    """The first-turn sections between the turn header and the action block."""
    starts = {}
    for name in _SECTIONS:
        head = f"**{name}:**\n"
        pos = body.find(head)
        while pos > 0 and body[pos - 2 : pos] != "\n\n":
            pos = body.find(head, pos + 1)
        if pos >= 0:
            starts[name] = (pos, pos + len(head))
    if body and (not starts or min(s for s, _ in starts.values()) != 0):
        raise InvalidRecord("malformed_turn_prompt", "unexpected text between the turn header and the action")
    order = sorted(starts.items(), key=lambda kv: kv[1][0])
    out = {}
    for k, (name, (_, content_start)) in enumerate(order):
        end = order[k + 1][1][0] - 2 if k + 1 < len(order) else len(body)
        text = body[content_start:end]
        out[name] = text[:-2] if k + 1 == len(order) and text.endswith("\n\n") else text
    return out


def parse_turn_prompt(text: str) -> tuple[int, str, str | None, str | None]:
    """``(turn_number, action, current_state, task_instruction)`` of a rendered user turn prompt.

    The inverse of the turn rendering of SPEC §7; anything after the action block (the prediction
    instruction of an evaluated turn) is ignored. Raises `InvalidRecord` (``malformed_turn_prompt``).
    """
    header = _HEADER.match(text)
    if header is None:
        raise InvalidRecord("malformed_turn_prompt", "a turn prompt starts with '### Turn N'")
    # The last marker is the real one: a current state may itself show such text, the action cannot
    # (compact JSON has no raw newline).
    mark = text.rfind(ACTION_MARK)
    if mark < header.end():
        raise InvalidRecord("malformed_turn_prompt", "no '**Action:**' json block")
    start = mark + len(ACTION_MARK)
    end = text.find("\n```", start - 1)
    if end < 0:
        raise InvalidRecord("malformed_turn_prompt", "the action's json block is not closed")
    sections = _sections(text[header.end() : mark])
    action = text[start:end] if end >= start else ""
    return int(header.group(1)), action, sections.get("Current State"), sections.get("Task Instruction")


def observation_of_history(text: str) -> str:
    """The observation of an assistant history message (``**Environment Observation:**\\n...``)."""
    if not text.startswith(OBSERVATION_PREFIX):
        raise InvalidRecord("malformed_observation", "a history answer starts with '**Environment Observation:**'")
    return text[len(OBSERVATION_PREFIX) :]


def official_observation(text: str) -> str:
    """The observation of an official ``response`` entry: the ``**Environment Observation:**`` marker (and the
    line break after it) removed when present, ``<predicted_observation>`` tags unwrapped when present."""
    if text.startswith(OBSERVATION_MARKER):
        text = text[len(OBSERVATION_MARKER) :]
        return text[1:] if text.startswith("\n") else text
    return reference_observation(text)


def reference_observation(text: str) -> str:
    """The reference observation of a response, unwrapped from ``<predicted_observation>`` when wrapped."""
    close = text.rfind(CLOSE_TAG)
    open_ = text.rfind(OPEN_TAG, 0, close) if close >= 0 else -1
    if open_ < 0:
        return text
    inner = text[open_ + len(OPEN_TAG) : close]
    inner = inner[1:] if inner.startswith("\n") else inner
    return inner[:-1] if inner.endswith("\n") else inner


def _content(message: Any, role: str, where: str) -> str:
    if isinstance(message, str):
        return message
    if isinstance(message, dict) and message.get("role") == role and isinstance(message.get("content"), str):
        return message["content"]
    raise InvalidRecord("malformed_message", f"{where}: expected a {role} message")


@dataclass
class ParsedRow:
    """One row as a chain of turns 1..turn_idx (the last one's observation is the reference)."""

    locator: str
    row_id: str
    task: str
    system_str: str
    turn_idx: int
    total_turns: int
    turns: list[tuple[str, str]]  # (action, observation): turns 1..turn_idx, or every turn of an official row
    state: str | None
    instruction: str | None

    def group_key(self) -> str:
        first = json.dumps([self.system_str, self.turns[0][0], self.state, self.instruction])
        return hashlib.sha256(first.encode()).hexdigest()


def _history(row: dict) -> list[str]:
    """The prompt list as plain alternating texts, user first, without a system or current message."""
    messages = list(row["prompt"])
    first = messages[0] if messages else None
    if (isinstance(first, dict) and first.get("role") == "system") or (
        first is not None and first == row["system_str"]
    ):
        messages = messages[1:]
    if len(messages) % 2 == 1:  # the list may end with the current prompt itself
        last = messages[-1]
        if _content(last, "user", f"prompt item {len(messages) - 1}") != row["current_prompt"]:
            raise InvalidRecord("malformed_message", "the history ends with a user message that is not current_prompt")
        messages = messages[:-1]
    return [_content(m, "user" if i % 2 == 0 else "assistant", f"prompt item {i}") for i, m in enumerate(messages)]


def is_official(row: dict) -> bool:
    """Whether a row has the official layout: ``prompt`` and ``response`` hold every turn, as strings."""
    prompts, responses = row["prompt"], row["response"]
    return (
        len(prompts) == len(responses) >= row["turn_idx"] >= 1
        and all(isinstance(p, str) for p in prompts)
        and all(isinstance(r, str) for r in responses)
    )


def _official_turns(row: dict) -> tuple[list[tuple[str, str]], str | None, str | None, int]:
    """Every turn of an official row, the first turn's state and instruction, and the current prompt's number."""
    turns = []
    state = instruction = None
    for k, (prompt, response) in enumerate(zip(row["prompt"], row["response"])):
        number, action, s, i = parse_turn_prompt(prompt)
        if number != k + 1:
            raise InvalidRecord("turn_mismatch", f"prompt entry {k + 1} is labelled turn {number}")
        if k == 0:
            state, instruction = s, i
        turns.append((action, official_observation(response)))
    number, action, s, i = parse_turn_prompt(row["current_prompt"])
    t = row["turn_idx"]
    if (number, action) != (t, turns[t - 1][0]) or (t == 1 and (s, i) != (state, instruction)):
        raise InvalidRecord("turn_mismatch", f"current_prompt is not prompt entry {t} (turn_idx)")
    return turns, state, instruction, number


def parse_row(row: Any, locator: str) -> ParsedRow:
    """Check one row's fields and parse its turns; raises `InvalidRecord` with the row's locator."""
    if not isinstance(row, dict):
        raise InvalidRecord("wrong_type", f"a row must be an object, not {type(row).__name__}", locator)
    for name, kind in ROW_FIELDS.items():
        if name not in row:
            raise InvalidRecord("missing_field", f"no {name!r} field", locator)
        if not isinstance(row[name], kind) or isinstance(row[name], bool):
            raise InvalidRecord("wrong_type", f"{name!r} has type {type(row[name]).__name__}", locator)
    try:
        if is_official(row):
            turns, state, instruction, number = _official_turns(row)
            if row["turn_idx"] > row["total_turns"] or len(turns) > row["total_turns"]:
                raise InvalidRecord("turn_mismatch", f"turn_idx {row['turn_idx']} and {len(turns)} turns, "
                                    f"but total_turns {row['total_turns']}")
            return ParsedRow(locator, str(row["id"]), row["task"], row["system_str"], row["turn_idx"],
                             row["total_turns"], turns, state, instruction)
        history = _history(row)
        turns = []
        state = instruction = None
        for k in range(0, len(history), 2):
            number, action, s, i = parse_turn_prompt(history[k])
            if number != k // 2 + 1:
                raise InvalidRecord("turn_mismatch", f"history prompt {k // 2 + 1} is labelled turn {number}")
            if k == 0:
                state, instruction = s, i
            turns.append((action, observation_of_history(history[k + 1])))
        number, action, s, i = parse_turn_prompt(row["current_prompt"])
        if not turns:
            state, instruction = s, i
        if not row["response"]:
            raise InvalidRecord("missing_field", "response is empty")
        turns.append((action, reference_observation(_content(row["response"][0], "assistant", "response"))))
    except InvalidRecord as exc:
        raise InvalidRecord(exc.reason, exc.detail, locator) from None
    if number != row["turn_idx"] or len(turns) != row["turn_idx"] or row["turn_idx"] > row["total_turns"]:
        raise InvalidRecord(
            "turn_mismatch",
            f"turn_idx {row['turn_idx']} of {row['total_turns']}, but the current prompt is turn {number} after {len(turns) - 1} history turns",
            locator,
        )
    return ParsedRow(
        locator,
        str(row["id"]),
        row["task"],
        row["system_str"],
        row["turn_idx"],
        row["total_turns"],
        turns,
        state,
        instruction,
    )


def _agrees(short: list[tuple[str, str]], long: list[tuple[str, str]]) -> bool:
    return len(short) <= len(long) and all(a == b and o.strip() == p.strip() for (a, o), (b, p) in zip(short, long))


def chains_of(rows: list[ParsedRow]) -> list[list[ParsedRow]]:
    """Rows of one group split into trajectories: each list starts with its longest row."""
    chains: list[list[ParsedRow]] = []
    for row in sorted(rows, key=lambda r: -len(r.turns)):  # stable: equal lengths keep file order
        home = next((c for c in chains if _agrees(row.turns, c[0].turns)), None)
        if home is None:
            chains.append([row])
        else:
            home.append(row)
    return chains


def domain_of_task(task: str) -> str | None:
    """The domain a task name states (``terminal``, ``web_shopping``, ``GUI-android`` ...), or None."""
    for word in re.split(r"[^a-z]+", task.lower()):
        if word in DOMAINS:
            return word
        if word in _DOMAIN_ALIASES:
            return _DOMAIN_ALIASES[word]
    return None


def simulation_instruction_of(system_str: str, instruction: str | None, state: str | None, action_space: str = "") -> str:
    """The system prompt without the sections a template appends for the first turn's fields.

    A template that does not mention the task or the initial state appends them at the end (``## Task`` /
    ``## Initial state``, stages/templates); those fields are rebuilt from the first turn prompt, so the
    copy in the system prompt is dropped — otherwise every export → ingest would append them once more.
    The same holds for the domain's fixed action space (`stages.templates.implied_action_space`), which
    rendering adds again; a tail without it (a template that places it, an older export) goes too. Only an
    exact tail of that form is removed."""
    for space in dict.fromkeys((action_space, "")):
        tail = "".join(f"\n\n## {FIELD_HEADINGS[name]}\n{value}" for name, value in
                       (("task_description", instruction), ("action_space", space), ("initial_state", state))
                       if value and value.strip())
        if tail and system_str.endswith(tail) and len(system_str) > len(tail):
            return system_str[: -len(tail)]
    return system_str


def trajectory_of_chain(record: RawRecord, chain: list[ParsedRow], opts: dict[str, Any]) -> Trajectory:
    """A trajectory from rows that agree, the longest first."""
    longest = chain[0]
    evaluated = {r.turn_idx for r in chain}
    turns = [
        Turn(action=a, observation=o, meta=json.dumps({"evaluated": True}) if n in evaluated else None)
        for n, (a, o) in enumerate(longest.turns, 1)
    ]
    domain = opts.get("domain") or domain_of_task(longest.task) or AgentWorldBenchAdapter.default_domain
    meta = {
        "task": longest.task,
        "row_ids": [r.row_id for r in chain],
        "rows": [r.locator for r in chain],
        "total_turns": longest.total_turns,
    }
    return make_trajectory(
        replace(record, locator=", ".join(r.locator for r in chain)),
        domain=domain,
        native_key=f"{longest.row_id}#{longest.turn_idx}",
        turns=turns,
        system=SystemPrompt(
            task_description=longest.instruction or "",
            action_space="",
            initial_state=longest.state,
            simulation_instruction=simulation_instruction_of(
                longest.system_str, longest.instruction, longest.state,
                implied_action_space(domain, [t.action for t in turns])),
        ),
        source_kind=opts.get("source_kind") or "public",
        meta=meta,
    )


class AgentWorldBenchAdapter:
    name = FORMAT
    description = "AgentWorldBench evaluation rows (JSONL), regrouped into whole trajectories"
    domains = DOMAINS
    default_domain = "mcp"
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        if isinstance(rec, dict) and {"prompt", "response", "current_prompt", "system_str"} <= rec.keys():
            return 0.95
        return 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        """One raw record per group of rows (see the module docstring); bad rows come out on their own."""
        groups: dict[str, list[tuple[str, Any]]] = {}
        for item in iter_container(unit.uri, max_record_bytes(opts)):
            if isinstance(item, InvalidRecord):
                yield item
                continue
            locator, row = item
            try:
                key = parse_row(row, locator).group_key()
            except InvalidRecord as exc:
                exc.uri = unit.uri
                yield exc
                continue
            groups.setdefault(key, []).append((locator, row))
        for members in groups.values():
            payload = json.dumps([{"locator": loc, "row": row} for loc, row in members], ensure_ascii=False)
            yield RawRecord(unit.uri, ", ".join(loc for loc, _ in members), self.name, payload, rows=len(members))

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        members = record.value()
        if not isinstance(members, list):
            raise InvalidRecord("wrong_type", "a record is a list of rows", record.locator)
        rows = [parse_row(m.get("row"), m.get("locator") or record.locator) for m in members]
        for chain in chains_of(rows):
            yield trajectory_of_chain(record, chain, opts)


ADAPTER = AgentWorldBenchAdapter()
