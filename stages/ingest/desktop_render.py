"""Desktop accessibility trees (Windows UI Automation) → compact indexed lines (SPEC §4).

One element per line, numbered in document order, in the style the Android renderer uses::

    [ 3] | Button | name="Night light" | id=NightLightToggle | bounds=[344,215][492,273] | focusable, checked

Fields: index, role (the UIA control type without its ``Control`` suffix), ``name=`` (quoted as
JSON, so newlines and quotes are escaped and every other character, CJK and emoji included, stays
as it is), ``id=`` (AutomationId), ``value=``, ``bounds=[left,top][right,bottom]``, state flags.
Flags appear only when they say something: ``disabled`` (IsEnabled false), ``focused``,
``focusable``, ``selected``, ``checked``/``mixed`` (ToggleState), ``expanded``/``collapsed``,
``password``.

Input node shape, as the AgentNet/OpenCUA recorder writes it::

    {"Name": "Settings", "ControlType": "WindowControl", "BoundingRectangle": {"left": 0, "top": 0,
     "right": 1366, "bottom": 728}, "Children": [...]}

``AutomationId``, ``Value`` and the state properties above are read when present; snake_case
spellings (``name``, ``control_type``, ``bounding_rectangle``, ``children`` …) are accepted too, and
bounds may also be ``{x, y, w, h}`` or a ``[left, top, right, bottom]`` list.

Pruning (a pruned node's children are still visited and take its place in the list):

- invisible nodes: zero-area bounds, or ``IsOffscreen`` true;
- empty layout nodes: no name, id or value, and a role that is not interactive (an unnamed
  Pane, Group, Custom, List, Text, Image … carries nothing; an unnamed Button or Edit is kept).
  A name made only of private-use characters (icon-font glyphs such as Segoe MDL2's U+E713)
  counts as no name here; when such a node is kept anyway, its name is rendered unchanged;
- redundant nodes: a Text node whose name repeats its nearest kept ancestor's name (the label
  inside a button), and a node with the same role, name and bounds as that ancestor.

Size is bounded by `RenderLimits` (defaults: 300 elements, 24,000 characters, names cut at 300
characters with ``…``); what does not fit is summarized by a final ``… (N more elements)`` line.
A tree with nothing left after pruning renders as `EMPTY_SCREEN`.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from schemas.errors import InvalidRecord

# Roles kept even without a name: the user can act on them, and their bounds say where.
INTERACTIVE_ROLES = frozenset(
    {
        "Button",
        "CheckBox",
        "ComboBox",
        "DataItem",
        "Document",
        "Edit",
        "Hyperlink",
        "ListItem",
        "MenuItem",
        "RadioButton",
        "ScrollBar",
        "Slider",
        "Spinner",
        "SplitButton",
        "TabItem",
        "Thumb",
        "TreeItem",
    }
)


@dataclass(frozen=True)
class RenderLimits:
    """Caps on one rendered screen: elements shown, characters of all lines, characters per text field."""

    max_elements: int = 300
    max_chars: int = 24_000
    max_text_chars: int = 300


DEFAULT_LIMITS = RenderLimits()
# What a screen with nothing left after pruning renders as (the Android renderer uses the same words).
EMPTY_SCREEN = "(empty screen: no visible elements)"


@dataclass(frozen=True)
class DesktopElement:
    """One kept node of a UIA tree."""

    role: str
    name: str = ""
    automation_id: str = ""
    value: str = ""
    bounds: tuple[int, int, int, int] | None = None  # left, top, right, bottom
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class RenderedTree:
    """A rendered tree: its kept elements, the text, and how many elements the text shows."""

    elements: list[DesktopElement]
    text: str
    shown: int

    def element_at(self, x: float, y: float) -> int | None:
        """Index of the smallest shown element containing the point."""
        return element_at(self.elements, x, y, self.shown)


def render_uia(root: Any, limits: RenderLimits = DEFAULT_LIMITS) -> RenderedTree:
    """Render a UIA tree, keeping its elements for pointing (raises `InvalidRecord` ``malformed_tree``)."""
    elements = flatten_uia_tree(root)
    text, shown = cap_lines(format_elements(elements, limits), limits)
    return RenderedTree(elements, text, shown)


def render_uia_tree(root: Any, limits: RenderLimits = DEFAULT_LIMITS) -> str:
    """The compact indexed lines of a UIA tree (raises `InvalidRecord` ``malformed_tree``)."""
    return render_uia(root, limits).text


def flatten_uia_tree(root: Any) -> list[DesktopElement]:
    """The kept elements of a UIA tree in document (pre-)order, after pruning."""
    out: list[DesktopElement] = []
    # An explicit stack: real trees can be deeper than Python's recursion limit.
    stack: list[tuple[Any, DesktopElement | None]] = [(root, None)]
    while stack:
        node, kept_ancestor = stack.pop()
        element = _element_of(node)
        if _keep(element, node, kept_ancestor):
            out.append(element)
            kept_ancestor = element
        children = _children_of(node)
        stack.extend((child, kept_ancestor) for child in reversed(children))
    return out


def format_elements(elements: list[DesktopElement], limits: RenderLimits = DEFAULT_LIMITS) -> list[str]:
    """One line per element, numbered from 0."""
    return [format_element(i, el, limits) for i, el in enumerate(elements)]


def format_element(index: int, el: DesktopElement, limits: RenderLimits = DEFAULT_LIMITS) -> str:
    """``[ 3] | Button | name="OK" | id=ok | bounds=[x1,y1][x2,y2] | focusable``."""
    parts = [f"[{index:>2}]", el.role]
    if el.name.strip():
        parts.append(f"name={quote_text(el.name, limits)}")
    if el.automation_id:
        parts.append(f"id={el.automation_id}")
    if el.value.strip():
        parts.append(f"value={quote_text(el.value, limits)}")
    if el.bounds is not None:
        left, top, right, bottom = el.bounds
        parts.append(f"bounds=[{left},{top}][{right},{bottom}]")
    if el.flags:
        parts.append(", ".join(el.flags))
    return " | ".join(parts)


def quote_text(text: str, limits: RenderLimits = DEFAULT_LIMITS) -> str:
    """JSON-quoted text (escapes only quotes, backslashes and control characters), cut to the limit."""
    if len(text) > limits.max_text_chars:
        text = text[: limits.max_text_chars] + "…"
    return json.dumps(text, ensure_ascii=False)


def cap_lines(lines: list[str], limits: RenderLimits = DEFAULT_LIMITS) -> tuple[str, int]:
    """Join lines within the caps; returns the text and how many of the lines it shows.

    The whole text, the final ``… (N more elements)`` line included, stays within ``max_chars``.
    No lines at all give `EMPTY_SCREEN`.
    """
    if not lines:
        return EMPTY_SCREEN, 0
    reserve = len(f"\n… ({len(lines)} more elements)")
    shown: list[str] = []
    used = 0
    for n, line in enumerate(lines):
        cost = len(line) + (1 if shown else 0)
        room = limits.max_chars - (0 if n == len(lines) - 1 else reserve)
        if len(shown) >= limits.max_elements or used + cost > room:
            break
        shown.append(line)
        used += cost
    rest = len(lines) - len(shown)
    if rest:
        shown.append(f"… ({rest} more elements)")
    return "\n".join(shown), len(shown) - (1 if rest else 0)


def element_at(elements: list[DesktopElement], x: float, y: float, shown: int | None = None) -> int | None:
    """Index of the smallest element (among the first `shown`) whose bounds contain the point."""
    best: tuple[int, int] | None = None  # (area, -index): smallest area, then the later (deeper) node
    for i, el in enumerate(elements[:shown]):
        if el.bounds is None:
            continue
        left, top, right, bottom = el.bounds
        if left <= x < right and top <= y < bottom:
            key = ((right - left) * (bottom - top), -i)
            if best is None or key < best:
                best = key
    return None if best is None else -best[1]


def role_of(control_type: Any) -> str:
    """``ButtonControl`` → ``Button``; anything else is kept as given (``?`` when missing)."""
    if not isinstance(control_type, str) or not control_type.strip():
        return "?"
    role = control_type.strip()
    return role[: -len("Control")] if role.endswith("Control") and len(role) > len("Control") else role


def _prop(node: dict, *names: str) -> Any:
    for name in names:
        if name in node:
            return node[name]
    return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _children_of(node: Any) -> list[Any]:
    children = _prop(node, "Children", "children")
    if children is None:
        return []
    if not isinstance(children, list):
        raise InvalidRecord("malformed_tree", f"Children must be a list, not {type(children).__name__}")
    return children


def _element_of(node: Any) -> DesktopElement:
    if not isinstance(node, dict):
        raise InvalidRecord("malformed_tree", f"a tree node must be an object, not {type(node).__name__}")
    return DesktopElement(
        role=role_of(_prop(node, "ControlType", "control_type", "ControlTypeName", "role")),
        name=_text(_prop(node, "Name", "name")),
        automation_id=_text(_prop(node, "AutomationId", "automation_id")).strip(),
        value=_text(_prop(node, "Value", "value")),
        bounds=_bounds_of(_prop(node, "BoundingRectangle", "bounding_rectangle", "bounds")),
        flags=tuple(_flags_of(node)),
    )


def _bounds_of(raw: Any) -> tuple[int, int, int, int] | None:
    if raw is None:
        return None
    try:
        if isinstance(raw, dict):
            if "left" in raw:
                box = (raw["left"], raw["top"], raw["right"], raw["bottom"])
            else:
                x, y = raw["x"], raw["y"]
                box = (x, y, x + raw.get("w", raw.get("width")), y + raw.get("h", raw.get("height")))
        elif isinstance(raw, list | tuple) and len(raw) == 4:
            box = tuple(raw)
        else:
            raise TypeError(type(raw).__name__)
        left, top, right, bottom = (round(float(v)) for v in box)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidRecord("malformed_tree", f"unreadable BoundingRectangle {str(raw)[:80]} ({exc})") from None
    return left, top, right, bottom


def _flags_of(node: dict) -> Iterator[str]:
    if _prop(node, "IsEnabled", "is_enabled") is False:
        yield "disabled"
    if _prop(node, "HasKeyboardFocus", "has_keyboard_focus") is True:
        yield "focused"
    if _prop(node, "IsKeyboardFocusable", "is_keyboard_focusable") is True:
        yield "focusable"
    if _prop(node, "IsSelected", "is_selected", "SelectionItemIsSelected") is True:
        yield "selected"
    toggle = _prop(node, "ToggleState", "toggle_state")
    if toggle in (1, "On", "on"):
        yield "checked"
    elif toggle in (2, "Indeterminate", "indeterminate"):
        yield "mixed"
    expand = _prop(node, "ExpandCollapseState", "expand_collapse_state")
    if expand in (1, "Expanded", "expanded"):
        yield "expanded"
    elif expand in (0, "Collapsed", "collapsed"):
        yield "collapsed"
    if _prop(node, "IsPassword", "is_password") is True:
        yield "password"


def _meaningful(text: str) -> bool:
    # Icon-font glyphs live in the Private Use Area (category "Co"): they name nothing.
    return any(not ch.isspace() and unicodedata.category(ch) != "Co" for ch in text)


def _keep(el: DesktopElement, node: dict, kept_ancestor: DesktopElement | None) -> bool:
    if el.bounds is not None:
        left, top, right, bottom = el.bounds
        if right <= left or bottom <= top:
            return False
    if _prop(node, "IsOffscreen", "is_offscreen") is True:
        return False
    named = bool(_meaningful(el.name) or el.automation_id or el.value.strip())
    if not named and el.role not in INTERACTIVE_ROLES:
        return False
    if kept_ancestor is not None:
        if el.role == "Text" and el.name == kept_ancestor.name and not el.value.strip():
            return False
        if (el.role, el.name, el.bounds) == (kept_ancestor.role, kept_ancestor.name, kept_ancestor.bounds):
            return False
    return True
