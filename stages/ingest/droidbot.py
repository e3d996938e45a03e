"""``droidbot``: DroidBot output directories, and AutoDroid's DroidTask task files beside them.

**DroidBot run.** ``states/state_<tag>.json`` (one screen each) and ``events/event_<tag>.json``
(one input each, written by DroidBot's ``EventLog``). A state and an event (abridged)::

    {"tag": "2024-05-01_101500", "state_str": "9f1c…", "foreground_activity": "com.example.notes/.Main",
     "views": [{"temp_id": 0, "parent": -1, "children": [1], "class": "android.widget.FrameLayout",
                "resource_id": null, "text": null, "content_description": null,
                "bounds": [[0, 0], [1080, 2400]], "visible": true, "clickable": false, ...}, ...]}
    {"tag": "2024-05-01_101503", "start_state": "9f1c…", "stop_state": "77ab…", "event_str": "TouchEvent(…)",
     "event": {"event_type": "touch", "x": null, "y": null, "view": {"temp_id": 7, "bounds": [[…]], ...}}}

The run is one trajectory of its events in tag order. ``system.initial_state`` is the rendering
(`stages.ingest.android_render`) of the first event's start state; each event is a turn whose
observation is the rendering of its stop state, and whose action is structured UI JSON. The
event types are DroidBot's (``input_event.py``, with AutoDroid's names beside them):

- ``touch`` / ``click`` → click, ``long_touch`` / ``long_click`` → long_press (``x``/``y``, else the
  centre of ``view``), ``set_text`` → type, ``scroll`` → scroll (direction), ``swipe`` → swipe;
- ``key`` BACK/HOME/ENTER → back/home/enter, other keys → key;
- ``intent``: ``am start … pkg/.Activity`` → open_app, ``am force-stop pkg`` → close_app, other
  intents → intent (the command);
- ``kill_app`` (the first event of every run: force-stop the app under test, then HOME) → close_app
  with the package of its ``stop_intent``;
- ``spawn`` → spawn, ``manual`` (a person acted on the device) → manual, ``exit`` → terminate.

When an event names a view, ``"element"`` is that view's index in the start state's rendering.

Damage costs only what is damaged: an unreadable or empty event or state file is reported as a
skipped member (written to quarantine/, counted as ``members.skipped``), and an event whose type is
unknown or whose stop state is not in ``states/`` is dropped (counted in ``meta.dropped_events``).
**State chain rule:** each turn must start from the screen the previous turn ended on. When an
event starts elsewhere (an event was lost in between, or the device changed on its own), the
trajectory ends there and a new one starts from that event's start state; each piece is its own
trajectory (same split key, ``meta.segment`` = its number) and the breaks are counted in
``meta.state_chain_breaks``. The task text names the app under test: the package of the first
``am start`` intent (else of ``kill_app``'s stop intent, else the first start state's activity) —
the launcher a run starts on is not the app.

**DroidTask** (AutoDroid's Android task set): per app, a DroidBot output folder plus task files
``task<N>.yaml`` at the top of the directory::

    task_name: Create a note that says Buy milk
    step_num: 3
    records:
    - State: "<button id=0 text='Notes'></button>\\n<button id=1 label='New note'></button>…"
      Choice: 1            # the element index in State; -1 = the task is done
      Input: null          # the text typed into that element, if any
      state_str: a1f0c3
      new_state_str: b2e1d4

Each task file is one trajectory: ``system.initial_state`` is the first ``State``; record *i* is a
turn whose action is ``{"action_type": "click", "element": Choice}`` (``"type"`` with ``"text"``
when there is an Input; ``{"action_type": "complete", "status": "successful"}`` for -1) and whose
observation is the next record's ``State`` (a completing step observes its own screen). The chain
rule above applies with ``new_state_str`` → ``state_str``; a step with no following screen is
dropped (``meta.unobserved_steps``). ``task_name`` is the task and the split key.
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
from stages.ingest.common import SkippedMember, canonical_json, make_trajectory
from stages.ingest.reading import (
    InputUnit,
    filesystem,
    join_uri,
    json_document_error,
    loads,
    max_record_bytes,
    read_document,
    read_head,
)
from stages.ingest.registry import Probe, RawRecord

KEY_ACTIONS = {"BACK": "back", "HOME": "home", "ENTER": "enter"}
_AM_START = re.compile(r"\bam\s+start\b")
_AM_FORCE_STOP = re.compile(r"\bam\s+force-stop\s+([A-Za-z]\w*(?:\.\w+)+)")
_COMPONENT = re.compile(r"([A-Za-z]\w*(?:\.\w+)+)/[\w.$]+")
_TASK_FILE = re.compile(r"(?i).*\.ya?ml$")
# DroidBot's event types and AutoDroid's names for the same events.
TOUCH_TYPES = {"touch": "click", "click": "click", "long_touch": "long_press", "long_click": "long_press"}
EVENT_TYPES = frozenset(
    {*TOUCH_TYPES, "set_text", "scroll", "swipe", "key", "intent", "kill_app", "spawn", "manual", "exit"}
)
_NO_INPUT = (None, "", "null", "None", "N/A", "n/a")


def _list_entries(dir_uri: str) -> list[tuple[str, str]]:
    fs, path = filesystem(dir_uri)
    try:
        entries = fs.ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted((posixpath.basename(e["name"].rstrip("/")), e["type"]) for e in entries)


def _list_files(dir_uri: str) -> list[str]:
    return [name for name, kind in _list_entries(dir_uri) if kind == "file"]


def is_droidbot_dir(uri: str) -> bool:
    """Whether a directory is a DroidBot output (``states/`` and ``events/`` folders)."""
    fs, path = filesystem(uri)
    return fs.isdir(posixpath.join(path, "states")) and fs.isdir(posixpath.join(path, "events"))


def droidtask_files(uri: str) -> list[str]:
    """Names of the DroidTask task files at the top of a directory (YAML with ``task_name`` and ``records``)."""
    found = []
    for name in _list_files(uri):
        if not _TASK_FILE.fullmatch(name):
            continue
        try:
            head = read_head(join_uri(uri, name)).decode("utf-8", errors="replace")
        except OSError:
            continue
        if re.search(r"(?m)^task_name\s*:", head) and re.search(r"(?m)^records\s*:", head):
            found.append(name)
    return found


def _droidbot_dirs(uri: str) -> list[str]:
    """The DroidBot output folders of a unit: itself, or its immediate subfolders (a DroidTask app folder)."""
    if is_droidbot_dir(uri):
        return [uri]
    subdirs = [join_uri(uri, n) for n, kind in _list_entries(uri) if kind == "directory"]
    return [d for d in subdirs if is_droidbot_dir(d)]


class DroidBotAdapter:
    name = "droidbot"
    description = "DroidBot output directories (states/, events/) and AutoDroid DroidTask task files (task*.yaml)"
    domains = ("android",)
    default_domain = "android"
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        return 0.95 if probe.container == "dir" and self.claims_dir(probe.uri) else 0.0

    def claims_dir(self, uri: str) -> bool:
        return is_droidbot_dir(uri) or bool(droidtask_files(uri))

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        max_bytes = max_record_bytes(opts)
        root = unit.uri
        if not unit.is_dir:  # a file given under --format droidbot: a task file, or input of another format
            name = posixpath.basename(root.rstrip("/"))
            if _TASK_FILE.fullmatch(name):
                yield _read_task_file(root[: len(root.rstrip("/")) - len(name)].rstrip("/"), name, max_bytes)
            else:
                yield InvalidRecord("wrong_format", "not a DroidTask task file (task<N>.yaml); DroidBot runs are read from "
                                    "their output folder (states/, events/)", "document", root)
            return
        run_dirs, task_files = _droidbot_dirs(root), droidtask_files(root)
        if not run_dirs and not task_files:
            yield InvalidRecord("wrong_format", "holds no DroidBot output (states/, events/) and no DroidTask task file "
                                "(task<N>.yaml)", "document", root)
        for run_dir in run_dirs:
            yield from self._read_run(root, run_dir, max_bytes)
        for name in task_files:
            yield _read_task_file(root, name, max_bytes)

    def _read_run(self, root: str, run_dir: str, max_bytes: int) -> Iterator[RawRecord | InvalidRecord]:
        prefix = "" if run_dir == root else posixpath.basename(run_dir.rstrip("/")) + "/"
        states: dict[str, dict[str, Any]] = {}
        for member, value in _read_members(run_dir, "states", "state_", max_bytes, prefix):
            if isinstance(value, InvalidRecord):
                yield SkippedMember(value.reason, value.detail, f"member {member}", root)
            elif isinstance(value, dict) and isinstance(value.get("state_str"), str):
                states[value["state_str"]] = {"member": member, "value": value}
            else:
                yield SkippedMember("missing_field", "a state needs a 'state_str'", f"member {member}", root)
        events = []
        for member, value in _read_members(run_dir, "events", "event_", max_bytes, prefix):
            if isinstance(value, InvalidRecord):
                yield SkippedMember(value.reason, value.detail, f"member {member}", root)
            elif isinstance(value, dict) and isinstance(value.get("event"), dict):
                events.append({"member": member, "value": value})
            else:
                yield SkippedMember("missing_field", "an event file needs an 'event' object", f"member {member}", root)
        events.sort(key=lambda e: (str(e["value"].get("tag") or ""), e["member"]))
        referenced = {e["value"].get(k) for e in events for k in ("start_state", "stop_state")}
        payload = {
            "kind": "droidbot_run",
            "events": events,
            "states": {s: v for s, v in states.items() if s in referenced},
        }
        locator = "run" if not prefix else f"run {prefix.rstrip('/')}"
        yield RawRecord(root, locator, self.name, json.dumps(payload, ensure_ascii=False))

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        payload = record.value()
        if payload.get("kind") == "droidtask":
            yield from _normalize_task(record, payload, opts, self.default_domain)
        else:
            yield from _normalize_run(record, payload, opts, self.default_domain)


# ---------------------------------------------------------------- DroidBot runs


def _normalize_run(
    record: RawRecord, payload: dict, opts: dict[str, Any], default_domain: str
) -> Iterator[Trajectory]:
    events, states = payload["events"], payload["states"]
    if not events:
        raise InvalidRecord("no_turns", "the run has no events", record.locator)
    rendered: dict[str, RenderedScreen] = {}

    def render(entry: dict[str, Any]) -> RenderedScreen:
        member = entry["member"]
        if member not in rendered:
            views = entry["value"].get("views") or []
            rendered[member] = render_elements(elements_from_droidbot(views, f"member {member}"))
        return rendered[member]

    segments: list[tuple[RenderedScreen, list[Turn]]] = []
    dropped: list[dict[str, str]] = []
    breaks = 0
    last_stop: str | None = None
    for ev in events:
        value, member = ev["value"], ev["member"]
        start_str, stop_str = value.get("start_state"), value.get("stop_state")
        start, stop = states.get(start_str), states.get(stop_str)
        if stop is None or start is None:
            which, name = ("stop", stop_str) if stop is None else ("start", start_str)
            dropped.append({"member": member, "reason": f"{which} state {str(name)[:16]} is not in states/"})
            continue
        try:
            action = droidbot_action(value["event"], render(start), f"member {member}")
        except InvalidRecord as err:
            dropped.append({"member": member, "reason": f"{err.reason}: {err.detail}"})
            continue
        if segments and start_str != last_stop:
            breaks += 1
            segments.append((render(start), []))
        elif not segments:
            segments.append((render(start), []))
        segments[-1][1].append(Turn(action=action, observation=render(stop).text))
        last_stop = stop_str
    if not segments:
        raise InvalidRecord("no_turns", f"no event of the run could be read ({len(dropped)} dropped)", record.locator)
    app = _app_under_test(events, states)
    description = f"Free exploration of {app or 'the app'} (no task given)"
    base_meta: dict[str, Any] = {"app": app, "tool": "droidbot"}
    if dropped:
        base_meta["dropped_events"] = dropped
    if breaks:
        base_meta["state_chain_breaks"] = breaks
    split_key = None
    for n, (initial, turns) in enumerate(segments, 1):
        meta = dict(base_meta, segment=n) if len(segments) > 1 else base_meta
        native = f"{record.uri}#{record.locator}" + (f"#segment{n}" if len(segments) > 1 else "")
        traj = make_trajectory(
            record,
            domain=opts.get("domain") or default_domain,
            native_key=native,
            turns=turns,
            system=android_system_prompt(description, initial.text),
            source_kind=opts.get("source_kind") or "public",
            split_key=split_key,
            meta=meta,
        )
        split_key = split_key or traj.split_key  # the pieces of one run stay in one pool
        yield traj


def _app_under_test(events: list[dict], states: dict[str, dict]) -> str:
    for ev in events:
        event = ev["value"].get("event") or {}
        if event.get("event_type") == "intent":
            package = _started_package(str(event.get("intent") or ""))
            if package:
                return package
    for ev in events:
        event = ev["value"].get("event") or {}
        if event.get("event_type") == "kill_app":
            package = _stopped_package(str(event.get("stop_intent") or event.get("intent") or ""))
            if package:
                return package
    first = states.get(events[0]["value"].get("start_state")) if events else None
    activity = str((first or {}).get("value", {}).get("foreground_activity") or "")
    return activity.split("/")[0]


def droidbot_action(event: dict[str, Any], before: RenderedScreen, locator: str) -> str:
    """A DroidBot input event as canonical structured UI action JSON."""
    kind = event.get("event_type")
    view = event.get("view") if isinstance(event.get("view"), dict) else None
    if kind in TOUCH_TYPES:
        x, y = _point(event, view, locator)
        action: dict[str, Any] = {"action_type": TOUCH_TYPES[kind], "x": x, "y": y}
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
        started, stopped = _started_package(command), _stopped_package(command)
        if started:
            action = {"action_type": "open_app", "app": started}
        elif stopped:
            action = {"action_type": "close_app", "app": stopped}
        else:
            action = {"action_type": "intent", "command": command}
    elif kind == "kill_app":
        package = _stopped_package(str(event.get("stop_intent") or ""))
        action = {"action_type": "close_app", "app": package} if package else {"action_type": "close_app"}
    elif kind == "spawn":
        action = {"action_type": "spawn"}
    elif kind == "manual":
        action = {"action_type": "manual"}
    elif kind == "exit":
        action = {"action_type": "terminate"}
    else:
        raise InvalidRecord("unknown_action", f"unknown DroidBot event_type {kind!r}", locator)
    if view is not None and kind in ("touch", "click", "long_touch", "long_click", "set_text", "scroll"):
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


def _stopped_package(command: str) -> str | None:
    """The package of an ``am force-stop pkg`` command, else None."""
    m = _AM_FORCE_STOP.search(command)
    return m.group(1) if m else None


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


def _read_members(
    run_dir: str, folder: str, prefix: str, max_bytes: int, member_prefix: str
) -> Iterator[tuple[str, Any]]:
    for name in _list_files(join_uri(run_dir, folder)):
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        member = f"{member_prefix}{folder}/{name}"
        yield member, _load_json(join_uri(run_dir, folder, name), member, run_dir, max_bytes)


def _load_json(uri: str, member: str, root: str, max_bytes: int) -> Any:
    data = read_document(uri, max_bytes)
    if isinstance(data, InvalidRecord):
        return InvalidRecord(data.reason, data.detail, f"member {member}", root)
    if not data.strip():
        return InvalidRecord("empty_file", "the file is empty", f"member {member}", root)
    try:
        return loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return InvalidRecord("malformed_json", json_document_error(exc), f"member {member}", root)


# ---------------------------------------------------------------- DroidTask task files


def _read_task_file(root: str, name: str, max_bytes: int) -> RawRecord | InvalidRecord:
    loc = f"member {name}"
    data = read_document(join_uri(root, name), max_bytes)
    if isinstance(data, InvalidRecord):
        return InvalidRecord(data.reason, data.detail, loc, root)
    # PyYAML arrives with ray; safe_load builds plain data only (no tags, no code).
    import yaml

    try:
        value = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        return InvalidRecord("malformed_yaml", str(exc).splitlines()[0], loc, root)
    if not isinstance(value, dict) or not isinstance(value.get("records"), list):
        return InvalidRecord("missing_field", "a DroidTask file needs a 'records' list", loc, root)
    payload = {"kind": "droidtask", "file": name, "task": value}
    return RawRecord(root, loc, DroidBotAdapter.name, json.dumps(payload, ensure_ascii=False, default=str))


def droidtask_action(choice: Any, text: Any, locator: str) -> str:
    """A DroidTask step (``Choice`` element index, ``Input`` text) as structured UI action JSON."""
    try:
        index = int(choice)
    except (TypeError, ValueError):
        raise InvalidRecord("bad_action", f"Choice must be an element index, got {choice!r}", locator) from None
    if index == -1:
        return canonical_json({"action_type": "complete", "status": "successful"})
    if index < 0:
        raise InvalidRecord("bad_action", f"Choice must be an element index or -1, got {index}", locator)
    if text not in _NO_INPUT:
        return canonical_json({"action_type": "type", "element": index, "text": str(text)})
    return canonical_json({"action_type": "click", "element": index})


def _normalize_task(
    record: RawRecord, payload: dict, opts: dict[str, Any], default_domain: str
) -> Iterator[Trajectory]:
    task = payload["task"]
    records = task["records"]
    loc = record.locator
    for i, rec in enumerate(records):
        if not isinstance(rec, dict) or not isinstance(rec.get("State"), str) or "Choice" not in rec:
            raise InvalidRecord("missing_field", f"record {i}: needs 'State' (text) and 'Choice'", loc)
    segments: list[tuple[str, list[Turn], bool]] = []  # (initial screen, turns, closed by a break)
    unobserved = 0
    breaks = 0
    for i, rec in enumerate(records):
        action = droidtask_action(rec["Choice"], rec.get("Input"), f"{loc} record {i}")
        nxt = records[i + 1] if i + 1 < len(records) else None
        chained = nxt is not None and _chained(rec, nxt)
        if action.startswith('{"action_type": "complete"'):
            observation = rec["State"]  # finishing changes nothing on the screen
        elif chained:
            observation = nxt["State"]
        else:
            unobserved += 1
            observation = None
        if observation is not None:
            if not segments or segments[-1][2]:
                segments.append((rec["State"], [], False))
            segments[-1][1].append(Turn(action=action, observation=observation))
        if nxt is not None and not chained:
            breaks += 1
            if segments:
                segments[-1] = (segments[-1][0], segments[-1][1], True)  # the next turn starts a new piece
    if not segments:
        raise InvalidRecord("no_turns", "no step of the task has an observed next screen", loc)
    name = str(task.get("task_name") or "").strip()
    meta: dict[str, Any] = {"tool": "droidtask", "file": payload["file"], "step_num": task.get("step_num")}
    if unobserved:
        meta["unobserved_steps"] = unobserved
    if breaks:
        meta["state_chain_breaks"] = breaks
    for n, (initial, turns, _) in enumerate(segments, 1):
        yield make_trajectory(
            record,
            domain=opts.get("domain") or default_domain,
            native_key=f"{record.uri}#{loc}" + (f"#segment{n}" if len(segments) > 1 else ""),
            turns=turns,
            system=android_system_prompt(name, initial),
            source_kind=opts.get("source_kind") or "public",
            split_key=name or None,
            meta=dict(meta, segment=n) if len(segments) > 1 else meta,
        )


def _chained(rec: dict, nxt: dict) -> bool:
    """Whether the next record starts on the screen this one ended on (unknown ids count as chained)."""
    after, before = rec.get("new_state_str"), nxt.get("state_str")
    return not (isinstance(after, str) and isinstance(before, str) and after != before)


ADAPTER = DroidBotAdapter()
