"""The simulated phone of the android demo: views, app screens and their raw uiautomator XML.

A screen is a tree of `Node` views (class, bounds on a 1080×2400 display, text, resource id,
content description, flags) inside the app window; `screen_xml` writes it as one ``uiautomator
dump`` document with the window decor (status and navigation bar backgrounds) a real dump has.
Full-screen splash screens carry only a spinner and no decor, as splash activities do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.sax.saxutils import escape

W, H, TOP, BOTTOM = 1080, 2400, 63, 2274
LAUNCHER = "com.google.android.apps.nexuslauncher"
APPS = {
    "Settings": "com.android.settings", "Clock": "com.google.android.deskclock",
    "Contacts": "com.google.android.contacts", "Messages": "com.google.android.apps.messaging",
    "Gmail": "com.google.android.gm", "Keep Notes": "com.google.android.keep",
    "ShopMart": "com.shopmart.android", "Maps": "com.google.android.apps.maps",
}  # fmt: skip


@dataclass
class Node:
    """One view: class, bounds, text, resource id, content description, flags and children."""

    cls: str
    bounds: tuple[int, int, int, int]
    text: str = ""
    rid: str = ""
    desc: str = ""
    flags: tuple[str, ...] = ()
    kids: list[Node] = field(default_factory=list)


@dataclass
class Screen:
    package: str
    nodes: list[Node]
    fullscreen: bool = False


# ---- widgets ----------------------------------------------------------------------------------


def tv(text: str, box: tuple[int, int, int, int], rid: str = "", *flags: str) -> Node:
    return Node("android.widget.TextView", box, text=text, rid=rid, flags=flags)


def btn(label: str, box: tuple[int, int, int, int], rid: str = "", cls: str = "android.widget.Button") -> Node:
    if cls == "android.widget.ImageButton":
        return Node(cls, box, desc=label, rid=rid, flags=("clickable",))
    return Node(cls, box, text=label, rid=rid, flags=("clickable",))


def edit(rid: str, value: str, hint: str, box: tuple[int, int, int, int], focused: bool = False) -> Node:
    # uiautomator reports an empty field's hint as its text.
    flags = ("clickable", "long-clickable", "focused") if focused else ("clickable", "long-clickable")
    return Node("android.widget.EditText", box, text=value or hint, rid=rid, flags=flags)


def toolbar(pkg: str, title: str, *actions: str) -> list[Node]:
    nodes = [btn("Navigate up", (0, TOP, 154, 217), "", "android.widget.ImageButton"), tv(title, (198, 100, 760, 180))]
    for i, desc in enumerate(actions):
        x = W - 154 * (i + 1)
        nodes.append(
            btn(
                desc,
                (x, TOP, x + 154, 217),
                f"{pkg}:id/action_{desc.lower().replace(' ', '_')}",
                "android.widget.ImageButton",
            )
        )
    return [Node("android.view.ViewGroup", (0, TOP, W, 217), rid=f"{pkg}:id/toolbar", kids=nodes)]


def rows(
    items: list[tuple[str, str]], top: int, height: int = 190, switches: dict[str, bool] | None = None
) -> list[Node]:
    out = []
    for i, (title, summary) in enumerate(items):
        y = top + i * height
        kids = [tv(title, (198, y + 40, 800, y + 100), "android:id/title")]
        if summary:
            kids.append(tv(summary, (198, y + 100, 900, y + 150), "android:id/summary"))
        if switches and title in switches:
            on = ("checked",) if switches[title] else ()
            kids.append(
                Node(
                    "android.widget.Switch",
                    (880, y + 30, 1036, y + 160),
                    rid="android:id/switch_widget",
                    flags=("checkable", *on),
                )
            )
        out.append(Node("android.widget.LinearLayout", (0, y, W, y + height), flags=("clickable",), kids=kids))
    return out


def scroll_list(pkg: str, kids: list[Node], top: int = 217) -> Node:
    return Node(
        "androidx.recyclerview.widget.RecyclerView",
        (0, top, W, BOTTOM),
        rid=f"{pkg}:id/list",
        flags=("scrollable",),
        kids=kids,
    )


def find(screen: Screen, label: str) -> Node:
    """The first node showing `label` as text or description (document order)."""
    stack = list(reversed(screen.nodes))
    while stack:
        node = stack.pop()
        if label in (node.text, node.desc):
            return node
        stack.extend(reversed(node.kids))
    raise KeyError(f"no element {label!r} on the {screen.package} screen")


# ---- XML (raw uiautomator dump dialect) -------------------------------------------------------

_XML_FLAGS = (
    "checkable",
    "checked",
    "clickable",
    "enabled",
    "focusable",
    "focused",
    "scrollable",
    "long-clickable",
    "password",
    "selected",
)


def screen_xml(screen: Screen) -> str:
    """The screen as one raw ``uiautomator dump`` document (window decor included)."""
    if screen.fullscreen:
        root = Node("android.widget.FrameLayout", (0, 0, W, H), kids=screen.nodes)
        decor = [Node("android.view.View", (0, 0, 0, 0), rid="android:id/navigationBarBackground")]
    else:
        content = Node("android.widget.FrameLayout", (0, TOP, W, BOTTOM), rid="android:id/content", kids=screen.nodes)
        root = Node(
            "android.widget.FrameLayout",
            (0, 0, W, H),
            kids=[Node("android.widget.LinearLayout", (0, 0, W, H), kids=[content])],
        )
        decor = [
            Node("android.view.View", (0, 0, W, TOP), rid="android:id/statusBarBackground"),
            Node("android.view.View", (0, BOTTOM, W, H), rid="android:id/navigationBarBackground"),
        ]
    root.kids = [*root.kids, *decor]
    out = ["<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">"]
    _node_xml(root, screen.package, 0, out)
    out.append("</hierarchy>")
    return "".join(out)


def _node_xml(node: Node, pkg: str, index: int, out: list[str]) -> None:
    flags = set(node.flags) | ({"focusable"} if {"clickable", "checkable"} & set(node.flags) else set())
    values = {f: "true" if f in flags else "false" for f in _XML_FLAGS}
    values["enabled"] = "false" if "disabled" in flags else "true"
    x1, y1, x2, y2 = node.bounds
    attrs = " ".join(f'{f}="{values[f]}"' for f in _XML_FLAGS)
    out.append(
        f'<node index="{index}" text="{_q(node.text)}" resource-id="{_q(node.rid)}" class="{node.cls}" '
        f'package="{pkg}" content-desc="{_q(node.desc)}" {attrs} bounds="[{x1},{y1}][{x2},{y2}]"'
    )
    if not node.kids:
        out.append(" />")
        return
    out.append(">")
    for i, kid in enumerate(node.kids):
        _node_xml(kid, pkg, i, out)
    out.append("</node>")


def _q(text: str) -> str:
    return escape(text, {'"': "&quot;", "\n": "&#10;"})


# ---- app screens --------------------------------------------------------------------------------


def home_screen() -> Screen:
    icons = []
    for i, label in enumerate(APPS):
        x, y = 40 + (i % 4) * 250, 1500 + (i // 4) * 330
        icons.append(
            Node("android.widget.TextView", (x, y, x + 250, y + 300), text=label, desc=label, flags=("clickable",))
        )
    search = Node(
        "android.widget.FrameLayout",
        (60, 2080, 1020, 2230),
        rid=f"{LAUNCHER}:id/search_container_hotseat",
        desc="Search",
        flags=("clickable",),
    )
    clock = tv("Mon, Jun 3", (60, 200, 600, 280), f"{LAUNCHER}:id/date")
    return Screen(
        LAUNCHER,
        [clock, Node("android.view.ViewGroup", (0, 1450, W, 2200), rid=f"{LAUNCHER}:id/workspace", kids=icons), search],
    )


def loading_screen(pkg: str) -> Screen:
    # A splash activity: a bare spinner, which renders as an empty screen.
    return Screen(pkg, [Node("android.widget.ProgressBar", (440, 1100, 640, 1300))], fullscreen=True)


SETTINGS_ROWS = [
    ("Network & internet", "Wi‑Fi, mobile, data usage"),
    ("Connected devices", "Bluetooth, pairing"),
    ("Apps", "Recent apps, default apps"),
    ("Notifications", "Notification history, conversations"),
    ("Battery", "82% - Should last until 11:30 PM"),
    ("Storage", "61% used - 49.8 GB free"),
    ("Sound & vibration", "Volume, haptics, Do Not Disturb"),
    ("Display", "Dark theme, font size, brightness"),
]
SETTINGS_PAGES = {  # toggle → (the main-list row that leads to it, the rows of its page)
    "Wi‑Fi": (
        "Network & internet",
        [
            ("Wi‑Fi", "HomeNet-5G"),
            ("Mobile network", "T-Mobile"),
            ("Airplane mode", ""),
            ("Hotspot & tethering", "Off"),
        ],
    ),
    "Bluetooth": (
        "Connected devices",
        [("Bluetooth", "Visible as Pixel 7"), ("Pair new device", ""), ("Connection preferences", "NFC, Android Auto")],
    ),
    "Dark theme": (
        "Display",
        [
            ("Brightness level", "54%"),
            ("Adaptive brightness", ""),
            ("Dark theme", "Will never turn on automatically"),
            ("Screen timeout", "After 30 seconds"),
        ],
    ),
}


def settings_main(offset: int = 0) -> Screen:
    pkg = APPS["Settings"]
    search = Node(
        "android.view.ViewGroup",
        (22, 88, 1058, 220),
        rid=f"{pkg}:id/search_action_bar",
        flags=("clickable",),
        kids=[tv("Search settings", (385, 124, 690, 183))],
    )
    return Screen(pkg, [search, scroll_list(pkg, rows(SETTINGS_ROWS[offset : offset + 7], 260), 240)])


def settings_page(toggle: str, on: bool) -> Screen:
    pkg = APPS["Settings"]
    category, items = SETTINGS_PAGES[toggle]
    items = [(t, ("Off" if not on else s) if t == toggle else s) for t, s in items]
    switches = {toggle: on, "Airplane mode": False, "Adaptive brightness": True}
    return Screen(
        pkg, [*toolbar(pkg, category, "Search settings"), scroll_list(pkg, rows(items, 240, switches=switches))]
    )


def clock_alarms(alarms: list[tuple[str, bool]]) -> Screen:
    pkg = APPS["Clock"]
    tabs = []
    for i, tab in enumerate(("Alarm", "Clock", "Timer", "Stopwatch", "Bedtime")):
        flags = ("clickable", "selected") if tab == "Alarm" else ("clickable",)
        tabs.append(Node("android.widget.FrameLayout", (i * 216, 2100, i * 216 + 216, 2274), desc=tab, flags=flags))
    items = []
    for i, (time, on) in enumerate(alarms):
        y = 260 + i * 260
        switch_flags = ("checkable", "checked") if on else ("checkable",)
        items += [
            tv(time, (60, y, 600, y + 150), f"{pkg}:id/digital_clock"),
            tv("Tomorrow" if on else "Not scheduled", (60, y + 150, 600, y + 210), f"{pkg}:id/upcoming_instance_label"),
            Node("android.widget.Switch", (860, y + 40, 1020, y + 160), rid=f"{pkg}:id/onoff", flags=switch_flags),
        ]
    fab = btn("Add alarm", (440, 1880, 640, 2080), f"{pkg}:id/fab", "android.widget.ImageButton")
    return Screen(pkg, [scroll_list(pkg, items), fab, *tabs])


def time_picker(hour: str, minute: str, focus: str) -> Screen:
    pkg = APPS["Clock"]
    nodes = [
        tv("Enter time", (120, 700, 900, 780), f"{pkg}:id/header_title"),
        edit(f"{pkg}:id/input_hour", hour, "Hour", (140, 820, 480, 1040), focus == "hour"),
        edit(f"{pkg}:id/input_minute", minute, "Minute", (600, 820, 940, 1040), focus == "minute"),
        btn("Cancel", (520, 1180, 740, 1300), "android:id/button2"),
        btn("OK", (760, 1180, 960, 1300), "android:id/button1"),
    ]
    return Screen(pkg, [Node("android.widget.FrameLayout", (80, 640, 1000, 1360), rid=f"{pkg}:id/dialog", kids=nodes)])


def contact_form(first: str, last: str, phone: str, focus: str) -> Screen:
    pkg = APPS["Contacts"]
    fields = [edit(f"{pkg}:id/first_name", first, "First name", (180, 520, 1040, 660), focus == "first"),
              edit(f"{pkg}:id/last_name", last, "Last name", (180, 680, 1040, 820), focus == "last"),
              edit(f"{pkg}:id/phone", phone, "Phone", (180, 900, 1040, 1040), focus == "phone")]  # fmt: skip
    return Screen(
        pkg,
        [
            *toolbar(pkg, "Create contact"),
            btn("Save", (820, 90, 1040, 190), f"{pkg}:id/editor_menu_save_button"),
            *fields,
        ],
    )


def list_screen(pkg: str, title: str, items: list[tuple[str, str]], fab: str) -> Screen:
    bar = Node(
        "android.widget.FrameLayout",
        (40, 90, 1040, 210),
        rid=f"{pkg}:id/search_bar",
        flags=("clickable",),
        kids=[tv(title, (150, 120, 800, 180))],
    )
    return Screen(
        pkg,
        [
            bar,
            scroll_list(pkg, rows(items, 240, 170)),
            btn(fab, (700, 1900, 1040, 2060), f"{pkg}:id/fab", "android.widget.ImageButton"),
        ],
    )


def detail_screen(pkg: str, title: str, lines: list[str], buttons: list[str]) -> Screen:
    nodes = [*toolbar(pkg, title, "More options"), tv(title, (60, 300, 1020, 420), f"{pkg}:id/large_title")]
    nodes += [tv(line, (60, 460 + i * 90, 1020, 540 + i * 90), f"{pkg}:id/detail_{i}") for i, line in enumerate(lines)]
    nodes += [btn(b, (60 + i * 330, 1100, 360 + i * 330, 1240), f"{pkg}:id/button_{i}") for i, b in enumerate(buttons)]
    return Screen(pkg, nodes)


def editor(pkg: str, title: str, fields: list[tuple[str, str, str]], focus: str, send: str) -> Screen:
    nodes = [*toolbar(pkg, title, send)]
    y = 260
    for rid, value, hint in fields:
        height = 900 if rid.endswith("body") else 150
        nodes.append(edit(f"{pkg}:id/{rid}", value, hint, (40, y, 1040, y + height), focus == rid))
        y += height + 20
    return Screen(pkg, nodes)


def typing_screen(pkg: str, rid: str, query: str, suggestions: list[str]) -> Screen:
    nodes = [
        btn("Navigate up", (0, 90, 140, 210), "", "android.widget.ImageButton"),
        edit(f"{pkg}:id/{rid}", query, "Search", (140, 90, 1040, 210), True),
    ]
    return Screen(pkg, [*nodes, scroll_list(pkg, rows([(s, "") for s in suggestions], 240, 150))])
