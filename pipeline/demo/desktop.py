"""Demo corpus for the ``os`` domain: a computer-use agent on a simulated Windows-like desktop.

(The module is called ``desktop`` so that it never shadows the standard library's ``os``.)

Format: lwm-jsonl, the sandbox's native format. Two-line example of a native turn::

    {"action": "{\\"action\\": \\"click\\", \\"x\\": 24, \\"y\\": 748}",
     "observation": "[1] window \\"Start\\" rect=(0,88,640,728)\\n  [2] edit \\"Type here to search\\" value=\\"\\" ..."}

Mapping: each turn is one mouse or keyboard action as JSON (click / double_click at screen
coordinates, type, press, hotkey, scroll); the observation is the desktop accessibility tree
after it: the focused window's controls and the taskbar as indexed, indented lines with screen
rectangles. Apps: Notepad with its Save dialog, Calculator, Settings toggles, File Explorer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.demo import vocab
from pipeline.demo.common import DomainSpec, Episode, action_json, build_corpus, make_turn, outcome_of, turn_budget
from pipeline.demo.desktop_apps import (
    Desk,
    Screen,
    calculator,
    desktop,
    explorer,
    notepad,
    save_dialog,
    settings,
    start_menu,
)

ACTION_SPACE = (
    "Mouse and keyboard actions, one JSON object per step (coordinates in screen pixels):\n"
    '{"action": "click"|"double_click"|"right_click", "x": int, "y": int}\n{"action": "type", "text": str}\n'
    '{"action": "press", "key": str}\n{"action": "hotkey", "keys": [str, ...]}\n{"action": "scroll", "x": int, "y": int, "dy": int}'
)
DEMONSTRATIONS = (
    ('{"action": "hotkey", "keys": ["win", "d"]}',
     '[1] list "Desktop" rect=(0,0,1366,728)\n  [2] list item "Recycle Bin" rect=(8,8,84,94)\n[3] pane "Taskbar" rect=(0,728,1366,768)'),
)  # fmt: skip
SIMULATION_INSTRUCTIONS = (
    "Return the accessibility tree of the desktop after the action, with fresh [index] numbers and rectangles.",
    "You are the operating system. Show the focused window and the taskbar exactly as UI Automation reports them.",
)
_RELATED = ("Sound", "Notifications & actions", "Power & sleep", "Storage", "Multitasking", "Projecting to this PC", "Clipboard",
            "Remote Desktop", "About", "Bluetooth & other devices", "Printers & scanners", "Mouse", "Typing", "Pen & Windows Ink")  # fmt: skip
_ICONS = (
    "Recycle Bin",
    "This PC",
    "Budget 2024.xlsx",
    "notes.txt",
    "Zoom",
    "Visual Studio Code",
    "Steam",
    "Spotify",
    "GIMP 2.10",
)

Move = tuple[dict, Screen]
Step = Callable[[Screen], Move]


@dataclass(frozen=True)
class Task:
    kind: str
    description: str
    params: dict


def _click(screen: Screen, name: str, nxt: Screen, kind: str = "click", role: str | None = None) -> Move:
    x, y = screen.center(name, role)
    return {"action": kind, "x": x, "y": y}, nxt


def _launch(d: Desk, app: str, query: str, opened: Screen) -> list[Step]:
    """Open an app through the Start menu search."""
    return [
        lambda s: _click(s, "Start", start_menu(d, "", ()), role="button"),
        lambda s: ({"action": "type", "text": query}, start_menu(d, query, (app, f"{app} settings"))),
        lambda s: ({"action": "press", "key": "enter"}, opened),
    ]


def _note_route(d: Desk, p: dict) -> list[Step]:
    text, name, folder = p["text"], p["name"], p["folder"]
    lines = text.split("\n")
    typed = notepad(d, "*Untitled", text, (len(lines), len(lines[-1]) + 1))
    saved = notepad(d, f"{name}.txt", text, (len(lines), len(lines[-1]) + 1))
    # The Save dialog opens in Documents; another folder takes one click in its tree.
    pick_folder = [lambda s: _click(s, folder, save_dialog(d, typed, f"This PC > {folder}", "*.txt"), role="tree item")]
    return [
        *_launch(d, "Notepad", "notepad", notepad(d, "Untitled", "")),
        lambda s: ({"action": "type", "text": text}, typed),
        lambda s: ({"action": "hotkey", "keys": ["ctrl", "s"]}, save_dialog(d, typed, "This PC > Documents", "*.txt")),
        *(pick_folder if folder != "Documents" else []),
        lambda s: (
            {"action": "type", "text": f"{name}.txt"},
            save_dialog(d, typed, f"This PC > {folder}", f"{name}.txt"),
        ),
        lambda s: ({"action": "press", "key": "enter"}, saved),
    ]


def _calc_route(d: Desk, p: dict) -> list[Step]:
    a, b, op = p["a"], p["b"], p["op"]
    result = {"*": a * b, "+": a + b, "-": a - b}[op]
    shown = {"*": "×", "+": "+", "-": "−"}[op]
    return [
        *_launch(d, "Calculator", "calc", calculator(d, "0", "")),
        lambda s: ({"action": "type", "text": f"{a}{op}{b}="}, calculator(d, f"{result:,}", f"{a} {shown} {b}=")),
    ]


def _settings_route(d: Desk, p: dict) -> list[Step]:
    page, toggles, target = p["page"], dict(p["toggles"]), p["toggle"]
    after = {**toggles, target: not toggles[target]}
    return [
        lambda s: _click(s, "Start", start_menu(d, "", ()), role="button"),
        lambda s: _click(s, "Settings", settings(d, "Home", {})),
        lambda s: _click(s, page, settings(d, page, toggles)),
        lambda s: _click(s, target, settings(d, page, after)),
    ]


def _folder_route(d: Desk, p: dict) -> list[Step]:
    items, name = tuple(p["items"]), p["name"]
    return [
        lambda s: _click(
            s,
            "File Explorer",
            explorer(d, "Quick access", ("Desktop", "Downloads", "Documents", "Pictures", *d.recent)),
            role="button",
        ),
        lambda s: _click(s, "Documents", explorer(d, "Documents", items), role="tree item"),
        lambda s: (
            {"action": "hotkey", "keys": ["ctrl", "shift", "n"]},
            explorer(d, "Documents", (*items, "New folder"), "New folder"),
        ),
        lambda s: ({"action": "type", "text": name}, explorer(d, "Documents", (*items, name), name)),
        lambda s: ({"action": "press", "key": "enter"}, explorer(d, "Documents", tuple(sorted((*items, name))))),
    ]


_ROUTES = {"note": _note_route, "calc": _calc_route, "settings": _settings_route, "folder": _folder_route}
_TOGGLE_PAGES = {
    "System": ("Night light", "Focus assist", "Tablet mode", "Storage Sense"),
    "Devices": ("Bluetooth", "Show notifications for Bluetooth", "Autoplay", "Use Swift Pair"),
    "Network & Internet": ("Wi-Fi", "Airplane mode", "Mobile hotspot", "Metered connection"),
    "Privacy": ("Location", "Camera access", "Microphone access", "Advertising ID"),
}


def _note_text(rng: random.Random) -> str:
    """A short note, a page of prose, or meeting minutes with many names and numbers."""
    kind = rng.choice(("short", "page", "minutes"))
    if kind == "short":
        return vocab.paragraph(rng, rng.randint(1, 2))
    if kind == "page":
        return "\n".join(vocab.paragraph(rng, rng.randint(2, 3)) for _ in range(rng.randint(2, 4)))
    people = [vocab.person(rng) for _ in range(rng.randint(3, 6))]
    lines = [f"Minutes, {rng.choice(vocab.COMPANIES)} {rng.choice(vocab.NOUNS)} review, {rng.choice(vocab.MONTHS)} {rng.randint(1, 28)}",
             f"Attendees: {', '.join(people)}", "Action items:"]  # fmt: skip
    for _ in range(rng.randint(10, 22)):
        ticket = f"{rng.choice(('OPS', 'FIN', 'ENG', 'LEGAL', 'HR'))}-{rng.randint(100, 9999)}"
        lines.append(f"- {rng.choice(people)}: {rng.choice(vocab.VERBS)} the {rng.choice(vocab.ADJECTIVES)} {rng.choice(vocab.NOUNS)} "
                     f"list for {rng.choice(vocab.COMPANIES)} in {rng.choice(vocab.CITIES)} by {rng.choice(vocab.MONTHS)} {rng.randint(1, 28)} ({ticket})")  # fmt: skip
    return "\n".join(lines)


def new_task(rng: random.Random) -> Task:
    """A desktop chore: write and save a note, compute, flip a setting, make a folder."""
    kind = rng.choice(("note", "note", "calc", "settings", "folder"))
    if kind == "note":
        text = _note_text(rng)
        name = f"{rng.choice(vocab.NOUNS)}_{rng.choice(('notes', 'draft', 'todo', 'summary'))}_{rng.randint(1, 31)}"
        folder = rng.choice(("Documents", "Desktop", "Downloads"))
        return Task(
            kind,
            f"Open Notepad, write the following text and save it as {name}.txt in {folder}:\n{text}",
            {"text": text, "name": name, "folder": folder},
        )
    if kind == "calc":
        a, b, op = rng.randint(12, 9999), rng.randint(2, 999), rng.choice("*+-")
        return Task(kind, f"Use the Calculator app to work out {a} {op} {b}.", {"a": a, "b": b, "op": op})
    if kind == "settings":
        page = rng.choice(sorted(_TOGGLE_PAGES))
        toggles = {t: rng.random() < 0.5 for t in _TOGGLE_PAGES[page]}
        target = rng.choice(sorted(toggles))
        verb = "off" if toggles[target] else "on"
        return Task(
            kind,
            f"Turn {verb} {target} in Settings > {page}.",
            {"page": page, "toggles": sorted(toggles.items()), "toggle": target},
        )
    items = tuple(
        sorted(
            f"{rng.choice(vocab.NOUNS)}_{rng.randint(1, 99)}.{rng.choice(('docx', 'pdf', 'xlsx'))}"
            for _ in range(rng.randint(2, 8))
        )
    )
    name = f"{rng.choice(vocab.COMPANIES).split()[0]} {rng.choice(('Invoices', 'Contracts', 'Photos', 'Taxes'))} {rng.randint(2019, 2025)}"
    return Task(kind, f'Create a folder named "{name}" in Documents.', {"items": items, "name": name})


def _detour(rng: random.Random, d: Desk, home: Screen, screen: Screen) -> list[Move]:
    # Peek at the Start menu and dismiss it, or show the desktop and come back; both end on `screen`.
    if rng.random() < 0.5:
        return [
            ({"action": "press", "key": "win"}, start_menu(d, "", ())),
            ({"action": "press", "key": "escape"}, screen),
        ]
    return [({"action": "hotkey", "keys": ["win", "d"]}, home), ({"action": "hotkey", "keys": ["win", "d"]}, screen)]


def play_attempt(rng: random.Random, task: Task) -> Episode:
    """Follow the task's route from the desktop, with detours; short budgets stop early."""
    width, height = rng.choice(((1366, 768), (1920, 1080), (1280, 800), (1536, 864)))
    d = Desk(
        width,
        height,
        f"{rng.randint(1, 12)}:{rng.randint(0, 59):02d} {rng.choice(('AM', 'PM'))} {rng.randint(1, 12)}/{rng.randint(1, 28)}/2024",
        offset=(rng.randint(-40, 80), rng.randint(0, 24)),
        recent=tuple(f"{rng.choice(vocab.NOUNS)}_{rng.choice(vocab.CITIES).lower()}_{rng.randint(1, 99)}.{rng.choice(('docx', 'pdf', 'xlsx', 'png'))}"
                     for _ in range(rng.randint(2, 6))),
        calc_history=tuple(f"{rng.randint(2, 999)} {rng.choice('×+−÷')} {rng.randint(2, 99)} = {rng.randint(4, 99999):,}" for _ in range(rng.randint(0, 6))),
        related=tuple(rng.sample(_RELATED, rng.randint(2, 5))),
    )  # fmt: skip
    home = screen = desktop(d, tuple(rng.sample(_ICONS, rng.randint(3, 7))))
    initial = screen.text()
    steps = _ROUTES[task.kind](d, task.params)
    budget = turn_budget(rng)
    turns = []
    while len(turns) < budget and steps:
        left = budget - len(turns)
        moves = _detour(rng, d, home, screen) if rng.random() < min(0.5, (left - len(steps)) / left) else []
        if not moves or moves[0][1].text() == screen.text():
            moves = [steps.pop(0)(screen)]  # a detour that changes nothing would be filtered out anyway
        for action, nxt in moves[:left]:
            screen = nxt
            turns.append(
                make_turn(action_json(action), screen.text(), rng.choice((None, None, "Continue with the task.")))
            )
    return Episode(task.description, ACTION_SPACE, turns, initial_state=initial, outcome=outcome_of(rng, not steps))


SPEC = DomainSpec("os", new_task, play_attempt, DEMONSTRATIONS, SIMULATION_INSTRUCTIONS)


def generate_desktop(seed: int, n: int) -> list[dict]:
    """`n` os trajectory dicts in the lwm-jsonl layout."""
    return build_corpus(SPEC, seed, n)
