"""``droidbot``: a DroidBot / AutoDroid output directory — view-tree states linked by input events.

Layout: ``states/state_<tag>.json`` (one screen each) and ``events/event_<tag>.json`` (one input
each), optionally ``tasks/*.yaml|*.yml|*.json`` naming the events of a task. A state and an event
(abridged)::

    {"tag": "2024-05-01_101500", "state_str": "9f1c…", "foreground_activity": "com.example.notes/.Main",
     "views": [{"temp_id": 0, "parent": -1, "children": [1], "class": "android.widget.FrameLayout",
                "resource_id": null, "text": null, "content_description": null,
                "bounds": [[0, 0], [1080, 2400]], "visible": true, "clickable": false, ...}, ...]}
    {"tag": "2024-05-01_101503", "start_state": "9f1c…", "stop_state": "77ab…",
     "event": {"event_type": "touch", "x": null, "y": null, "view": {"temp_id": 7, "bounds": [[…]], ...}}}

A task file (YAML, or the same keys as JSON)::

    task: Create a note titled Groceries      # the task description
    id: notes-create-groceries                # optional: the split key
    app: com.example.notes                    # optional
    events: [2024-05-01_101503, 2024-05-01_101507]   # event tags (or file names), in order

Mapping: each task file is one trajectory following its events; without task files the whole
run is one trajectory of every event ordered by tag. ``system.initial_state`` = the rendering
(`stages.ingest.android_render`) of the first event's start state; each event is a turn whose
action is structured UI JSON (touch → click, long_touch → long_press, set_text → type, scroll,
swipe, key BACK/HOME/ENTER → back/home/enter, other keys → key, ``am start`` intents →
open_app, other intents → intent) and whose observation is the rendering of its stop state.
When an event names a view, ``"element"`` is that view's index in the start state's rendering.
An event whose stop state is not in ``states/`` → the trajectory is quarantined as
``missing_state`` (a gap breaks the state chain, and SPEC §6 drops GUI runs with missing state).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterator
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import Trajectory, Turn
from stages.ingest.android_render import (
    RenderedScreen,
    android_system_prompt,
    elements_from_droidbot,
    render_elements,
)
from stages.ingest.common import canonical_json, make_trajectory
from stages.ingest.reading import DEFAULT_MAX_RECORD_BYTES, InputUnit, filesystem, join_uri, read_document
from stages.ingest.registry import Probe, RawRecord

KEY_ACTIONS = {"BACK": "back", "HOME": "home", "ENTER": "enter"}
_AM_START = re.compile(r"\bam\s+start\b")
_COMPONENT = re.compile(r"([A-Za-z]\w*(?:\.\w+)+)/[\w.$]+")
_TASK_SUFFIXES = (".yaml", ".yml", ".json")


def _list_files(dir_uri: str) -> list[str]:
    fs, path = filesystem(dir_uri)
    try:
        entries = fs.ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(posixpath.basename(e["name"].rstrip("/")) for e in entries if e["type"] == "file")


def is_droidbot_dir(uri: str) -> bool:
    """Whether a directory looks like a DroidBot output (``states/`` and ``events/`` folders)."""
    fs, path = filesystem(uri)
    return fs.isdir(posixpath.join(path, "states")) and fs.isdir(posixpath.join(path, "events"))


class DroidBotAdapter:
    name = "droidbot"
    description = "DroidBot / AutoDroid output directory: states/*.json view trees and events/*.json inputs"
    domains = ("android",)
    default_domain = "android"
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        return 0.95 if probe.container == "dir" and is_droidbot_dir(probe.uri) else 0.0

    def claims_dir(self, uri: str) -> bool:
        return is_droidbot_dir(uri)

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        max_bytes = int(opts.get("max_record_bytes") or DEFAULT_MAX_RECORD_BYTES)
        root = unit.uri
        states: dict[str, dict[str, Any]] = {}
        for member, value in _read_members(root, "states", "state_", max_bytes):
            if isinstance(value, InvalidRecord):
                yield value
            elif isinstance(value, dict) and isinstance(value.get("state_str"), str):
                states[value["state_str"]] = {"member": member, "value": value}
            else:
                yield InvalidRecord("missing_field", "a state needs a 'state_str'", f"member {member}", root)
        events = []
        for member, value in _read_members(root, "events", "event_", max_bytes):
            if isinstance(value, InvalidRecord):
                yield value
            elif isinstance(value, dict) and isinstance(value.get("event"), dict):
                events.append({"member": member, "value": value})
            else:
                yield InvalidRecord("missing_field", "an event file needs an 'event' object", f"member {member}", root)
        events.sort(key=lambda e: (str(e["value"].get("tag") or ""), e["member"]))
        tasks = list(_read_tasks(root, max_bytes))
        if not tasks:
            tasks = [("run", None)]
        for member, task in tasks:
            if isinstance(task, InvalidRecord):
                yield task
                continue
            chosen = events if task is None else _events_of_task(task, events, root, member)
            if isinstance(chosen, InvalidRecord):
                yield chosen
                continue
            referenced = {e["value"].get(k) for e in chosen for k in ("start_state", "stop_state")}
            payload = {
                "task": task,
                "events": chosen,
                "states": {s: v for s, v in states.items() if s in referenced},
            }
            locator = "run" if task is None else f"member {member}"
            yield RawRecord(root, locator, self.name, json.dumps(payload, ensure_ascii=False))

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        payload = record.value()
        events, states, task = payload["events"], payload["states"], payload["task"] or {}
        if not events:
            raise InvalidRecord("no_turns", "the run has no events", record.locator)
        first = events[0]
        start_entry = states.get(first["value"].get("start_state"))
        if start_entry is None:
            raise InvalidRecord(
                "missing_state", "the first event's start state is not in states/", f"member {first['member']}"
            )
        rendered: dict[str, RenderedScreen] = {}

        def render(entry: dict[str, Any]) -> RenderedScreen:
            member = entry["member"]
            if member not in rendered:
                views = entry["value"].get("views") or []
                rendered[member] = render_elements(elements_from_droidbot(views, f"member {member}"))
            return rendered[member]

        initial = render(start_entry)
        previous = initial
        turns = []
        for ev in events:
            value, member = ev["value"], ev["member"]
            stop_entry = states.get(value.get("stop_state"))
            if stop_entry is None:
                raise InvalidRecord(
                    "missing_state",
                    f"stop state {str(value.get('stop_state'))[:16]!r} is not in states/",
                    f"member {member}",
                )
            start = states.get(value.get("start_state"))
            before = render(start) if start is not None else previous
            action = droidbot_action(value["event"], before, f"member {member}")
            after = render(stop_entry)
            turns.append(Turn(action=action, observation=after.text))
            previous = after
        activity = str(start_entry["value"].get("foreground_activity") or "")
        app = str(task.get("app") or activity.split("/")[0])
        description = str(task.get("task") or "").strip() or f"Free exploration of {app or 'the app'} (no task given)"
        split_key = str(task["id"]) if task.get("id") else None
        yield make_trajectory(
            record,
            domain=opts.get("domain") or self.default_domain,
            native_key=f"{record.uri}#{record.locator}",
            turns=turns,
            system=android_system_prompt(description, initial.text),
            source_kind=opts.get("source_kind") or "public",
            split_key=split_key,
            meta={"app": app, "tool": "droidbot"},
        )


def droidbot_action(event: dict[str, Any], before: RenderedScreen, locator: str) -> str:
    """A DroidBot input event as canonical structured UI action JSON."""
    kind = event.get("event_type")
    view = event.get("view") if isinstance(event.get("view"), dict) else None
    if kind in ("touch", "long_touch"):
        x, y = _point(event, view, locator)
        action: dict[str, Any] = {"action_type": "click" if kind == "touch" else "long_press", "x": x, "y": y}
    elif kind == "set_text":
        if not isinstance(event.get("text"), str):
            raise InvalidRecord("bad_action", "set_text needs a 'text' string", locator)
        action = {"action_type": "type", "text": event["text"]}
    elif kind == "scroll":
        action = {"action_type": "scroll", "direction": str(event.get("direction") or "down").lower()}
    elif kind == "swipe":
        x1, y1 = _point(event, event.get("start_view"), locator, "start_x", "start_y")
        x2, y2 = _point(event, event.get("end_view"), locator, "end_x", "end_y")
        action = {"action_type": "swipe", "x1": x1, "y1": y1, "x2": x2, "y2": y2}
    elif kind == "key":
        name = str(event.get("name") or "").upper()
        action = {"action_type": KEY_ACTIONS[name]} if name in KEY_ACTIONS else {"action_type": "key", "name": name}
    elif kind == "intent":
        command = str(event.get("intent") or "")
        package = _started_package(command)
        action = (
            {"action_type": "open_app", "app": package} if package else {"action_type": "intent", "command": command}
        )
    elif kind == "exit":
        action = {"action_type": "terminate"}
    else:
        raise InvalidRecord("unknown_action", f"unknown DroidBot event_type {kind!r}", locator)
    if view is not None and kind in ("touch", "long_touch", "set_text", "scroll"):
        index = before.index_of_key(str(view.get("temp_id", "")))
        if index is None and "x" in action:
            index = before.element_at(action["x"], action["y"])
        if index is not None:
            action["element"] = index
    return canonical_json(action)


def _started_package(command: str) -> str | None:
    """The package of an ``am start … pkg/.Activity`` command, else None."""
    if not _AM_START.search(command):
        return None
    for token in command.split():
        m = _COMPONENT.fullmatch(token)
        if m:
            return m.group(1)
    return None


def _point(event: dict[str, Any], view: Any, locator: str, kx: str = "x", ky: str = "y") -> tuple[int, int]:
    x, y = event.get(kx), event.get(ky)
    if isinstance(x, int | float) and isinstance(y, int | float):
        return round(x), round(y)
    bounds = view.get("bounds") if isinstance(view, dict) else None
    try:
        (x1, y1), (x2, y2) = bounds  # type: ignore[misc]
        return round((x1 + x2) / 2), round((y1 + y2) / 2)
    except (TypeError, ValueError):
        raise InvalidRecord("bad_action", "a touch needs x/y or a view with bounds", locator) from None


def _read_members(root: str, folder: str, prefix: str, max_bytes: int) -> Iterator[tuple[str, Any]]:
    for name in _list_files(join_uri(root, folder)):
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        member = f"{folder}/{name}"
        yield member, _load_json(join_uri(root, folder, name), member, root, max_bytes)


def _load_json(uri: str, member: str, root: str, max_bytes: int) -> Any:
    data = read_document(uri, max_bytes)
    if isinstance(data, InvalidRecord):
        return InvalidRecord(data.reason, data.detail, f"member {member}", root)
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return InvalidRecord("malformed_json", str(exc), f"member {member}", root)


def _read_tasks(root: str, max_bytes: int) -> Iterator[tuple[str, dict[str, Any] | InvalidRecord]]:
    for name in _list_files(join_uri(root, "tasks")):
        if not name.lower().endswith(_TASK_SUFFIXES):
            continue
        member = f"tasks/{name}"
        yield member, _load_task(join_uri(root, "tasks", name), member, root, max_bytes)


def _load_task(uri: str, member: str, root: str, max_bytes: int) -> dict[str, Any] | InvalidRecord:
    loc = f"member {member}"
    data = read_document(uri, max_bytes)
    if isinstance(data, InvalidRecord):
        return InvalidRecord(data.reason, data.detail, loc, root)
    if member.endswith(".json"):
        value = _load_json(uri, member, root, max_bytes)
    else:
        # PyYAML arrives with ray; safe_load builds plain data only (no tags, no code).
        import yaml

        try:
            value = yaml.safe_load(data.decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            return InvalidRecord("malformed_yaml", str(exc).splitlines()[0], loc, root)
    if isinstance(value, InvalidRecord):
        return value
    if not isinstance(value, dict) or not isinstance(value.get("events"), list) or not value["events"]:
        return InvalidRecord("missing_field", "a task file needs a non-empty 'events' list", loc, root)
    return {
        "task": str(value.get("task") or ""),
        "id": str(value["id"]) if value.get("id") is not None else None,
        "app": str(value["app"]) if value.get("app") else None,
        "events": [str(e) for e in value["events"]],
    }


def _events_of_task(
    task: dict[str, Any], events: list[dict[str, Any]], root: str, member: str
) -> list[dict[str, Any]] | InvalidRecord:
    by_name: dict[str, dict[str, Any]] = {}
    for e in events:
        by_name[str(e["value"].get("tag") or "")] = e
        by_name[posixpath.basename(e["member"])] = e
    chosen = []
    for ref in task["events"]:
        event = by_name.get(ref) or by_name.get(f"event_{ref}.json")
        if event is None:
            return InvalidRecord(
                "missing_event", f"task names event {ref!r}, not found in events/", f"member {member}", root
            )
        chosen.append(event)
    return chosen


ADAPTER = DroidBotAdapter()
