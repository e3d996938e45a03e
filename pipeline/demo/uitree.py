"""Textual UI trees for the GUI demos (web accessibility tree, desktop accessibility tree).

A screen is a list of `Node`s in document order; `render` numbers them ``[1]``, ``[2]`` … and
indents children, the compact indexed form of SPEC §4 (``[12] link "Sign in"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Node:
    role: str
    name: str = ""
    depth: int = 0
    props: dict[str, str] = field(default_factory=dict)


def node(role: str, name: str = "", depth: int = 0, **props: object) -> Node:
    """A node; keyword properties become ``key=value`` suffixes (``value="…"``, ``checked=true``)."""
    return Node(role, name, depth, {k: str(v) for k, v in props.items()})


def render(nodes: list[Node]) -> str:
    """Indexed, indented lines: ``  [3] button "Search"``."""
    lines = []
    for i, n in enumerate(nodes, 1):
        name = f' "{n.name}"' if n.name else ""
        # Multi-line values stay on their node's line, escaped the way JSON escapes them.
        props = "".join(f' {k}="{_one_line(v)}"' if k == "value" else f" {k}={v}" for k, v in n.props.items())
        lines.append(f"{'  ' * n.depth}[{i}] {n.role}{name}{props}")
    return "\n".join(lines)


def _one_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def index_of(nodes: list[Node], name: str, role: str | None = None) -> int:
    """1-based index of the first node with this name (and role); the action refers to it."""
    for i, n in enumerate(nodes, 1):
        if n.name == name and (role is None or n.role == role):
            return i
    raise KeyError(f"no node named {name!r}")
