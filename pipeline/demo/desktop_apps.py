"""Screens of the simulated desktop (Windows-like): taskbar, Start menu, Notepad, Save dialog,
Calculator, Settings and File Explorer, as accessibility-tree nodes with screen rectangles.

As with UI Automation captures of the foreground window, an app screen holds that window's
tree only; the shell screen (desktop icons) comes with the taskbar.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.demo.uitree import Node, node, render


@dataclass(frozen=True)
class Desk:
    """Screen geometry and the clock shown in the taskbar."""

    width: int
    height: int
    clock: str
    offset: tuple[int, int] = (0, 0)  # where this session's windows open (they move between sessions)
    recent: tuple[str, ...] = ()  # the session's recently opened files (Start menu, Quick access)
    calc_history: tuple[str, ...] = ()  # earlier calculations in Calculator's history pane
    related: tuple[str, ...] = ()  # "Related settings" links of Settings pages


@dataclass(frozen=True)
class Screen:
    nodes: list[Node]

    def text(self) -> str:
        """The observation: the indexed accessibility tree."""
        return render(self.nodes)

    def center(self, name: str, role: str | None = None) -> tuple[int, int]:
        """Screen point at the middle of the named node (where a mouse action aims)."""
        for n in self.nodes:
            if n.name == name and (role is None or n.role == role):
                x1, y1, x2, y2 = (int(v) for v in n.props["rect"].strip("()").split(","))
                return (x1 + x2) // 2, (y1 + y2) // 2
        raise KeyError(f"no node named {name!r}")


def _r(x: int, y: int, w: int, h: int) -> str:
    return f"({x},{y},{x + w},{y + h})"


def _w(d: Desk, x: int, y: int, w: int, h: int) -> str:
    return _r(x + d.offset[0], y + d.offset[1], w, h)


def taskbar(d: Desk, running: tuple[str, ...] = ()) -> list[Node]:
    """The taskbar pane along the bottom edge."""
    y = d.height - 40
    nodes = [node("pane", "Taskbar", 0, rect=_r(0, y, d.width, 40)), node("button", "Start", 1, rect=_r(0, y, 48, 40)),
             node("button", "Search", 1, rect=_r(48, y, 48, 40)), node("button", "File Explorer", 1, rect=_r(96, y, 48, 40))]  # fmt: skip
    for i, app in enumerate(running):
        nodes.append(node("button", f"{app} - 1 running window", 1, rect=_r(144 + 48 * i, y, 48, 40)))
    nodes.append(node("button", f"Clock {d.clock}", 1, rect=_r(d.width - 90, y, 90, 40)))
    return nodes


def desktop(d: Desk, icons: tuple[str, ...]) -> Screen:
    """The empty desktop with its icons."""
    nodes = [node("list", "Desktop", 0, rect=_r(0, 0, d.width, d.height - 40))]
    nodes += [node("list item", name, 1, rect=_r(8, 8 + 90 * i, 76, 86)) for i, name in enumerate(icons)]
    return Screen(nodes + taskbar(d))


def start_menu(d: Desk, query: str, results: tuple[str, ...]) -> Screen:
    """The Start menu, with search results once something is typed."""
    x, y = 0, d.height - 40 - 640
    nodes = [
        node("window", "Start", 0, rect=_r(x, y, 640, 640)),
        node("edit", "Type here to search", 1, value=query, rect=_r(16, y + 16, 608, 32)),
    ]
    if query:
        nodes.append(node("list", "Best match", 1, rect=_r(16, y + 64, 608, 200)))
        nodes += [
            node("list item", f"{r}, App", 2, rect=_r(24, y + 72 + 48 * i, 592, 44)) for i, r in enumerate(results)
        ]
    else:
        nodes.append(node("list", "Pinned", 1, rect=_r(16, y + 64, 608, 300)))
        pinned = ("Settings", "Microsoft Edge", "Mail", "Calculator", "Notepad", "Photos")
        nodes += [node("list item", p, 2, rect=_r(24 + 100 * (i % 6), y + 80, 96, 80)) for i, p in enumerate(pinned)]
        nodes.append(node("list", "Recommended", 1, rect=_r(16, y + 380, 608, 200)))
        nodes += [
            node("list item", f, 2, rect=_r(24 + 300 * (i % 2), y + 392 + 48 * (i // 2), 296, 44))
            for i, f in enumerate(d.recent)
        ]
    return Screen(nodes)


def notepad(d: Desk, title: str, text: str, line_col: tuple[int, int] = (1, 1)) -> Screen:
    """A Notepad window holding `text`."""
    w, h = min(900, d.width - 100), min(600, d.height - 140)
    nodes = [node("window", f"{title} - Notepad", 0, rect=_w(d, 60, 40, w, h)), node("title bar", f"{title} - Notepad", 1, rect=_w(d, 60, 40, w, 32)),
             node("button", "Minimize", 2, rect=_w(d, 60 + w - 138, 40, 46, 32)), node("button", "Close", 2, rect=_w(d, 60 + w - 46, 40, 46, 32)),
             node("menu bar", "Application", 1, rect=_w(d, 60, 72, w, 24))]  # fmt: skip
    nodes += [
        node("menu item", m, 2, rect=_w(d, 60 + 48 * i, 72, 48, 24))
        for i, m in enumerate(("File", "Edit", "Format", "View", "Help"))
    ]
    nodes += [node("document", "Text Editor", 1, value=text, rect=_w(d, 60, 96, w, h - 120)),
              node("text", f"Ln {line_col[0]}, Col {line_col[1]}", 1, rect=_w(d, 60 + w - 400, 40 + h - 24, 120, 24))]  # fmt: skip
    return Screen(nodes)


def save_dialog(d: Desk, behind: Screen, folder: str, filename: str) -> Screen:
    """The Save As dialog on top of a Notepad window."""
    x, y = 160, 120
    nodes = [
        node("window", "Save As", 0, rect=_w(d, x, y, 720, 460)),
        node("tree item", "Quick access", 1, rect=_w(d, x + 8, y + 60, 160, 24)),
    ]
    nodes += [
        node("tree item", f, 1, rect=_w(d, x + 8, y + 90 + 26 * i, 160, 24))
        for i, f in enumerate(("Desktop", "Documents", "Downloads", "Pictures"))
    ]
    nodes += [node("text", f"Address: {folder}", 1, rect=_w(d, x + 8, y + 32, 700, 24)),
              node("edit", "File name:", 1, value=filename, rect=_w(d, x + 120, y + 380, 480, 24)),
              node("combo box", "Save as type:", 1, value="Text Documents (*.txt)", rect=_w(d, x + 120, y + 408, 480, 24)),
              node("button", "Save", 1, rect=_w(d, x + 520, y + 436, 88, 24)), node("button", "Cancel", 1, rect=_w(d, x + 616, y + 436, 88, 24))]  # fmt: skip
    return Screen(nodes + behind.nodes)


def calculator(d: Desk, display: str, expression: str) -> Screen:
    """The Calculator app in standard mode."""
    x, y = d.width - 420, 60
    nodes = [node("window", "Calculator", 0, rect=_w(d, x, y, 320, 500)), node("text", f"Expression is {expression}", 1, rect=_w(d, x + 8, y + 60, 300, 20)),
             node("text", f"Display is {display}", 1, rect=_w(d, x + 8, y + 84, 300, 56))]  # fmt: skip
    keys = ("Clear entry", "Clear", "Backspace", "Divide by", "Seven", "Eight", "Nine", "Multiply by", "Four", "Five", "Six", "Minus",
            "One", "Two", "Three", "Plus", "Positive negative", "Zero", "Decimal separator", "Equals")  # fmt: skip
    nodes += [
        node("button", k, 1, rect=_w(d, x + 4 + 79 * (i % 4), y + 200 + 58 * (i // 4), 76, 55))
        for i, k in enumerate(keys)
    ]
    if d.calc_history:
        nodes.append(node("list", "History", 1, rect=_w(d, x - 240, y + 40, 236, 440)))
        nodes += [
            node("list item", h, 2, rect=_w(d, x - 236, y + 48 + 52 * i, 228, 48)) for i, h in enumerate(d.calc_history)
        ]
    return Screen(nodes)


def settings(d: Desk, page: str, toggles: dict[str, bool]) -> Screen:
    """The Settings app: the category home, or one page of toggles."""
    nodes = [
        node("window", "Settings", 0, rect=_w(d, 40, 30, 1000, 680)),
        node("edit", "Find a setting", 1, value="", rect=_w(d, 80, 80, 300, 32)),
    ]
    if page == "Home":
        cats = (
            "System",
            "Devices",
            "Network & Internet",
            "Personalization",
            "Apps",
            "Accounts",
            "Time & Language",
            "Privacy",
        )
        nodes += [
            node("list item", c, 1, rect=_w(d, 80 + 230 * (i % 4), 140 + 90 * (i // 4), 220, 80))
            for i, c in enumerate(cats)
        ]
    else:
        nodes += [
            node("button", "Back", 1, rect=_w(d, 40, 62, 40, 32)),
            node("text", page, 1, rect=_w(d, 80, 130, 400, 40)),
        ]
        for i, (name, on) in enumerate(toggles.items()):
            nodes.append(
                node("toggle button", name, 1, state="On" if on else "Off", rect=_w(d, 80, 190 + 60 * i, 44, 20))
            )
        nodes.append(node("text", "Related settings", 1, rect=_w(d, 700, 130, 300, 24)))
        nodes += [node("hyperlink", r, 2, rect=_w(d, 700, 160 + 30 * i, 300, 24)) for i, r in enumerate(d.related)]
    return Screen(nodes)


def explorer(d: Desk, folder: str, items: tuple[str, ...], renaming: str | None = None) -> Screen:
    """File Explorer showing `folder`; `renaming` is the item whose name is being edited."""
    nodes = [
        node("window", f"{folder} - File Explorer", 0, rect=_w(d, 100, 50, 960, 600)),
        node("text", f"Address: This PC > {folder}", 1, rect=_w(d, 200, 90, 700, 24)),
    ]
    nodes += [
        node("tree item", f, 1, rect=_w(d, 104, 140 + 26 * i, 180, 24))
        for i, f in enumerate(("Quick access", "Desktop", "Documents", "Downloads", "Music", "Pictures"))
    ]
    nodes.append(node("list", "Items View", 1, rect=_w(d, 300, 130, 750, 480)))
    for i, item in enumerate(items):
        rect = _w(d, 304, 134 + 24 * i, 500, 22)
        nodes.append(
            node("edit", item, 2, value=item, rect=rect) if item == renaming else node("list item", item, 2, rect=rect)
        )
    nodes.append(node("text", f"{len(items)} items", 1, rect=_w(d, 100, 626, 200, 24)))
    return Screen(nodes)
