"""``uiautomator``: Android screens as uiautomator/Appium XML dumps, stitched by a JSONL action log.

The log is a file named ``*.actions.jsonl`` (or ``actions.jsonl``), one line per step::

    {"episode": "ep-0001", "step": 1, "task": "Turn on Wi-Fi", "app": "com.android.settings",
     "before": "ep-0001/000.xml", "action": {"action_type": "click", "x": 540, "y": 1200}, "dump": "ep-0001/001.xml"}

Contract: ``dump`` (the screen after the action, a path relative to the log file) is required on
every line; ``before`` (the screen the action was taken on) is required on the first step of an
episode — it is the initial state — and optional afterwards (the previous ``dump`` is used);
``task``, ``app`` and ``task_id`` are optional, the first non-empty value of an episode wins.
Lines of one episode form one trajectory, ordered by ``step``. Action types: click, long_press
(``x``, ``y``), type (``text``), swipe/scroll (``direction`` or ``x1, y1, x2, y2``), back, home,
enter, open_app (``app``), wait, complete/terminate (optional ``status``).

Mapping: ``turns[i].action`` = the action object as canonical JSON; for click and long_press
whose point falls inside an element of the before-screen, ``"element": <index>`` is appended —
the index, in the before-screen's rendering, of the smallest element containing the point.
``turns[i].observation`` = the rendering of ``dump`` (`stages.ingest.android_render`);
``system.initial_state`` = the rendering of the first ``before``; ``system.task_description`` =
``task``; ``split_key`` = ``task_id``, else ``task``, so repeats of a task share a pool; the
outcome comes from a final complete (success unless its status says otherwise) or terminate.
The trajectory id hashes the episode's content, so a log ingests to the same ids wherever it lies.

Units: a log file; a directory holding a log at its top level (one session: the screens beside
the log are not separate inputs); a bare XML screen is reported as ``no_actions`` and counted
as filtered (``filtered.no_turns``): one screen without actions is not a trajectory. A referenced
screen file that does not exist →
``missing_state``; a path that leaves the log's directory → ``bad_path``.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Iterator
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import Outcome, Trajectory, Turn
from stages.ingest.android_render import (
    RenderedScreen,
    android_system_prompt,
    looks_like_view_xml,
    render_view_xml,
)
from stages.ingest.common import canonical_json, make_trajectory
from stages.ingest.reading import (
    InputUnit,
    container_of,
    filesystem,
    iter_jsonl,
    join_uri,
    max_record_bytes,
    read_document,
)
from stages.ingest.registry import Probe, RawRecord

LOG_SUFFIX = ".actions.jsonl"
POINT_ACTIONS = ("click", "long_press")
KEY_ACTIONS = ("back", "home", "enter", "wait")
END_ACTIONS = ("complete", "terminate")
DIRECTIONS = ("up", "down", "left", "right")
_FAILED_STATUSES = frozenset({"failed", "failure", "infeasible", "impossible", "unsuccessful", "error"})


def is_action_log(name: str) -> bool:
    """Whether a file name follows the action-log naming rule."""
    base = posixpath.basename(name.rstrip("/"))
    return base == "actions.jsonl" or base.endswith(LOG_SUFFIX)


def action_logs_in(dir_uri: str) -> list[str]:
    """Action logs at the top level of a directory, sorted."""
    fs, path = filesystem(dir_uri)
    try:
        entries = fs.ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    names = [posixpath.basename(e["name"].rstrip("/")) for e in entries if e["type"] == "file"]
    return [join_uri(dir_uri, n) for n in sorted(names) if is_action_log(n)]


class UiautomatorAdapter:
    name = "uiautomator"
    description = "Android uiautomator/Appium XML screens stitched by a *.actions.jsonl step log"
    domains = ("android",)
    default_domain = "android"
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        if probe.container == "dir":
            return 0.95 if action_logs_in(probe.uri) else 0.0
        if probe.container == "xml":
            return 0.95 if looks_like_view_xml(probe.head) else 0.0
        rec = probe.first_record
        if probe.container == "jsonl" and isinstance(rec, dict) and "action" in rec and "dump" in rec:
            return 0.95
        return 0.0

    def claims_dir(self, uri: str) -> bool:
        return bool(action_logs_in(uri))

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        max_bytes = max_record_bytes(opts)
        if unit.is_dir:
            for log in action_logs_in(unit.uri):
                yield from self._read_log(log, max_bytes)
        elif container_of(unit.uri) == "xml":
            yield InvalidRecord(
                "no_actions", "a single screen without an action log is not a trajectory", "document", unit.uri
            )
        else:
            yield from self._read_log(unit.uri, max_bytes)

    def _read_log(self, log_uri: str, max_bytes: int) -> Iterator[RawRecord | InvalidRecord]:
        episodes: dict[str, list[dict[str, Any]]] = {}
        for item in iter_jsonl(log_uri, max_bytes):
            if isinstance(item, InvalidRecord):
                yield item
                continue
            locator, value = item
            if not isinstance(value, dict) or not isinstance(value.get("episode"), str | int):
                yield InvalidRecord("missing_field", "a step line needs an 'episode' id", locator, log_uri)
                continue
            episodes.setdefault(str(value["episode"]), []).append({"line": locator, "value": value})
        base = posixpath.dirname(log_uri)
        for episode, lines in episodes.items():
            payload = {"episode": episode, "lines": lines, **_load_screens(base, lines, max_bytes)}
            locator = f"episode {episode} ({lines[0]['line']})"
            yield RawRecord(log_uri, locator, self.name, json.dumps(payload, ensure_ascii=False))

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        payload = record.value()
        loc = record.locator
        steps = _ordered_steps(payload["lines"], loc)
        screens = _ScreenCache(payload)
        first = steps[0]
        if not isinstance(first.get("before"), str) or not first["before"]:
            raise InvalidRecord("missing_field", "the first step has no 'before' screen (the initial state)", loc)
        initial = screens.render(first["before"], loc)
        previous = initial
        turns = []
        for step in steps:
            step_loc = f"{loc} step {step['step']}"
            if not isinstance(step.get("dump"), str) or not step["dump"]:
                raise InvalidRecord("missing_field", "a step has no 'dump' (the screen after the action)", step_loc)
            before = screens.render(step["before"], step_loc) if step.get("before") else previous
            action = canonical_action(step.get("action"), before, step_loc)
            after = screens.render(step["dump"], step_loc)
            turns.append(Turn(action=action, observation=after.text))
            previous = after
        task = _first_text(steps, "task")
        task_id = _first_text(steps, "task_id")
        app = _first_text(steps, "app")
        content = json.dumps([steps, payload["screens"]], ensure_ascii=False, sort_keys=True)
        native_key = f"{payload['episode']}\x00{hashlib.sha256(content.encode()).hexdigest()}"
        yield make_trajectory(
            record,
            domain=opts.get("domain") or self.default_domain,
            native_key=native_key,
            turns=turns,
            system=android_system_prompt(task, initial.text),
            source_kind=opts.get("source_kind") or "public",
            split_key=task_id or task or None,
            outcome=_outcome(steps[-1].get("action")),
            meta={"episode": payload["episode"], "app": app} if app else {"episode": payload["episode"]},
        )


def canonical_action(action: Any, before: RenderedScreen, locator: str) -> str:
    """Validate one logged action and return its canonical JSON text (with ``element`` for points)."""
    if not isinstance(action, dict) or not isinstance(action.get("action_type"), str):
        raise InvalidRecord("bad_action", "'action' must be an object with an 'action_type'", locator)
    kind = action["action_type"]
    if kind in POINT_ACTIONS:
        x, y = action.get("x"), action.get("y")
        if not (_is_number(x) and _is_number(y)):
            raise InvalidRecord("bad_action", f"{kind} needs numeric 'x' and 'y'", locator)
        if "element" not in action:
            index = before.element_at(x, y)
            if index is not None:
                action = {**action, "element": index}
    elif kind == "type":
        if not isinstance(action.get("text"), str):
            raise InvalidRecord("bad_action", "type needs a 'text' string", locator)
    elif kind in ("swipe", "scroll"):
        has_coords = all(_is_number(action.get(k)) for k in ("x1", "y1", "x2", "y2"))
        if action.get("direction") not in DIRECTIONS and not has_coords:
            raise InvalidRecord("bad_action", f"{kind} needs a direction (up/down/left/right) or x1,y1,x2,y2", locator)
    elif kind == "open_app":
        if not isinstance(action.get("app"), str) or not action["app"]:
            raise InvalidRecord("bad_action", "open_app needs an 'app'", locator)
    elif kind not in KEY_ACTIONS + END_ACTIONS:
        raise InvalidRecord("unknown_action", f"unknown action_type {kind!r}", locator)
    return canonical_json(action)


class _ScreenCache:
    """Renders each referenced screen once (a screen is often both a dump and the next before)."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self._xml: dict[str, str] = payload["screens"]
        self._refused, self._unreadable = set(payload["refused"]), payload["unreadable"]
        self._rendered: dict[str, RenderedScreen] = {}

    def render(self, rel: str, locator: str) -> RenderedScreen:
        if rel in self._refused:
            raise InvalidRecord("bad_path", f"screen path {rel!r} leaves the log's directory", locator)
        if rel in self._unreadable:
            reason, detail = self._unreadable[rel]
            raise InvalidRecord(reason, f"screen file {rel!r}: {detail}", locator)
        if rel not in self._xml:
            raise InvalidRecord("missing_state", f"screen file {rel!r} does not exist", locator)
        if rel not in self._rendered:
            self._rendered[rel] = render_view_xml(self._xml[rel], f"{locator} screen {rel}")
        return self._rendered[rel]


def _load_screens(base: str, lines: list[dict[str, Any]], max_bytes: int) -> dict[str, Any]:
    """The referenced screen files: their text, and which are missing, refused or unreadable."""
    screens: dict[str, str] = {}
    missing: list[str] = []
    refused: list[str] = []
    unreadable: dict[str, list[str]] = {}
    for line in lines:
        for key in ("before", "dump"):
            rel = line["value"].get(key)
            if not isinstance(rel, str) or not rel or rel in screens or rel in missing or rel in refused:
                continue
            if rel in unreadable:
                continue
            if not _is_safe_relative(rel):
                refused.append(rel)
                continue
            uri = join_uri(base, rel)
            fs, path = filesystem(uri)
            if not fs.exists(path):
                missing.append(rel)
                continue
            data = read_document(uri, max_bytes)
            if isinstance(data, InvalidRecord):
                unreadable[rel] = [data.reason, data.detail]
                continue
            screens[rel] = data.decode("utf-8", errors="replace")
    return {"screens": screens, "missing": missing, "refused": refused, "unreadable": unreadable}


def _is_safe_relative(rel: str) -> bool:
    # Screens are data beside the log; a path out of its directory could pull any file into shards.
    if rel.startswith(("/", "\\")) or "://" in rel or (len(rel) > 1 and rel[1] == ":"):
        return False
    return ".." not in rel.replace("\\", "/").split("/")


def _ordered_steps(lines: list[dict[str, Any]], locator: str) -> list[dict[str, Any]]:
    steps = [line["value"] for line in lines]
    seen: set[int] = set()
    for s in steps:
        step = s.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise InvalidRecord("missing_field", "every line needs an integer 'step'", locator)
        if step in seen:
            raise InvalidRecord("bad_value", f"step {step} appears twice", locator)
        seen.add(step)
    return sorted(steps, key=lambda s: s["step"])


def _first_text(steps: list[dict[str, Any]], key: str) -> str:
    for s in steps:
        value = s.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return ""


def _outcome(last_action: Any) -> Outcome | None:
    if not isinstance(last_action, dict) or last_action.get("action_type") not in END_ACTIONS:
        return None
    status = str(last_action.get("status") or "").lower()
    success = last_action["action_type"] == "complete" and status not in _FAILED_STATUSES
    return Outcome(success=success)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


ADAPTER = UiautomatorAdapter()
