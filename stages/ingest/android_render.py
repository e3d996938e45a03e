"""Android screens as compact indexed lines (SPEC §4), one output style for every native shape.

A screen becomes one line per element, numbered in document order::

    [ 3] | android.widget.Button | res=com.app:id/ok | text="OK" | bounds=[42,149][147,275] | clickable

Fields, in this order and only when present: index, class, ``res=`` resource id, ``text=``,
``desc=`` content description (both JSON-quoted, Unicode kept), ``bounds=[x1,y1][x2,y2]``, then
state flags (``clickable``, ``long-clickable``, ``checkable``, ``checked``, ``scrollable``,
``selected``, ``focused``, ``password``, ``disabled``). No indentation: bounds carry the
geometry, and every byte of a GUI observation is a token the model is trained on.

Pruned (their children are kept and take their place in document order):

- invisible nodes: zero-area bounds, ``visible-to-user="false"``, ``displayed="false"``
  (DroidBot: ``visible: false``);
- empty nodes: no text, no content description, no resource id and no interaction or state
  flag — layout wrappers and bare decorations that the model could never refer to.

Size is bounded: at most `DEFAULT_MAX_ELEMENTS` lines and `DEFAULT_MAX_CHARS` characters per
screen, each text field cut at `MAX_FIELD_CHARS`; what does not fit is summarized by a final
``… (N more elements)`` line. A screen with nothing left after pruning renders as `EMPTY_SCREEN`.

Native shapes: uiautomator XML (raw ``<hierarchy><node class=…>`` dumps and Appium page sources,
whose element tag is the widget class), DroidBot view dicts, and AITW/AitZ detected elements.
XML with a DTD is refused (no entity expansion); everything else is plain data.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import Demonstration, SystemPrompt

DEFAULT_MAX_ELEMENTS = 250
DEFAULT_MAX_CHARS = 24_000
MAX_FIELD_CHARS = 1_000
EMPTY_SCREEN = "(empty screen: no visible elements)"
FLAG_ORDER = (
    "clickable",
    "long-clickable",
    "checkable",
    "checked",
    "scrollable",
    "selected",
    "focused",
    "password",
    "disabled",
)
# Flags that make an otherwise empty node worth showing ("disabled" alone does not).
_INFORMATIVE_FLAGS = frozenset(FLAG_ORDER) - {"disabled"}
_BOUNDS = re.compile(r"\[\s*(-?\d+)\s*,\s*(-?\d+)\s*\]\s*\[\s*(-?\d+)\s*,\s*(-?\d+)\s*\]")
_UNSAFE_XML = re.compile(r"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_VIEW_XML_ROOT = re.compile(r"<hierarchy[\s>/]|<(?:android|androidx|com)\.[\w.$]+\s[^>]*\bbounds=")

ANDROID_ACTION_SPACE = """\
Actions are JSON objects with an "action_type" and its arguments. Coordinates are screen pixels,
or fractions of the screen (0-1) where the recording gave them so (AITW).
- {"action_type": "click", "x": <int>, "y": <int>} — tap a point; "element": <index> names the element tapped
- {"action_type": "long_press", "x": <int>, "y": <int>} — press and hold a point
- {"action_type": "type", "text": "<text>"} — type text into the focused field
- {"action_type": "swipe", "direction": "up|down|left|right"} — swipe the finger in that direction
  (with "x1", "y1", "x2", "y2" or "from"/"to" [x, y] for the exact gesture);
  {"action_type": "scroll", "direction": ...} scrolls the content
- {"action_type": "back"}, {"action_type": "home"}, {"action_type": "enter"} — system keys
- {"action_type": "open_app", "app": "<package or name>"} — launch an app
- {"action_type": "wait"} — let the screen settle
- {"action_type": "complete", "status": "successful"} — the task is done;
  {"action_type": "terminate", "status": "infeasible"} — the task cannot be done
The screen is a list of UI elements, one per line:
[index] | class | res=resource id | text="…" | desc="content description" | bounds=[x1,y1][x2,y2] | flags"""


@dataclass(frozen=True)
class UIElement:
    """One on-screen element in the renderer's vocabulary; `key` is the native identity, if any."""

    cls: str
    resource_id: str = ""
    text: str = ""
    desc: str = ""
    bounds: tuple[int, int, int, int] | None = None
    flags: tuple[str, ...] = ()
    key: str = ""


@dataclass(frozen=True)
class RenderedScreen:
    """The rendered text and the elements it shows (list position = printed index)."""

    text: str
    shown: tuple[UIElement, ...]
    total: int

    def element_at(self, x: float, y: float) -> int | None:
        """Index of the smallest shown element whose bounds contain the point (edges inclusive)."""
        best, best_area = None, None
        for i, el in enumerate(self.shown):
            if el.bounds is None:
                continue
            x1, y1, x2, y2 = el.bounds
            if x1 <= x <= x2 and y1 <= y <= y2:
                area = (x2 - x1) * (y2 - y1)
                if best_area is None or area < best_area:
                    best, best_area = i, area
        return best

    def index_of_key(self, key: str) -> int | None:
        """Index of the shown element with this native identity (e.g. a DroidBot temp_id)."""
        for i, el in enumerate(self.shown):
            if key and el.key == key:
                return i
        return None


def android_system_prompt(task_description: str, initial_state: str) -> SystemPrompt:
    """The system part of an android trajectory: the task, the fixed action space and demonstrations."""
    return SystemPrompt(
        task_description=task_description,
        action_space=ANDROID_ACTION_SPACE,
        initial_state=initial_state,
        demonstrations=android_demonstrations(),
    )


def android_demonstrations() -> list[Demonstration]:
    """The fixed demonstrations of the android domain (SPEC §4), in this renderer's style."""
    display = [
        UIElement("android.widget.ImageButton", desc="Navigate up", bounds=(0, 63, 154, 217), flags=("clickable",)),
        UIElement("android.widget.TextView", text="Display", bounds=(198, 100, 760, 180)),
        UIElement("android.widget.LinearLayout", bounds=(0, 240, 1080, 430), flags=("clickable",)),
        UIElement("android.widget.TextView", "android:id/title", "Dark theme", bounds=(198, 280, 800, 340)),
        UIElement(
            "android.widget.Switch", "android:id/switch_widget", bounds=(880, 270, 1036, 400), flags=("checkable",)
        ),
    ]
    search = [
        UIElement(
            "android.widget.EditText",
            "com.android.settings:id/search_src_text",
            "alarm",
            bounds=(140, 90, 1040, 210),
            flags=("clickable", "focused"),
        ),
        UIElement("android.widget.TextView", "android:id/title", "Alarms & reminders", bounds=(198, 280, 800, 340)),
    ]
    return [
        Demonstration('{"action_type": "click", "x": 540, "y": 1100}', render_elements(display).text),
        Demonstration('{"action_type": "type", "text": "alarm"}', render_elements(search).text),
    ]


def format_element(index: int, el: UIElement) -> str:
    """One element as one line (the SPEC §4 style)."""
    parts = [f"[{index:2d}]", el.cls or "?"]
    if el.resource_id:
        parts.append(f"res={el.resource_id}")
    if el.text:
        parts.append(f"text={_quote(el.text)}")
    if el.desc:
        parts.append(f"desc={_quote(el.desc)}")
    if el.bounds is not None:
        x1, y1, x2, y2 = el.bounds
        parts.append(f"bounds=[{x1},{y1}][{x2},{y2}]")
    parts.extend(el.flags)
    return " | ".join(parts)


def render_elements(
    elements: list[UIElement],
    *,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> RenderedScreen:
    """Render already-pruned elements under the size caps."""
    if not elements:
        return RenderedScreen(EMPTY_SCREEN, (), 0)
    lines: list[str] = []
    used = 0
    reserve = len("… (999999 more elements)") + 1
    for i, el in enumerate(elements):
        line = format_element(i, el)
        if i >= max_elements or used + len(line) + 1 + reserve > max_chars:
            break
        lines.append(line)
        used += len(line) + 1
    shown = tuple(elements[: len(lines)])
    if len(lines) < len(elements):
        lines.append(f"… ({len(elements) - len(lines)} more elements)")
    return RenderedScreen("\n".join(lines), shown, len(elements))


def make_element(
    cls: str,
    *,
    resource_id: str = "",
    text: str = "",
    desc: str = "",
    bounds: tuple[int, int, int, int] | None = None,
    flags: set[str] | frozenset[str] = frozenset(),
    visible: bool = True,
    key: str = "",
) -> UIElement | None:
    """A `UIElement`, or None when the pruning rules drop it (invisible, or carrying nothing)."""
    if not visible:
        return None
    if bounds is not None and (bounds[2] <= bounds[0] or bounds[3] <= bounds[1]):
        return None
    text, desc, resource_id = (text or "").strip(), (desc or "").strip(), (resource_id or "").strip()
    if not (text or desc or resource_id or flags & _INFORMATIVE_FLAGS):
        return None
    return UIElement(
        cls=cls,
        resource_id=resource_id,
        text=text,
        desc=desc,
        bounds=bounds,
        flags=tuple(f for f in FLAG_ORDER if f in flags),
        key=key,
    )


# ---- uiautomator / Appium XML ---------------------------------------------------------------


def looks_like_view_xml(head: str) -> bool:
    """Whether text starts like a uiautomator dump or an Appium Android page source."""
    return bool(_VIEW_XML_ROOT.search(head[:4096]))


def parse_view_xml(xml_text: str, locator: str = "") -> ET.Element:
    """The root element of a view-hierarchy XML; DTDs are refused (no entity expansion)."""
    text = xml_text.lstrip("\ufeff \t\r\n")
    if _UNSAFE_XML.search(text):
        raise InvalidRecord("unsafe_xml", "XML with a DOCTYPE or ENTITY declaration is refused", locator)
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        raise InvalidRecord("malformed_xml", f"not well-formed XML ({exc})", locator) from None


def elements_from_xml(xml_text: str, locator: str = "") -> list[UIElement]:
    """Pruned elements of a uiautomator dump or Appium page source, in document order."""
    root = parse_view_xml(xml_text, locator)
    out: list[UIElement] = []
    # Explicit stack: hostile or generated dumps can nest deeper than Python's recursion limit.
    stack = [root] if root.tag != "hierarchy" else list(reversed(list(root)))
    while stack:
        node = stack.pop()
        el = _element_from_xml_node(node)
        if el is not None:
            out.append(el)
        stack.extend(reversed(list(node)))
    return out


def _element_from_xml_node(node: ET.Element) -> UIElement | None:
    a = node.attrib
    cls = a.get("class") or ("" if node.tag == "node" else node.tag)
    flags = {name for name in FLAG_ORDER if a.get(name) == "true"}
    if a.get("enabled") == "false":
        flags.add("disabled")
    visible = a.get("visible-to-user") != "false" and a.get("displayed") != "false"
    return make_element(
        cls,
        resource_id=a.get("resource-id", ""),
        text=a.get("text", ""),
        desc=a.get("content-desc", ""),
        bounds=parse_bounds(a.get("bounds")),
        flags=flags,
        visible=visible,
    )


def parse_bounds(value: Any) -> tuple[int, int, int, int] | None:
    """``"[x1,y1][x2,y2]"`` or ``[[x1, y1], [x2, y2]]`` → ``(x1, y1, x2, y2)``; None if absent/garbled."""
    if isinstance(value, str):
        m = _BOUNDS.fullmatch(value.strip())
        return tuple(int(g) for g in m.groups()) if m else None  # type: ignore[return-value]
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(p, list | tuple) for p in value):
        try:
            (x1, y1), (x2, y2) = value
            return int(x1), int(y1), int(x2), int(y2)
        except (TypeError, ValueError):
            return None
    return None


def render_view_xml(xml_text: str, locator: str = "", **caps: int) -> RenderedScreen:
    """Parse, prune and render one uiautomator/Appium XML screen."""
    return render_elements(elements_from_xml(xml_text, locator), **caps)


# ---- DroidBot view dicts ----------------------------------------------------------------------


def elements_from_droidbot(views: list[Any], locator: str = "") -> list[UIElement]:
    """Pruned elements of a DroidBot state's ``views`` list (already in pre-order, by temp_id)."""
    if not isinstance(views, list):
        raise InvalidRecord("wrong_type", "state 'views' must be a list", locator)
    out = []
    for i, view in enumerate(views):
        if not isinstance(view, dict):
            raise InvalidRecord("wrong_type", f"view {i} is not an object", locator)
        flags = {name for name in FLAG_ORDER if view.get(name.replace("-", "_")) is True}
        if view.get("is_password") is True:
            flags.add("password")
        if view.get("enabled") is False:
            flags.add("disabled")
        el = make_element(
            str(view.get("class") or ""),
            resource_id=str(view.get("resource_id") or ""),
            text=str(view.get("text") or ""),
            desc=str(view.get("content_description") or ""),
            bounds=parse_bounds(view.get("bounds")),
            flags=flags,
            visible=view.get("visible") is not False,
            key=str(view.get("temp_id", i)),
        )
        if el is not None:
            out.append(el)
    return out


# ---- AITW / AitZ detected elements ------------------------------------------------------------


def elements_from_aitw(positions: list[Any], texts: list[Any], types: list[Any], locator: str = "") -> list[UIElement]:
    """Elements from AITW's parallel ``ui_positions`` (y, x, h, w) / ``ui_text`` / ``ui_types`` lists.

    Positions given as fractions of the screen (original AITW) are printed in thousandths;
    pixel positions (AitZ) are printed as they are.
    """
    if not (len(positions) == len(texts) == len(types)):
        raise InvalidRecord(
            "bad_value", f"ui lists differ in length ({len(positions)}, {len(texts)}, {len(types)})", locator
        )
    scale = 1000 if aitw_positions_normalized(positions) else 1
    out = []
    for i, (pos, text, kind) in enumerate(zip(positions, texts, types)):
        if not (isinstance(pos, list | tuple) and len(pos) == 4):
            raise InvalidRecord("bad_value", f"ui position {i} is not [y, x, h, w]", locator)
        y, x, h, w = (float(v) * scale for v in pos)
        bounds = (round(x), round(y), round(x + w), round(y + h))
        # Every detection is something on screen (icons have no text): only zero-area boxes go.
        if bounds[2] > bounds[0] and bounds[3] > bounds[1]:
            out.append(UIElement(cls=str(kind or "UNKNOWN"), text=str(text or "").strip(), bounds=bounds))
    return out


def aitw_positions_normalized(positions: list[Any]) -> bool:
    """True when every coordinate is a fraction of the screen (≤ 1)."""
    return bool(positions) and all(
        isinstance(p, list | tuple) and all(isinstance(v, int | float) and v <= 1.0 for v in p) for p in positions
    )


def _quote(text: str) -> str:
    if len(text) > MAX_FIELD_CHARS:
        text = text[:MAX_FIELD_CHARS] + "…"
    return json.dumps(text, ensure_ascii=False)
