"""Trajectory and turn filters (SPEC §6), run on every trajectory before the trajectories layer.

Each filter is a step ``step(traj, stats) -> Trajectory | None``. Turn strippers return a copy
without the stripped turns and count ``turns_stripped.<name>``; a stripper that leaves no turn
drops the trajectory (``filtered.<name>``). Drop filters return None after counting
``filtered.<name>``. They run in this order, whatever the order of ``filter.enabled``:

1. ``empty_action``: strip turns whose action is blank or an empty JSON value (``{}``, ``[]``,
   ``null``, ``""``). A terminal ``[{"keystrokes": ""}]`` is not empty: it waits and reads.
2. ``retry_cycle``: strip the failed half of a garbage action → error → retry pair. Turn t
   (never the last) is stripped when (a) its observation is a rejection (`REJECTION_MARKERS`:
   the harness or tool refused the action, so nothing ran; a program that ran and failed, with a traceback
   or an error message of its own, is the environment's behaviour and never one) and (b) turn t+1 retries it: the same
   tool (for shell tools the same `command_head`, or any command after ``command not found``), or
   turn t's action is the adapter's ``{"action": "invalid"}`` garbage marker, or turn t+1's
   observation equals the one before turn t (the state came back unchanged). Pairs are judged on
   the incoming turns, so a run of failed attempts before one success strips them all.
3. ``gui_no_change`` (android/web/os): strip turns whose observation equals the state before
   them (the previous observation, or ``initial_state`` for the first turn), compared after
   trimming outer whitespace. A final turn whose action ends the episode (`END_ACTIONS`) is kept:
   the end of an episode is an event a world model must predict even when the screen stays.
4. ``undeclared_tools`` (mcp/swe): drop trajectories that call a tool absent from the declared
   action space (`declared_tools`). No parseable declaration → kept, counted as
   ``filter_skipped.undeclared_tools_no_declaration``. For swe, shell tools (`SHELL_TOOLS`) are
   always allowed: SWE-agent turns every undocumented command into ``bash``.
5. ``gui_env_failure`` (android/web/os): drop trajectories with a missing state, a CAPTCHA page
   or an HTTP/browser error page (`env_failure_of` lists the exact markers).
6. ``min_turns``: drop trajectories with fewer than ``filter.min_turns`` turns, after stripping.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from schemas.errors import ConfigError
from schemas.stats import Stats
from schemas.trajectory import GUI_DOMAINS, Trajectory, Turn
from stages.ingest.reading import loads
from stages.literal_gates import Alternation, fold_text
from stages.memo import TextMemo
from stages.steps import trajectory_step

DEFAULT_MIN_TURNS = 2
TOOL_DECLARING_DOMAINS = ("mcp", "swe")
SHELL_TOOLS = frozenset({"bash", "execute_bash", "shell", "sh", "terminal", "run_command", "run_shell_command"})
END_ACTIONS = frozenset({"answer", "complete", "terminate", "finish", "done", "stop", "submit", "infeasible"})
INVALID_ACTION = "invalid"  # what the adapters name an action their harness could not parse

# Rejections: the environment refused or could not parse the action, so the state did not move.
REJECTIONS = Alternation("(?im)", (
    (r"^[ \t]*invalid action\b", "invalid action"),
    (r"\bformat error\b", "format error"),
    (r"\bcannot be exec\w*", "cannot be exec"),  # WebVoyager's harness misspells "executed"
    (r"\byour proposed edit has introduced new syntax error", "your proposed edit has introduced new syntax error"),
    (r"\bcommand not found\s*$", "command not found"),
    (r"\bunknown (?:command|tool|action)\b", "unknown "),
    (r"\binvalid (?:tool|arguments?|parameters?|json)\b", "invalid "),
    (r"\bvalidation errors? for\b", "validation error"),
    (r"\bjsondecodeerror\b", "jsondecodeerror"),
    (r"\b(?:failed to|could not|unable to) parse\b", " parse"),
))
REJECTION_MARKERS = REJECTIONS.pattern
COMMAND_NOT_FOUND = re.compile(r"(?im)\bcommand not found\s*$")

# Missing state: the whole observation is a placeholder (matched in full, so page text that
# merely mentions these words never counts).
MISSING_STATE = re.compile(
    r"(?i)\s*(?:null|none|n/a"
    r"|[\[(<]?\s*(?:missing|no|lost)\s+(?:state|observation|screen|screenshot|page)\s*[\])>]?"
    r"|[\[(<]?\s*(?:state|observation|screen|screenshot)\s+(?:missing|unavailable|not available|omitted)\s*[\])>]?"
    r"|(?:observation:\s*)?a screenshot and some texts\.\s*\(omitted in context\.\))\s*\.?\s*"
)
CAPTCHA = Alternation("(?i)", (
    (r"\b(?:re|h)?captcha\b", "captcha"),
    (r"\bverify (?:that )?you(?:'|’)?re human\b", "re human"),
    (r"\bverify you are (?:a )?human\b", "verify you are "),
    (r"\bi(?:'|’)?m not a robot\b", "m not a robot"),
    (r"\bi am not a robot\b", "i am not a robot"),
    (r"\bunusual traffic from your computer network\b", "unusual traffic from your computer network"),
))
CAPTCHA_PAGE = CAPTCHA.pattern
# HTTP status codes only together with their reason phrase, so a bare "404" in a list is fine.
_CODE = r"[ \t]*[-:–]?[ \t]*"
HTTP_ERRORS = Alternation("(?i)", (
    (rf"\b400{_CODE}bad request\b", "bad request"),
    (rf"\b401{_CODE}unauthorized\b", "unauthorized"),
    (rf"\b403{_CODE}forbidden\b", "forbidden"),
    (rf"\b404{_CODE}not found\b", "not found"),
    (rf"\b429{_CODE}too many requests\b", "too many requests"),
    (rf"\b500{_CODE}internal server error\b", "internal server error"),
    (rf"\b502{_CODE}bad gateway\b", "bad gateway"),
    (rf"\b503{_CODE}service (?:temporarily )?unavailable\b", "unavailable"),
    (rf"\b504{_CODE}gateway time-?out\b", "gateway time"),
    (r"this site can(?:'|’)?t be reached", "t be reached"),
    (r"we(?:'|’)?re having trouble finding that site", "re having trouble finding that site"),
    # Chrome's network error codes only (case-sensitive): Node's ERR_INVALID_ARG_TYPE is page text.
    (r"(?-i:\bERR_(?:CONNECTION|NAME_NOT_RESOLVED|INTERNET_DISCONNECTED|TIMED_OUT|ADDRESS_UNREACHABLE"
     r"|NETWORK_CHANGED|EMPTY_RESPONSE|TOO_MANY_REDIRECTS|SSL_PROTOCOL_ERROR|CERT_)\w*)", "err_"),
))
HTTP_ERROR_PAGE = HTTP_ERRORS.pattern


# ---------------------------------------------------------------- reading actions


def parse_action(action: str) -> Any:
    """The action as a JSON value, or the text itself when it is not JSON."""
    try:
        return loads(action)  # json.loads's value or exception, through msgspec where it can tell
    except (json.JSONDecodeError, RecursionError):
        return action


def _call_name(call: Any) -> str | None:
    if not isinstance(call, dict):
        return None
    function = call.get("function")
    for name in (call.get("name"), function.get("name") if isinstance(function, dict) else function, call.get("tool")):
        if isinstance(name, str) and name:
            return name
    return None


def called_tools(action: str) -> list[str]:
    """Tool names an action calls: its ``name`` (or ``function``/``tool``); several for a list."""
    value = parse_action(action)
    calls = value if isinstance(value, list) else [value]
    return [name for name in map(_call_name, calls) if name]


def _shell_command(value: Any) -> str | None:
    if isinstance(value, list) and value and isinstance(value[0], dict) and "keystrokes" in value[0]:
        return str(value[0]["keystrokes"])
    if isinstance(value, dict) and _call_name(value) in SHELL_TOOLS:
        args = value.get("arguments")
        args = parse_action(args) if isinstance(args, str) else args
        command = args.get("command") if isinstance(args, dict) else args
        return command if isinstance(command, str) else ""
    return None


_CHAIN = re.compile(r"&&|\|\||;|\n")


def command_head(command: str) -> str:
    """The program and its first argument, skipping ``cd`` steps of a chain.

    ``cd /repo && python run.py -v`` → ``python run.py``: two words, so that re-running the
    same script counts as a retry while a different command with the same interpreter does not.
    """
    steps = [step.split() for step in _CHAIN.split(command)]
    steps = [words for words in steps if words and words[0] != "cd"]
    return " ".join(steps[0][:2]) if steps else ""


def action_kind(action: str) -> tuple[str, str]:
    """(tool, command head) of an action; the head is '' for anything but a shell command."""
    value = parse_action(action)
    command = _shell_command(value)
    if command is not None:
        return "shell", command_head(command)
    if isinstance(value, dict):
        for key in ("action", "action_type"):
            if isinstance(value.get(key), str):
                return value[key], ""
    names = called_tools(action)
    if names:
        return ",".join(names), ""
    words = action.split()
    return (words[0] if words else ""), ""


# ---------------------------------------------------------------- declared tools


_DOC_BLOCK_NAME = re.compile(r"(?m)^([A-Za-z_][\w.-]*):[ \t]*\n[ \t]+(?:docstring|signature):")
_BARE_NAME = re.compile(r"[A-Za-z_][\w.-]*")


def declared_tools(action_space: str) -> frozenset[str] | None:
    """Tool names declared by an action space; None when it declares none we can read.

    Accepted: a JSON list of tool objects (``name`` or ``function.name``) or of names, or an
    object holding such a list under ``tools``/``functions``; SWE-agent's ``COMMANDS:`` text
    (``name:`` lines followed by an indented ``docstring:``/``signature:``); text whose every
    non-empty line is one name (``- name`` bullets allowed). Anything else is prose, which we do
    not mine for names: a wrong guess would drop good runs.
    """
    text = action_space.strip()
    if not text:
        return None
    value = parse_action(text)
    if isinstance(value, dict):
        value = [value] if _call_name(value) else value.get("tools", value.get("functions"))
    if isinstance(value, list):
        names = {item if isinstance(item, str) else _call_name(item) for item in value}
        return frozenset(name for name in names if name) or None
    if not isinstance(value, str):
        return None
    documented = _DOC_BLOCK_NAME.findall(text)
    if documented:
        return frozenset(documented)
    lines = [line.strip().removeprefix("- ").strip() for line in text.splitlines() if line.strip()]
    if all(_BARE_NAME.fullmatch(line) for line in lines):
        return frozenset(lines)
    return None


def judge_undeclared_tools(traj: Trajectory) -> bool | Skipped:
    """True when an mcp/swe trajectory calls a tool its action space does not declare."""
    if traj.domain not in TOOL_DECLARING_DOMAINS:
        return False
    declared = declared_tools(traj.system.action_space)
    if declared is None:
        return Skipped("no_declaration")
    allowed = declared | SHELL_TOOLS if traj.domain == "swe" else declared
    return any(name not in allowed for turn in traj.turns for name in called_tools(turn.action))


# ---------------------------------------------------------------- GUI environment failures


def env_failure_of(traj: Trajectory) -> str | None:
    """Why a GUI trajectory shows an environment failure (``missing_state``, ``captcha``,
    ``http_error``), or None.

    Missing state: a blank observation on a non-final turn (a final answer legitimately shows
    nothing), or an observation / initial_state that is entirely a placeholder (`MISSING_STATE`).
    CAPTCHA (`CAPTCHA_PAGE`): captcha / recaptcha / hcaptcha as a word, "verify you are human",
    "I'm not a robot", Google's "unusual traffic from your computer network". HTTP error pages
    (`HTTP_ERROR_PAGE`): a 4xx/5xx code followed by its reason phrase ("404 Not Found",
    "502 Bad Gateway", "503 Service Unavailable", …), Chrome's "This site can’t be reached" and
    its network ``ERR_CONNECTION_…``-style codes, Firefox's "We’re having trouble finding that site".
    """
    return _env_failure(traj, state_failure)


def state_failure(text: str) -> str:
    """The environment failure one non-blank GUI state shows by itself (see `env_failure_of`), or ``""``."""
    if MISSING_STATE.fullmatch(text):
        return "missing_state"
    folded = fold_text(text)
    if CAPTCHA.found(text, folded):
        return "captcha"
    if HTTP_ERRORS.found(text, folded):
        return "http_error"
    return ""


def _env_failure(traj: Trajectory, failure: Callable[[str], str]) -> str | None:
    last = len(traj.turns) - 1
    states = [(traj.system.initial_state, False)] + [(t.observation, i == last) for i, t in enumerate(traj.turns)]
    for text, final in states:
        if text is None:
            continue
        if not text or text.isspace():  # blank (what ``not text.strip()`` tells, without the copy)
            if not final:
                return "missing_state"
            continue
        why = failure(text)
        if why:
            return why
    return None


def judge_gui_env_failure(traj: Trajectory, failure: Callable[[str], str] = state_failure) -> bool:
    """True for a GUI trajectory with an environment failure (see `env_failure_of`). `failure`: `state_failure`
    or a function equal to it (a memo of it: GUI states repeat, an unchanged screen or a shared start page)."""
    return traj.domain in GUI_DOMAINS and _env_failure(traj, failure) is not None


# ---------------------------------------------------------------- turn strippers


def _states_before(traj: Trajectory) -> Iterator[str | None]:
    yield traj.system.initial_state
    for turn in traj.turns[:-1]:
        yield turn.observation


def empty_action_marks(traj: Trajectory) -> list[bool]:
    """True for each turn whose action is blank or an empty JSON value."""
    return [not turn.action.strip() or parse_action(turn.action) in (None, {}, [], "") for turn in traj.turns]


def is_rejection(observation: str) -> bool:
    """Whether a tool output rejects the action (see the module docstring, step 2)."""
    if REJECTIONS.found(observation):
        return True
    text = observation.strip()
    value = parse_action(text) if text.startswith("{") else None
    if not isinstance(value, dict):
        return False
    # A tool's JSON error payload: {"error": ...} with no result beside it, or MCP's isError.
    return (bool(value.get("error")) and "result" not in value) or value.get("isError") is True


def _is_retry(failed: Turn, retry: Turn) -> bool:
    (tool, program), (next_tool, next_program) = action_kind(failed.action), action_kind(retry.action)
    if tool == INVALID_ACTION:
        return True
    if tool != next_tool:
        return False
    return tool != "shell" or program == next_program or bool(COMMAND_NOT_FOUND.search(failed.observation))


def retry_cycle_marks(traj: Trajectory, rejection: Callable[[str], bool] = is_rejection) -> list[bool]:
    """True for each failed attempt of a retry cycle (see the module docstring, step 2). `rejection`:
    `is_rejection` or a function equal to it (a memo of it: the same error comes back in many trajectories)."""
    turns = traj.turns
    before = list(_states_before(traj))
    marks = [False] * len(turns)
    for t in range(len(turns) - 1):
        if not rejection(turns[t].observation):
            continue
        # An empty earlier state says nothing about the state coming back, so it never matches.
        earlier = (before[t] or "").strip()
        state_unchanged = bool(earlier) and turns[t + 1].observation.strip() == earlier
        marks[t] = state_unchanged or _is_retry(turns[t], turns[t + 1])
    return marks


def _ends_episode(action: str) -> bool:
    return action_kind(action)[0] in END_ACTIONS


def gui_no_change_marks(traj: Trajectory) -> list[bool]:
    """True for each GUI turn whose observation equals the state before it (final end action kept)."""
    if traj.domain not in GUI_DOMAINS:
        return [False] * len(traj.turns)
    last = len(traj.turns) - 1
    return [
        before is not None
        and turn.observation.strip() == before.strip()
        and not (i == last and _ends_episode(turn.action))
        for i, (turn, before) in enumerate(zip(traj.turns, _states_before(traj), strict=True))
    ]


# ---------------------------------------------------------------- steps


@dataclass(frozen=True)
class Skipped:
    """A drop filter that does not apply to this trajectory, and why (counted, never silent)."""

    why: str


@dataclass(frozen=True)
class DropFilter:
    """Drops a trajectory when `judge` returns True, counting ``filtered.<name>``."""

    name: str
    judge: Callable[[Trajectory], bool | Skipped]

    def __call__(self, traj: Trajectory, stats: Stats) -> Trajectory | None:
        verdict = self.judge(traj)
        if isinstance(verdict, Skipped):
            stats.add(f"filter_skipped.{self.name}_{verdict.why}")
            return traj
        if verdict:
            stats.add(f"filtered.{self.name}")
            return None
        return traj


@dataclass(frozen=True)
class TurnStripper:
    """Removes the turns `marks` flags, counting ``turns_stripped.<name>``; no turn left → drop."""

    name: str
    marks: Callable[[Trajectory], list[bool]]

    def __call__(self, traj: Trajectory, stats: Stats) -> Trajectory | None:
        flags = self.marks(traj)
        stripped = sum(flags)
        if not stripped:
            return traj
        stats.add(f"turns_stripped.{self.name}", stripped)
        kept = [turn for turn, flag in zip(traj.turns, flags, strict=True) if not flag]
        if not kept:
            stats.add(f"filtered.{self.name}")
            return None
        return dataclasses.replace(traj, turns=kept)


def has_too_few_turns(traj: Trajectory, min_turns: int) -> bool:
    """True when the trajectory has fewer than `min_turns` turns."""
    return len(traj.turns) < min_turns


@trajectory_step("filter", section="filter", order=10)
def build_filters(cfg: dict[str, Any]) -> list[Callable[[Trajectory, Stats], Trajectory | None]]:
    """The enabled filters of ``cfg["filter"]`` in SPEC order; unknown names → `ConfigError`."""
    section = cfg.get("filter") or {}
    enabled = section.get("enabled", list(FILTER_ORDER))
    if isinstance(enabled, str) or not all(isinstance(name, str) for name in enabled):
        raise ConfigError("filter.enabled must be a list of filter names")
    unknown = sorted(set(enabled) - set(FILTER_ORDER))
    if unknown:
        raise ConfigError(f"filter.enabled: unknown filter(s) {', '.join(unknown)} (known: {', '.join(FILTER_ORDER)})")
    min_turns = section.get("min_turns", DEFAULT_MIN_TURNS)
    if isinstance(min_turns, bool) or not isinstance(min_turns, int) or min_turns < 0:
        raise ConfigError(f"filter.min_turns must be a non-negative integer, got {min_turns!r}")
    return [FILTERS[name](min_turns) for name in FILTER_ORDER if name in enabled]


def _text_memo(fn: Callable[[str], Any]) -> TextMemo:
    """`fn` of a text, each distinct text answered once while kept: the filters are built per ingest task, and
    a task's observations repeat (about 40% of the characters of a 2 GB demo run's part)."""
    return TextMemo(fn, 4 << 20, 1 << 16, cost=lambda _: 0)


# Every filter in SPEC order: name → its step (a turn stripper, then drop filters). Adding a filter is
# its judge or marks function and one line here; the default ``filter.enabled`` lists every filter here.
FILTERS: dict[str, Callable[[int], Callable[[Trajectory, Stats], Trajectory | None]]] = {
    "empty_action": lambda _: TurnStripper("empty_action", empty_action_marks),
    "retry_cycle": lambda _: TurnStripper("retry_cycle", partial(retry_cycle_marks, rejection=_text_memo(is_rejection))),
    "gui_no_change": lambda _: TurnStripper("gui_no_change", gui_no_change_marks),
    "undeclared_tools": lambda _: DropFilter("undeclared_tools", judge_undeclared_tools),
    "gui_env_failure": lambda _: DropFilter("gui_env_failure", partial(judge_gui_env_failure,
                                                                        failure=_text_memo(state_failure))),
    "min_turns": lambda min_turns: DropFilter("min_turns", partial(has_too_few_turns, min_turns=min_turns)),
}
FILTER_ORDER = tuple(FILTERS)
