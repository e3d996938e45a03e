"""``aitw``: Android in the Wild (AITW) and Android-in-the-Zoo (AitZ) step records.

A JSON list (or JSONL) of steps, one screen and one action each; two steps, abridged::

    {"episode_id": "5236…", "step_id": 1, "instruction": "open app \\"Clock\\"", "ui_positions": "[[56, 24, 8, 52]]",
     "ui_text": "[\\"Mon, Aug 8\\"]", "ui_types": "[\\"TEXT\\"]", "result_action_type": 4,
     "result_touch_yx": "[0.54, 0.51]", "result_lift_yx": "[0.001, 0.58]", "result_action_text": ""}
    {"episode_id": "5236…", "step_id": 3, "instruction": "open app \\"Clock\\"", "ui_positions": "[[43, 83, 5, 18]]",
     "ui_text": "[\\"Clock\\"]", "ui_types": "[\\"TEXT\\"]", "result_action_type": 10,
     "result_touch_yx": "[-1.0, -1.0]", …}

Lists may be JSON text (AitZ) or real lists; the original AITW feature names are accepted too
(``goal_info``, ``image/ui_annotations_positions``, ``results/action_type``, ``results/yx_touch`` …).

Mapping: steps are grouped by ``episode_id`` (consecutive records) and ordered by ``step_id``;
one episode is one trajectory, ``split_key`` = the episode id, ``system.task_description`` =
``instruction`` (or ``goal``), ``system.initial_state`` = the first step's screen. The screen is
the detected elements (``ui_positions`` as y, x, h, w; ``ui_text``; ``ui_types`` as the class)
rendered as indexed UI lines (`stages.ingest.android_render`). Turn t: the action of step t,
observed as the screen of step t+1. Action codes (the AITW ``ActionType`` enum):

- 3 TYPE → ``{"action_type": "type", "text": …}``; 5/6/7 → back / home / enter;
- 4 DUAL_POINT → ``click`` (``x``, ``y`` as fractions of the screen) when touch and lift are
  within 0.04 of each other (AITW's tap threshold), else ``swipe`` with ``direction`` = the way
  the finger moved (main axis) and the ``from``/``to`` points; a click gets ``"element"`` when the
  positions are fractions or the step gives the image size (``image_height``/``image_width``);
- 10 STATUS_TASK_COMPLETE → ``{"action_type": "complete", "status": "successful"}``,
  11 STATUS_TASK_IMPOSSIBLE → ``{"action_type": "terminate", "status": "infeasible"}``.

The last step has no next screen. When it is a status action (the usual case: the episode ends
with the human declaring the task done) its observation is the marker `EPISODE_END_COMPLETE` /
`EPISODE_END_INFEASIBLE`, and the outcome is set; otherwise the final step is left out (its
result was never recorded) and ``meta.dropped_last_step`` says so. The CoAT annotations
(``coat_*``) go to each turn's ``meta``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import Outcome, Trajectory, Turn
from stages.ingest.android_render import (
    RenderedScreen,
    aitw_positions_normalized,
    android_system_prompt,
    elements_from_aitw,
    render_elements,
)
from stages.ingest.common import canonical_json, make_trajectory
from stages.ingest.reading import InputUnit, iter_container, loads, max_record_bytes
from stages.ingest.registry import Probe, RawRecord

TAP_DISTANCE = 0.04
EPISODE_END_COMPLETE = "[episode ended: the task was marked complete]"
EPISODE_END_INFEASIBLE = "[episode ended: the task was marked infeasible]"
STATUS_ACTIONS = {
    10: ({"action_type": "complete", "status": "successful"}, EPISODE_END_COMPLETE, True),
    11: ({"action_type": "terminate", "status": "infeasible"}, EPISODE_END_INFEASIBLE, False),
}
KEY_ACTIONS = {5: "back", 6: "home", 7: "enter"}
# (AitZ name, original AITW feature name)
FIELDS = {
    "action_type": ("result_action_type", "results/action_type"),
    "touch": ("result_touch_yx", "results/yx_touch"),
    "lift": ("result_lift_yx", "results/yx_lift"),
    "text": ("result_action_text", "results/type_action"),
    "positions": ("ui_positions", "image/ui_annotations_positions"),
    "ui_text": ("ui_text", "image/ui_annotations_text"),
    "ui_types": ("ui_types", "image/ui_annotations_ui_types"),
    "instruction": ("instruction", "goal_info"),
    "height": ("image_height", "image/height"),
    "width": ("image_width", "image/width"),
}
_COAT_FIELDS = ("coat_screen_desc", "coat_action_think", "coat_action_desc", "coat_action_result")


def field(step: dict[str, Any], name: str, default: Any = None) -> Any:
    """A step field under its AitZ name or its original AITW name."""
    for key in FIELDS[name]:
        if key in step:
            return step[key]
    if name == "instruction" and "goal" in step:
        return step["goal"]
    return default


class AitwAdapter:
    name = "aitw"
    description = "Android in the Wild / AitZ steps: detected UI elements, action codes, touch/lift points"
    domains = ("android",)
    default_domain = "android"
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        if isinstance(rec, dict) and "episode_id" in rec and field(rec, "action_type") is not None:
            return 0.95
        return 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        max_bytes = max_record_bytes(opts)
        current: str | None = None
        group: list[dict[str, Any]] = []
        finished: set[str] = set()
        for item in iter_container(unit.uri, max_bytes):
            if isinstance(item, InvalidRecord):
                yield item
                continue
            locator, step = item
            if not isinstance(step, dict) or step.get("episode_id") in (None, ""):
                yield InvalidRecord("missing_field", "a step needs an 'episode_id'", locator, unit.uri)
                continue
            episode = str(step["episode_id"])
            if episode != current:
                if group:
                    yield self._episode_record(unit.uri, group)
                    finished.add(str(current))
                if episode in finished:
                    # Holding every episode to regroup them would cost memory without bound.
                    yield InvalidRecord(
                        "bad_order", f"episode {episode} continues after another began", locator, unit.uri
                    )
                    current, group = None, []
                    continue
                current, group = episode, []
            group.append({"locator": locator, "step": step})
        if group:
            yield self._episode_record(unit.uri, group)

    def _episode_record(self, uri: str, group: list[dict[str, Any]]) -> RawRecord:
        locator = group[0]["locator"] if len(group) == 1 else f"{group[0]['locator']}..{group[-1]['locator']}"
        payload = {"episode_id": str(group[0]["step"]["episode_id"]), "steps": [g["step"] for g in group]}
        return RawRecord(uri, locator, self.name, json.dumps(payload, ensure_ascii=False))

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        payload = record.value()
        loc = record.locator
        steps = _ordered(payload["steps"], loc)
        screens = [step_screen(s, f"{loc} step {s.get('step_id')}") for s in steps]
        turns: list[Turn] = []
        outcome = None
        dropped_last = False
        for i, step in enumerate(steps):
            step_loc = f"{loc} step {step.get('step_id')}"
            code = _int(field(step, "action_type"), "action type", step_loc)
            if code in STATUS_ACTIONS:
                action, marker, success = STATUS_ACTIONS[code]
                observation = screens[i + 1].text if i + 1 < len(steps) else marker
                if i + 1 == len(steps):
                    outcome = Outcome(success=success)
                turns.append(Turn(canonical_json(action), observation, meta=_coat_meta(step)))
                continue
            action_text = canonical_json(decode_action(step, code, screens[i], step_loc))
            if i + 1 == len(steps):
                dropped_last = True
                break
            turns.append(Turn(action_text, screens[i + 1].text, meta=_coat_meta(step)))
        episode = payload["episode_id"]
        instruction = str(field(steps[0], "instruction", "") or "").strip()
        meta: dict[str, Any] = {"episode_id": episode}
        if dropped_last:
            meta["dropped_last_step"] = True
        yield make_trajectory(
            record,
            domain=opts.get("domain") or self.default_domain,
            native_key=episode,
            turns=turns,
            system=android_system_prompt(instruction, screens[0].text),
            source_kind=opts.get("source_kind") or "public",
            split_key=episode,
            outcome=outcome,
            meta=meta,
        )


def decode_action(step: dict[str, Any], code: int, screen: RenderedScreen, locator: str) -> dict[str, Any]:
    """A non-status AITW action code (and its touch/lift points or text) as a structured action."""
    if code == 3:
        return {"action_type": "type", "text": str(field(step, "text", "") or "")}
    if code in KEY_ACTIONS:
        return {"action_type": KEY_ACTIONS[code]}
    if code != 4:
        raise InvalidRecord("unknown_action", f"unknown AITW action type {code}", locator)
    touch = _point(field(step, "touch"), "touch", locator)
    lift = _point(field(step, "lift"), "lift", locator)
    dy, dx = lift[0] - touch[0], lift[1] - touch[1]
    if math.hypot(dy, dx) <= TAP_DISTANCE:
        action: dict[str, Any] = {"action_type": "click", "x": round(touch[1], 4), "y": round(touch[0], 4)}
        index = _element_under(step, touch, screen)
        if index is not None:
            action["element"] = index
        return action
    if abs(dy) >= abs(dx):
        direction = "up" if dy < 0 else "down"
    else:
        direction = "left" if dx < 0 else "right"
    return {
        "action_type": "swipe",
        "direction": direction,
        "from": [round(touch[1], 4), round(touch[0], 4)],
        "to": [round(lift[1], 4), round(lift[0], 4)],
    }


def _element_under(step: dict[str, Any], touch_yx: tuple[float, float], screen: RenderedScreen) -> int | None:
    positions = _json_list(field(step, "positions"), "ui_positions", "")
    if aitw_positions_normalized(positions):
        return screen.element_at(touch_yx[1] * 1000, touch_yx[0] * 1000)
    height, width = field(step, "height"), field(step, "width")
    if isinstance(height, int | float) and isinstance(width, int | float) and height > 0 and width > 0:
        return screen.element_at(touch_yx[1] * width, touch_yx[0] * height)
    return None  # pixel boxes of an image whose size the record does not give


def step_screen(step: dict[str, Any], locator: str) -> RenderedScreen:
    """The rendered screen of one step (its detected UI elements)."""
    positions = _json_list(field(step, "positions"), "ui_positions", locator)
    texts = _json_list(field(step, "ui_text"), "ui_text", locator)
    types = _json_list(field(step, "ui_types"), "ui_types", locator)
    try:
        return render_elements(elements_from_aitw(positions, texts, types, locator))
    except (TypeError, ValueError):
        raise InvalidRecord("bad_value", "ui_positions must hold numbers", locator) from None


def _ordered(steps: list[dict[str, Any]], locator: str) -> list[dict[str, Any]]:
    ids = [s.get("step_id") for s in steps]
    if any(not isinstance(i, int) or isinstance(i, bool) for i in ids):
        raise InvalidRecord("missing_field", "every step needs an integer 'step_id'", locator)
    if len(set(ids)) != len(ids):
        raise InvalidRecord("bad_value", "a step_id appears twice in the episode", locator)
    return sorted(steps, key=lambda s: s["step_id"])


def _json_list(value: Any, name: str, locator: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = loads(value)
        except json.JSONDecodeError:
            raise InvalidRecord("malformed_json", f"{name} is not JSON", locator) from None
    if not isinstance(value, list):
        raise InvalidRecord("wrong_type", f"{name} must be a list", locator)
    return value


def _point(value: Any, name: str, locator: str) -> tuple[float, float]:
    yx = _json_list(value, name, locator)
    if len(yx) != 2 or not all(isinstance(v, int | float) for v in yx) or min(yx) < 0:
        raise InvalidRecord("bad_action", f"a dual-point action needs a {name} point [y, x] in [0, 1]", locator)
    return float(yx[0]), float(yx[1])


def _int(value: Any, name: str, locator: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidRecord("missing_field", f"the step has no {name}", locator)
    try:
        return int(value)
    except ValueError:
        raise InvalidRecord("bad_value", f"{name} {value!r} is not a number", locator) from None


def _coat_meta(step: dict[str, Any]) -> str | None:
    notes = {k: step[k] for k in _COAT_FIELDS if isinstance(step.get(k), str) and step[k]}
    return json.dumps(notes, ensure_ascii=False, sort_keys=True) if notes else None


ADAPTER = AitwAdapter()
