"""``opencua``: AgentNet / OpenCUA desktop recordings, one session directory per recording.

A session directory, as the AgentNet recorder writes it::

    reduced_events_complete.jsonl   one user action per line, with the UIA tree (`axtree`) of the
                                    top window as it was just before the action
    a11y.jsonl                      every tree snapshot the recorder took: {"time_stamp", "axtree"}
    metadata.json                   OS, screen size, recording times
    task_name.json                  {"task_name": ..., "description": ...}

(``events.jsonl``, ``event_buffer.jsonl``, ``element.jsonl``, ``reduced_events_vis.jsonl``,
``top_window.jsonl`` and the video are not read.) Native record, one line of
``reduced_events_complete.jsonl`` (abridged)::

    {"action": "click", "id": 0, "description": "Single left Click", "button": "left", "coordinate": {"x": 1328, "y": 745},
     "target": {"control_type": "ButtonControl", "title": "Action Centre"}, "start_time": 30680.6, "axtree": {"Name": "Taskbar", ...}}

Mapping (domain ``os``), one trajectory per session:

- each line → one turn with a canonical JSON action (`canonical_action`, vocabulary in
  `OS_ACTION_SPACE`); ``element`` is the index, in the rendering of the state before the action,
  of the smallest element containing the action's point (absent when none does).
- states are rendered by `stages.ingest.desktop_render`. The recorder attaches to each action the
  last snapshot taken before it started, so the observation of action t is the tree of action
  t+1, and initial_state is the tree of the first action. An action without a tree takes the last
  ``a11y.jsonl`` snapshot before its start (the same rule); with none, the session is quarantined
  (``missing_state``). The final action's observation is the last snapshot taken after it started;
  without one, that action is dropped and named in ``meta.unobserved_final_action``.
- a jump in the log's ids (the recorder's reduction left raw events out) is kept as turn meta
  ``skipped_events``: that observation also shows the effect of the unlisted events.
- task_name.json → task_description (plus its description); metadata.json → meta (its scalar
  fields: OS, screen size, scroll direction, times); split_key = the task name (recordings of one task share a pool), else
  the session id; traj_id from the session directory name.
"""

from __future__ import annotations

import json
import posixpath
import re
from bisect import bisect_left
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import Demonstration, SystemPrompt, Trajectory, Turn
from stages.ingest.common import canonical_json, make_trajectory
from stages.ingest.desktop_render import DesktopElement, RenderedTree, format_elements, render_uia, role_of
from stages.ingest.reading import (
    InputUnit,
    filesystem,
    iter_jsonl,
    join_uri,
    json_document_error,
    loads,
    max_record_bytes,
    read_document,
)
from stages.ingest.registry import Probe, RawRecord

EVENTS_FILE = "reduced_events_complete.jsonl"
SNAPSHOTS_FILE = "a11y.jsonl"
METADATA_FILE = "metadata.json"
TASK_FILE = "task_name.json"

OS_ACTION_SPACE = """\
Desktop actions, one JSON object per turn (screen pixel coordinates):
{"action": "click", "button": "left"|"right"|"middle", "x": X, "y": Y, "clicks": 2|3 (optional), "element": I (optional), "target": {"role", "name"} (optional)}
{"action": "long_press", "button": ..., "x": X, "y": Y}
{"action": "drag", "button": "left", "from": [X, Y], "to": [X, Y]}
{"action": "scroll", "x": X, "y": Y, "down"|"up"|"left"|"right": wheel clicks}
{"action": "type", "text": "..."} (special keys inside the text as {name}, e.g. {backspace})
{"action": "press", "keys": ["enter"]} / {"action": "hotkey", "keys": ["ctrl", "c"]}
The observation is the accessibility tree of the top window after the action, one element per line."""


class OpenCuaAdapter:
    name = "opencua"
    description = "AgentNet/OpenCUA desktop recording session (reduced_events_complete.jsonl + UIA trees)"
    domains = ("os",)
    default_domain = "os"
    options: dict[str, str] = {}

    def claims_dir(self, uri: str) -> bool:
        """A directory is one session when it holds ``reduced_events_complete.jsonl``."""
        fs, path = filesystem(join_uri(uri, EVENTS_FILE))
        return fs.isfile(path)

    def sniff(self, probe: Probe) -> float:
        if probe.container == "dir":
            return 0.95 if self.claims_dir(probe.uri) else 0.0
        if posixpath.basename(probe.uri) == EVENTS_FILE:
            return 0.95
        rec = probe.first_record
        # reduced_events_vis.jsonl shares most keys but has no raw event index.
        keys = {"action", "axtree", "start_time", "event_start_idx"}
        return 0.9 if probe.container == "jsonl" and isinstance(rec, dict) and keys <= rec.keys() else 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        """The whole session as one record (its events, snapshots, metadata and task)."""
        session_dir = unit.uri.rstrip("/") if unit.is_dir else posixpath.dirname(unit.uri)
        events_uri = join_uri(session_dir, EVENTS_FILE) if unit.is_dir else unit.uri
        max_bytes = max_record_bytes(opts)
        try:
            session = {
                "session": posixpath.basename(session_dir),
                "events": _read_jsonl(events_uri, max_bytes),
                "snapshots": _read_snapshots(join_uri(session_dir, SNAPSHOTS_FILE), max_bytes),
                "metadata": _read_optional_json(join_uri(session_dir, METADATA_FILE), max_bytes),
                "task": _read_optional_json(join_uri(session_dir, TASK_FILE), max_bytes),
            }
        except InvalidRecord as err:
            yield err
            return
        yield RawRecord(events_uri, posixpath.basename(events_uri), self.name, json.dumps(session, ensure_ascii=False))

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        yield normalize_session(record, opts.get("domain") or self.default_domain, opts.get("source_kind") or "public")


def normalize_session(record: RawRecord, domain: str, source_kind: str) -> Trajectory:
    """One recorded session → one trajectory (raises `InvalidRecord`)."""
    value = record.value()
    events: list[tuple[int, dict]] = [(line, ev) for line, ev in value["events"]]
    if not events:
        raise InvalidRecord("no_actions", "the session has no recorded actions", record.locator)
    for line, ev in events:
        if not isinstance(ev, dict):
            raise InvalidRecord("wrong_type", f"an event must be an object, not {type(ev).__name__}", f"line {line}")
    snapshots = sorted(value["snapshots"], key=lambda s: s[0])
    states = [_state_before(line, ev, snapshots) for line, ev in events]
    screens = [_render(tree, line) for tree, (line, _ev) in zip(states, events)]

    turns: list[Turn] = []
    meta: dict[str, Any] = {"session": value["session"], **_metadata(value.get("metadata"))}
    for i, (line, ev) in enumerate(events):
        action = canonical_action(ev, line)
        index = screens[i].element_at(action["x"], action["y"]) if "x" in action and "y" in action else None
        if index is not None:
            # Keep "target" last so the action reads: what, where, which element, what it is.
            target = action.pop("target", None)
            action["element"] = index
            if target:
                action["target"] = target
        if i + 1 < len(events):
            observation = screens[i + 1].text
        else:
            final_tree = _state_after(ev, snapshots)
            if final_tree is None:
                meta["unobserved_final_action"] = action
                break
            observation = _render(final_tree, line).text
        turns.append(Turn(action=canonical_json(action), observation=observation, meta=_turn_meta(events, i)))
    if not turns:
        raise InvalidRecord("missing_state", "the only action has no recorded state after it", f"line {events[0][0]}")

    task = value.get("task") if isinstance(value.get("task"), dict) else {}
    name, description = _text(task.get("task_name")), _text(task.get("description"))
    system = SystemPrompt("\n".join(t for t in (name, description) if t), OS_ACTION_SPACE, screens[0].text,
                          os_demonstrations())
    return make_trajectory(
        record,
        domain=domain,
        native_key=value["session"],
        turns=turns,
        system=system,
        source_kind=source_kind,
        split_key=" ".join(name.split()) or value["session"],
        meta=meta,
    )


def os_demonstrations() -> list[Demonstration]:
    """The fixed demonstrations of this adapter's desktop trajectories (SPEC §4), an invented Windows session
    rendered by `format_elements` as the recorded trees are, so they show the observation format of the turns."""
    return [Demonstration(action, observation) for action, observation in _os_demonstrations()]


@lru_cache(maxsize=1)
def _os_demonstrations() -> tuple[tuple[str, str], ...]:
    start_menu = [
        DesktopElement("Window", "Start", bounds=(0, 328, 640, 728)),
        DesktopElement("Edit", "Type here to search", bounds=(12, 676, 628, 716), flags=("focusable",)),
        DesktopElement("ListItem", "Notepad", bounds=(24, 360, 212, 412), flags=("focusable",)),
        DesktopElement("ListItem", "Settings", bounds=(224, 360, 412, 412), flags=("focusable",)),
        DesktopElement("Button", "Start", bounds=(0, 728, 48, 768)),
    ]
    notepad = [
        DesktopElement("Window", "Untitled - Notepad", bounds=(120, 80, 1020, 620)),
        DesktopElement("MenuBar", "Application", bounds=(128, 110, 1012, 132)),
        DesktopElement("MenuItem", "File", bounds=(128, 110, 168, 132)),
        DesktopElement("Document", "Text editor", value="meeting at 10", bounds=(128, 134, 1012, 596),
                       flags=("focusable", "focused")),
        DesktopElement("StatusBar", "Status bar", bounds=(128, 596, 1012, 616)),
    ]
    return (
        (canonical_json({"action": "click", "button": "left", "x": 24, "y": 748}),
                      "\n".join(format_elements(start_menu))),
        (canonical_json({"action": "type", "text": "meeting at 10"}), "\n".join(format_elements(notepad))),
    )


def _read_jsonl(uri: str, max_bytes: int) -> list[tuple[int, Any]]:
    out = []
    for item in iter_jsonl(uri, max_bytes):
        if isinstance(item, InvalidRecord):
            raise item
        locator, value = item
        out.append((int(locator.split()[-1]), value))
    return out


def _read_snapshots(uri: str, max_bytes: int) -> list[tuple[float, Any]]:
    fs, path = filesystem(uri)
    if not fs.isfile(path):
        return []
    out = []
    for line, value in _read_jsonl(uri, max_bytes):
        tree = value.get("axtree") if isinstance(value, dict) else None
        if not isinstance(tree, dict) or not isinstance(value.get("time_stamp"), int | float):
            raise InvalidRecord("missing_field", "a snapshot needs a time_stamp and an axtree", f"line {line}", uri)
        out.append((float(value["time_stamp"]), value["axtree"]))
    return out


def _read_optional_json(uri: str, max_bytes: int) -> Any:
    fs, path = filesystem(uri)
    if not fs.isfile(path):
        return None
    data = read_document(uri, max_bytes)
    if isinstance(data, InvalidRecord):
        raise data
    try:
        # The recorder writes some files with a byte-order mark.
        return loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRecord("malformed_json", json_document_error(exc), "document", uri) from None


def canonical_action(ev: dict, line: int) -> dict[str, Any]:
    """The canonical JSON action of one recorded event (raises `InvalidRecord` ``bad_action``)."""
    kind = ev.get("action")
    if not isinstance(kind, str) or not kind.strip():
        raise InvalidRecord("bad_action", "the event has no action name", f"line {line}")
    kind = kind.strip().lower()
    description = _text(ev.get("description"))
    if kind in ("click", "mouse_press"):
        return _click(ev, kind, description, line)
    if kind == "drag":
        return _drag(ev, description, line)
    if kind == "scroll":
        return _scroll(ev, description, line)
    if kind in ("type", "write"):
        return {"action": "type", "text": _typed_text(ev, description)}
    if kind in ("press", "hotkey"):
        keys = _pressed_keys(ev, description, line)
        return {"action": "press" if len(keys) == 1 else "hotkey", "keys": keys}
    # An action kind this adapter does not know yet: keep what the recorder said about it.
    out: dict[str, Any] = {"action": kind}
    if description:
        out["description"] = description
    point = _point(ev.get("coordinate"))
    if point:
        out["x"], out["y"] = point
    return out


_CLICK_COUNTS = {"single": 1, "double": 2, "triple": 3}
_PAIR = r"\(\s*(-?[\d.]+)\s*,\s*(-?[\d.]+)\s*\)"
_DRAG = re.compile(rf"Drag from {_PAIR} to {_PAIR}")
_SCROLL_STEP = re.compile(r"(\S+?)\s*×\s*(\d+)")
# Arrow glyphs of the recorder's scroll descriptions (variation selectors removed): unit steps per direction.
_ARROWS = dict(zip("⬇⬆⬅➡↙↘↖↗", ["down", "up", "left", "right", "down left", "down right", "up left", "up right"]))
_KEY_TOKEN = re.compile(r"\$([A-Za-z0-9_]+)\$")
_KEY_NAME = re.compile(r"\$([^$]+)\$")
_TYPED_KEYS = {"space": " ", "enter": "\n", "tab": "\t"}


def _number(value: Any) -> int | float:
    number = float(value)
    return int(number) if number.is_integer() else round(number, 2)


def _point(raw: Any) -> tuple[int | float, int | float] | None:
    if isinstance(raw, dict) and isinstance(raw.get("x"), int | float) and isinstance(raw.get("y"), int | float):
        return _number(raw["x"]), _number(raw["y"])
    if isinstance(raw, list | tuple) and len(raw) == 2 and all(isinstance(v, int | float) for v in raw):
        return _number(raw[0]), _number(raw[1])
    return None


def _target(ev: dict) -> dict[str, str] | None:
    target = ev.get("target")
    if not isinstance(target, dict):
        return None
    role, name = role_of(target.get("control_type")), _text(target.get("title"))
    return {"role": role, "name": name} if name or role != "?" else None


def _click(ev: dict, kind: str, description: str, line: int) -> dict[str, Any]:
    words = description.lower().split()
    button = _text(ev.get("button")) or next((w for w in words if w in ("left", "right", "middle")), "left")
    clicks = next((_CLICK_COUNTS[w] for w in words if w in _CLICK_COUNTS), None)
    if clicks is None:
        clicks = ev["click_type"] if isinstance(ev.get("click_type"), int) and ev["click_type"] > 0 else 1
    point = _point(ev.get("coordinate"))
    if point is None:
        raise InvalidRecord("bad_action", f"a {kind} without a coordinate", f"line {line}")
    out: dict[str, Any] = {"action": "long_press" if kind == "mouse_press" else "click", "button": button}
    if clicks > 1 and kind == "click":
        out["clicks"] = clicks
    out["x"], out["y"] = point
    target = _target(ev)
    if target:
        out["target"] = target
    return out


def _drag(ev: dict, description: str, line: int) -> dict[str, Any]:
    match = _DRAG.search(description)
    if match:
        start = (_number(match[1]), _number(match[2]))
        end = (_number(match[3]), _number(match[4]))
    else:
        trace = ev.get("drag_trace")
        start = _point(ev.get("coordinate"))
        end = _point(trace[-1]) if isinstance(trace, list) and trace else None
        if start is None or end is None:
            raise InvalidRecord("bad_action", "a drag without start and end points", f"line {line}")
    return {"action": "drag", "button": _text(ev.get("button")) or "left", "from": list(start), "to": list(end)}


def _scroll(ev: dict, description: str, line: int) -> dict[str, Any]:
    trace = ev.get("trace") if isinstance(ev.get("trace"), list) else []
    point = _point(trace[0]) if trace else _point(ev.get("coordinate"))
    if point is None:
        raise InvalidRecord("bad_action", "a scroll without a position", f"line {line}")
    totals = {"up": 0, "down": 0, "left": 0, "right": 0}
    steps = [(arrow.replace("\ufe0f", ""), int(n)) for arrow, n in _SCROLL_STEP.findall(description)]
    if steps and all(arrow in _ARROWS for arrow, _n in steps):
        # The description already applies the machine's scroll-direction setting.
        for arrow, n in steps:
            for direction in _ARROWS[arrow].split():
                totals[direction] += n
    else:
        # Raw wheel deltas (pynput): dy > 0 scrolls up, dx > 0 scrolls right.
        for step in trace:
            if isinstance(step, dict):
                dy, dx = step.get("dy") or 0, step.get("dx") or 0
                totals["up" if dy > 0 else "down"] += abs(dy)
                totals["right" if dx > 0 else "left"] += abs(dx)
    out: dict[str, Any] = {"action": "scroll", "x": point[0], "y": point[1]}
    for positive, negative in (("down", "up"), ("right", "left")):
        net = totals[positive] - totals[negative]
        if net:
            out[positive if net > 0 else negative] = abs(net)
    return out


def _typed_text(ev: dict, description: str) -> str:
    raw = ev["text"] if isinstance(ev.get("text"), str) else description.split("Type:", 1)[-1].lstrip()
    return _KEY_TOKEN.sub(lambda m: _TYPED_KEYS.get(m[1].lower(), "{" + m[1].lower() + "}"), raw)


def _pressed_keys(ev: dict, description: str, line: int) -> list[str]:
    if isinstance(ev.get("keys"), list) and ev["keys"]:
        return [str(k) for k in ev["keys"]]
    if "Press:" not in description:
        raise InvalidRecord("bad_action", "a key press without keys", f"line {line}")
    keys = []
    for part in description.split("Press:", 1)[1].strip().split(" + "):
        # "$ctrl$$alt$" names two keys; a bare part is one key ("c", "+").
        keys.extend(_KEY_NAME.findall(part) if "$" in part else [part.strip()])
    keys = [k.lower() if len(k) > 1 else k for k in keys if k]
    if not keys:
        raise InvalidRecord("bad_action", "a key press without keys", f"line {line}")
    return keys


def _start_time(ev: dict) -> float | None:
    value = ev.get("start_time")
    return float(value) if isinstance(value, int | float) else None


def _state_before(line: int, ev: dict, snapshots: list[tuple[float, Any]]) -> Any:
    tree = ev.get("axtree")
    if isinstance(tree, dict):
        return tree
    start = _start_time(ev)
    if start is not None:
        # Same rule as the recorder: the last snapshot taken before the action started.
        i = bisect_left(snapshots, start, key=lambda s: s[0])
        if i > 0:
            return snapshots[i - 1][1]
    raise InvalidRecord("missing_state", f"event {ev.get('id')} has no tree and no snapshot before it", f"line {line}")


def _state_after(ev: dict, snapshots: list[tuple[float, Any]]) -> Any:
    start = _start_time(ev)
    if start is None:
        return None
    later = [tree for ts, tree in snapshots if ts >= start]
    return later[-1] if later else None


def _render(tree: Any, line: int) -> RenderedTree:
    try:
        return render_uia(tree)
    except InvalidRecord as err:
        raise InvalidRecord(err.reason, err.detail, f"line {line}") from None


def _turn_meta(events: list[tuple[int, dict]], i: int) -> str:
    ev = events[i][1]
    meta: dict[str, Any] = {k: ev[k] for k in ("id", "start_time", "end_time") if k in ev}
    if i + 1 < len(events):
        this_id, next_id = ev.get("id"), events[i + 1][1].get("id")
        if isinstance(this_id, int) and isinstance(next_id, int) and next_id - this_id > 1:
            meta["skipped_events"] = next_id - this_id - 1
    return json.dumps(meta, ensure_ascii=False, sort_keys=True)


def _metadata(metadata: Any) -> dict[str, Any]:
    # Scalar fields only (OS, screen size, times); nested recorder timings are left out.
    if not isinstance(metadata, dict):
        return {}
    return {k: v for k, v in metadata.items() if isinstance(v, str | int | float | bool)}


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


ADAPTER = OpenCuaAdapter()
