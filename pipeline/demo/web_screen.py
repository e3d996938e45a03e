"""Screens and moves shared by the simulated websites of the web demo.

A site is built from a seed (its content is the same for every attempt at a task), draws goals,
and gives the route to a goal as a list of steps. A step maps the current `Screen` to
(action, next screen), finding its target by name so indices always match the shown tree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pipeline.demo.uitree import Node, index_of, node, render

Move = tuple[dict, "Screen"]
Step = Callable[["Screen"], Move]


@dataclass(frozen=True)
class Screen:
    title: str
    url: str
    nodes: list[Node]
    modal: bool = False
    scroll: int = 0
    extra: tuple[Node, ...] = field(default=())  # rows below the fold, shown after scrolling

    def text(self) -> str:
        """The observation: tab and URL header, then the tree (a modal shows only its own nodes)."""
        if self.modal:
            return render(self.nodes)
        nodes = self.nodes if not self.scroll else [self.nodes[0], *self.extra]
        return f"Tab 0 (current): {self.title}\nURL: {self.url}\n\n{render(nodes)}"


def click(screen: Screen, name: str, nxt: Screen, role: str | None = None) -> Move:
    """Click the node called `name` on `screen`, leading to `nxt`."""
    return {"action": "click", "element": index_of(screen.nodes, name, role)}, nxt


def type_into(screen: Screen, name: str, text: str, submit: bool, nxt: Screen) -> Move:
    """Type `text` into the field called `name` (pressing Enter when `submit`), leading to `nxt`."""
    return {"action": "type", "element": index_of(screen.nodes, name), "text": text, "submit": submit}, nxt


def scroll_detour(screen: Screen) -> list[Move] | None:
    """Scroll down and back up, when the screen has rows below the fold."""
    if screen.modal or not screen.extra:
        return None
    down = replace(screen, scroll=1)
    return [({"action": "scroll", "direction": "down"}, down), ({"action": "scroll", "direction": "up"}, screen)]


def footer(host: str) -> list[Node]:
    """The page footer every site shows."""
    return [
        node("contentinfo", "", 1),
        node("link", "Help", 2),
        node("link", "Privacy", 2),
        node("StaticText", f"© 2024 {host}", 2),
    ]


def stable_id(text: str) -> int:
    """A stable integer from a name (product ids in URLs)."""
    value = 7
    for ch in text:
        value = (value * 31 + ord(ch)) % 2**61
    return value
