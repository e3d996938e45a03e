"""Demo corpus for the ``android`` domain: a seeded simulator of a phone and eight apps.

Native form (``native=True``): raw ``uiautomator dump`` screens ``episodes/ep-NNNN/NNN.xml`` and
the step log ``android.actions.jsonl`` of the `stages.ingest.uiautomator` contract::

    {"episode": "ep-0001", "step": 1, "task": "Turn on Wi‑Fi", "task_id": "demo-android-s0-task0000",
     "app": "com.android.settings", "before": "episodes/ep-0001/000.xml",
     "action": {"action_type": "open_app", "app": "Settings"}, "dump": "episodes/ep-0001/001.xml"}

``native=False`` writes ``android.jsonl`` (lwm-jsonl), made by ingesting that native form with the
uiautomator adapter, so both forms give the same trajectories. The apps — launcher, Settings,
Clock, Contacts, Messages, Gmail, Keep Notes, a shopping app and Maps — are element trees on a
1080×2400 screen (`pipeline.demo.android_screens`); a task (toggle a setting, set an alarm, add
a contact, send a message or an e-mail, write a note, buy something, get directions) is tried
1–4 times, each attempt 2–12 steps with its own detours (a wrong page and back, a scroll, a
give-up), and the attempts share the task's ``task_id`` (the split key). Long typed texts
(notes, e-mail bodies) make screens that mostly echo the action; full-screen loading states
render empty; search screens repeat the query among new content. Returned paths are the files
to give the pipeline: the log, which reads its screens itself (a stale ``episodes/`` from a
larger earlier run is left in place but never referenced).
"""

from __future__ import annotations

import json
import os
import posixpath
import random
import uuid
from typing import Any

from pipeline.demo import vocab
from pipeline.demo.android_screens import (
    APPS,
    SETTINGS_PAGES,
    Screen,
    clock_alarms,
    contact_form,
    detail_screen,
    editor,
    find,
    home_screen,
    list_screen,
    loading_screen,
    screen_xml,
    settings_main,
    settings_page,
    time_picker,
    typing_screen,
)
from pipeline.demo.common import seeded_rng, write_jsonl_atomic
from schemas.errors import InvalidRecord
from stages.ingest.reading import InputUnit, filesystem, join_uri
from stages.ingest.uiautomator import ADAPTER as UIAUTOMATOR

LOG_NAME, JSONL_NAME = "android.actions.jsonl", "android.jsonl"
ATTEMPTS = (1, 2, 2, 3, 3, 4)
MAX_STEPS, GIVE_UP_RATE = 12, 0.1
DEFAULT_N = 240
NOTE_SENTENCES = (
    "Pick up the dry cleaning before six on Thursday", "Call the plumber about the leaking kitchen tap",
    "Remember to water the basil and the tomato seedlings", "Book a table for four at the Lebanese place downtown",
    "Renew the car insurance before the policy lapses next month", "Ask Priya whether the projector works with USB-C",
    "Buy oat milk, rye bread, lemons, eggs and coffee beans", "Send the signed lease back to the landlord by Friday",
    "Check train times to {city} for the long weekend", "Move the dentist appointment from Monday morning to Wednesday",
    "Draft slides for the quarterly review with the new revenue chart", "Return the library books about {topic}",
    "Transfer rent money and pay the electricity bill", "Find a birthday gift for grandma, maybe a silk scarf",
    "Print boarding passes and pack the charger adapter", "Schedule a vaccine booster at the pharmacy counter",
    "Clean out the garage shelves and donate old paint cans", "Compare quotes from three movers for the move",
    "Fix the squeaky hinge on the bathroom cabinet door", "Order replacement filters for the vacuum and the purifier",
    "Email the school about the field trip permission form", "Practice the guitar chord changes for twenty minutes",
    "Jog three laps around the reservoir if it stops raining", "Label the freezer boxes with dates and contents",
    "Ask the neighbours to collect parcels while we are away", "Upload scanned receipts to the expense portal",
    "Try the lentil curry recipe with extra ginger and cumin", "Defrost salmon overnight for tomorrow's supper",
    "Update the résumé with the Juniper Robotics internship", "Sort winter jackets and swap them into the attic",
    "Measure the hallway wall for new picture frames", "Cancel the unused streaming subscription before renewal",
)  # fmt: skip


# ---- tasks ---------------------------------------------------------------------------------------


class Attempt:
    """Steps of one simulated attempt: (action, screen after it), starting from `start`."""

    def __init__(self, rng: random.Random, start: Screen) -> None:
        self.rng, self.start, self.screen = rng, start, start
        self.steps: list[tuple[dict, Screen]] = []

    def act(self, action: dict, after: Screen) -> None:
        self.steps.append((action, after))
        self.screen = after

    def click(self, label: str, after: Screen) -> None:
        x1, y1, x2, y2 = find(self.screen, label).bounds
        j = self.rng.randint(-12, 12)
        self.act({"action_type": "click", "x": (x1 + x2) // 2 + j, "y": (y1 + y2) // 2 - j}, after)

    def type_text(self, text: str, after: Screen) -> None:
        self.act({"action_type": "type", "text": text}, after)

    def open(self, app: str, first: Screen, splash: bool = False) -> None:
        """Launch `app` (by intent or by its launcher icon); a splash screen costs a wait."""
        action_first = {"action_type": "open_app", "app": app}
        if splash:
            self.act(action_first, loading_screen(first.package))
            self.act({"action_type": "wait"}, first)
        elif self.rng.random() < 0.5:
            self.act(action_first, first)
        else:
            self.click(app, first)

    def finish(self, success: bool = True) -> None:
        action = (
            {"action_type": "complete", "status": "successful"}
            if success
            else {"action_type": "terminate", "status": "infeasible"}
        )
        self.act(action, self.screen)


def task_toggle(rng: random.Random) -> tuple[str, str, Any]:
    toggle, on = rng.choice(list(SETTINGS_PAGES)), rng.random() < 0.6
    return f"Turn {'on' if on else 'off'} {toggle}", "Settings", (toggle, on)


def play_toggle(a: Attempt, params: Any) -> None:
    toggle, on = params
    category = SETTINGS_PAGES[toggle][0]
    a.open("Settings", settings_main())
    offset = 1 if category == "Display" else 0
    if offset or a.rng.random() < 0.2:  # Display is below the fold; others sometimes scroll past and back
        a.act({"action_type": "swipe", "direction": "up"}, settings_main(1))
        if not offset:
            a.act({"action_type": "swipe", "direction": "down"}, settings_main(0))
    if a.rng.random() < 0.25:  # a detour: the wrong page, then back
        a.click("Apps", detail_screen(APPS["Settings"], "Apps", ["See all 41 apps", "Default apps"], ["Open"]))
        a.act({"action_type": "back"}, settings_main(offset))
    a.click(category, settings_page(toggle, not on))
    a.click(toggle, settings_page(toggle, on))
    a.finish()


def task_alarm(rng: random.Random) -> tuple[str, str, Any]:
    hour, minute = rng.randint(5, 11), rng.choice(("00", "15", "30", "45"))
    return f"Set an alarm for {hour}:{minute} AM", "Clock", (str(hour), minute)


def play_alarm(a: Attempt, params: Any) -> None:
    hour, minute = params
    existing = [("6:30 AM", False), ("8:00 AM", True)][: a.rng.randint(0, 2)]
    a.open("Clock", clock_alarms(existing))
    a.click("Add alarm", time_picker("", "", "hour"))
    a.type_text(hour, time_picker(hour, "", "hour"))
    a.click("Minute", time_picker(hour, "", "minute"))
    a.type_text(minute, time_picker(hour, minute, "minute"))
    a.click("OK", clock_alarms([*existing, (f"{hour}:{minute} AM", True)]))
    a.finish()


def task_contact(rng: random.Random) -> tuple[str, str, Any]:
    first, last = rng.choice(vocab.FIRST_NAMES), rng.choice(vocab.LAST_NAMES)
    phone = f"+1 {rng.randint(201, 989)}-{rng.randint(200, 999)}-{rng.randint(1000, 9999)}"
    return f"Add a contact named {first} {last} with phone number {phone}", "Contacts", (first, last, phone)


def play_contact(a: Attempt, params: Any) -> None:
    first, last, phone = params
    pkg = APPS["Contacts"]
    people = sorted({vocab.person(a.rng) for _ in range(5)})
    a.open("Contacts", list_screen(pkg, "Search contacts", [(p, "Mobile") for p in people], "Create contact"))
    a.click("Create contact", contact_form("", "", "", "first"))
    a.type_text(first, contact_form(first, "", "", "first"))
    a.click("Last name", contact_form(first, "", "", "last"))
    a.type_text(last, contact_form(first, last, "", "last"))
    a.click("Phone", contact_form(first, last, "", "phone"))
    a.type_text(phone, contact_form(first, last, phone, "phone"))
    a.click(
        "Save", detail_screen(pkg, f"{first} {last}", [f"Mobile {phone}", "Added just now"], ["Call", "Text", "Video"])
    )
    a.finish()


def task_message(rng: random.Random) -> tuple[str, str, Any]:
    name = vocab.person(rng)
    text = rng.choice(
        (
            "Running ten minutes late, save me a seat",
            "Can you send me the address for tonight?",
            f"Landed in {rng.choice(vocab.CITIES)}, will call you after dinner",
            "Happy birthday! Lunch is on me this week",
        )
    )
    return f'Send a text message to {name} saying "{text}"', "Messages", (name, text)


def play_message(a: Attempt, params: Any) -> None:
    name, text = params
    pkg = APPS["Messages"]
    chats = [
        (vocab.person(a.rng), a.rng.choice(("See you soon", "Thanks!", "Photo", "Ok sounds good"))) for _ in range(4)
    ]
    a.open("Messages", list_screen(pkg, "Search conversations", chats, "Start chat"))
    a.click(
        "Start chat",
        typing_screen(pkg, "recipient", "", ["Create group", *sorted({vocab.person(a.rng) for _ in range(3)})]),
    )
    a.type_text(
        name.split()[0],
        typing_screen(pkg, "recipient", name.split()[0], [name, f"{name.split()[0]} {a.rng.choice(vocab.LAST_NAMES)}"]),
    )
    thread = [("compose_message_text", "", "Text message")]
    a.click(name, editor(pkg, name, thread, "compose_message_text", "Send SMS"))
    a.type_text(
        text, editor(pkg, name, [("compose_message_text", text, "Text message")], "compose_message_text", "Send SMS")
    )
    a.click("Send SMS", detail_screen(pkg, name, [text, "Now · Sent"], ["Call"]))
    a.finish()


def note_text(rng: random.Random, sentences: int) -> str:
    picks = rng.sample(NOTE_SENTENCES, sentences)
    return ". ".join(s.format(city=rng.choice(vocab.CITIES), topic=rng.choice(vocab.TOPICS)) for s in picks) + "."


def task_note(rng: random.Random) -> tuple[str, str, Any]:
    title, body = (
        rng.choice(("To do", "Weekend", "Errands", "Before the trip", "House")),
        note_text(rng, rng.randint(3, 30)),
    )
    return f'Create a note titled "{title}" with the text: {body}', "Keep Notes", (title, body)


def play_note(a: Attempt, params: Any) -> None:
    title, body = params
    pkg = APPS["Keep Notes"]

    def page(t: str, b: str, focus: str) -> Screen:
        return editor(pkg, "Note", [("editable_title", t, "Title"), ("edit_note_body", b, "Note")], focus, "Pin")

    a.open(
        "Keep Notes",
        list_screen(pkg, "Search your notes", [("Shopping", "milk, eggs"), ("Ideas", "garden")], "New text note"),
    )
    a.click("New text note", page("", "", "editable_title"))
    a.type_text(title, page(title, "", "editable_title"))
    a.click("Note", page(title, "", "edit_note_body"))
    a.type_text(body, page(title, body, "edit_note_body"))
    a.click(
        "Navigate up",
        list_screen(pkg, "Search your notes", [(title, body[:60]), ("Shopping", "milk, eggs")], "New text note"),
    )
    a.finish()


def task_email(rng: random.Random) -> tuple[str, str, Any]:
    to = f"{rng.choice(vocab.FIRST_NAMES).lower()}@{vocab.slug(rng.choice(vocab.COMPANIES)).replace('_', '')}.com"
    subject, body = (
        rng.choice(("Quick update", "Next steps", "Weekend plans", "Invoice question")),
        note_text(rng, rng.randint(3, 12)),
    )
    return f"Email {to} with the subject {subject!r} and this message: {body}", "Gmail", (to, subject, body)


def play_email(a: Attempt, params: Any) -> None:
    to, subject, body = params
    pkg = APPS["Gmail"]
    inbox = [
        (vocab.person(a.rng), a.rng.choice(("Your receipt", "Team lunch", "Flight confirmation", "Weekly digest")))
        for _ in range(5)
    ]

    def page(t: str, s: str, b: str, focus: str) -> Screen:
        return editor(
            pkg, "Compose", [("to", t, "To"), ("subject", s, "Subject"), ("body", b, "Compose email")], focus, "Send"
        )

    a.open("Gmail", list_screen(pkg, "Search in mail", inbox, "Compose"))
    a.click("Compose", page("", "", "", "to"))
    a.type_text(to, page(to, "", "", "to"))
    a.click("Subject", page(to, "", "", "subject"))
    a.type_text(subject, page(to, subject, "", "subject"))
    a.click("Compose email", page(to, subject, "", "body"))
    a.type_text(body, page(to, subject, body, "body"))
    a.click("Send", list_screen(pkg, "Search in mail", [("Sent", "Undo"), *inbox], "Compose"))
    a.finish()


def task_shop(rng: random.Random) -> tuple[str, str, Any]:
    item = rng.choice(vocab.PRODUCTS)
    return f"Search ShopMart for {item} and add the first result to the cart", "ShopMart", item


def play_shop(a: Attempt, params: Any) -> None:
    item = str(params)
    pkg = APPS["ShopMart"]
    brands = a.rng.sample(("Nordik", "Voltra", "Hearth & Co", "Apex", "Lumo", "Kiyo"), 3)
    results = [
        (f"{b} {item} {v}", f"${a.rng.randint(19, 399)}.99 · {a.rng.randint(30, 50) / 10} stars")
        for b, v in zip(brands, ("Pro", "Lite", "2024 edition"))
    ]
    a.open(
        "ShopMart",
        list_screen(
            pkg,
            "Search ShopMart",
            [("Today's deals", "Up to 40% off"), ("Electronics", ""), ("Home & kitchen", "")],
            "Cart",
        ),
        splash=True,
    )
    a.click("Search ShopMart", typing_screen(pkg, "search_src_text", "", ["Recent: phone case", "Recent: batteries"]))
    a.type_text(item, typing_screen(pkg, "search_src_text", item, [item, f"{item} sale", f"{item} for kids"]))
    a.act({"action_type": "enter"}, list_screen(pkg, item, results, "Cart"))
    a.click(
        results[0][0],
        detail_screen(
            pkg, results[0][0], [results[0][1], "FREE delivery Thursday", "In stock"], ["Add to cart", "Buy now"]
        ),
    )
    a.click(
        "Add to cart",
        detail_screen(
            pkg, "Added to cart", [results[0][0], "Cart subtotal (1 item)"], ["Go to cart", "Continue shopping"]
        ),
    )
    a.finish()


def task_maps(rng: random.Random) -> tuple[str, str, Any]:
    landmark = rng.choice(("Central Library", "Riverside Park", "City Museum", "Union Station", "Harbor Market"))
    place = f"{landmark}, {rng.choice(vocab.CITIES)}"
    return f"Get driving directions to {place}", "Maps", place


def play_maps(a: Attempt, params: Any) -> None:
    place = str(params)
    pkg = APPS["Maps"]
    name = place.split(",")[0]
    a.open(
        "Maps",
        list_screen(pkg, "Search here", [("Restaurants", ""), ("Coffee", ""), ("Gas", "")], "Directions"),
        splash=True,
    )
    a.click("Search here", typing_screen(pkg, "search_omnibox_edit_text", "", ["Home", "Work"]))
    a.type_text(name, typing_screen(pkg, "search_omnibox_edit_text", name, [place, f"{name} parking", f"{name} cafe"]))
    rating = a.rng.randint(35, 49) / 10
    a.click(
        place,
        detail_screen(pkg, name, [place, f"{rating} stars · Open until 8 PM"], ["Directions", "Start", "Save"]),
    )
    minutes = a.rng.randint(6, 48)
    a.click(
        "Directions",
        detail_screen(
            pkg,
            f"Your location to {name}",
            [f"{minutes} min ({minutes * 0.7:.1f} mi) via Main St", "Fastest route now"],
            ["Start", "Steps"],
        ),
    )
    a.finish(success=a.rng.random() > 0.05)


TASKS = (
    (task_toggle, play_toggle),
    (task_alarm, play_alarm),
    (task_contact, play_contact),
    (task_message, play_message),
    (task_note, play_note),
    (task_email, play_email),
    (task_shop, play_shop),
    (task_maps, play_maps),
)


# ---- corpus ----------------------------------------------------------------------------------------


def simulate(seed: int, n: int) -> list[dict]:
    """`n` simulated episodes: task, task id, app, start screen and (action, screen) steps."""
    task_rng = seeded_rng(seed, "android", "tasks")
    episodes: list[dict] = []
    task_no = 0
    while len(episodes) < n:
        make_task, play = task_rng.choice(TASKS)
        task, app, params = make_task(task_rng)
        for attempt_no in range(min(task_rng.choice(ATTEMPTS), n - len(episodes))):
            a = Attempt(seeded_rng(seed, "android", task_no, attempt_no), home_screen())
            play(a, params)
            steps = a.steps[:MAX_STEPS]
            if a.rng.random() < GIVE_UP_RATE:  # some attempts stall and give up part-way
                cut = a.rng.randint(1, len(steps) - 2)
                steps = [*steps[:cut], ({"action_type": "terminate", "status": "infeasible"}, steps[cut - 1][1])]
            task_id = f"demo-android-s{seed}-task{task_no:04d}"
            episodes.append({"task": task, "task_id": task_id, "app": APPS[app], "start": a.start, "steps": steps})
        task_no += 1
    return episodes


def write_native(out_uri: str, episodes: list[dict]) -> str:
    """Write the screens and the step log under `out_uri` (a path or fsspec URL); returns the log's URI."""
    fs, root = filesystem(out_uri)
    lines = []
    for i, ep in enumerate(episodes, 1):
        name = f"ep-{i:04d}"
        fs.makedirs(posixpath.join(root, "episodes", name), exist_ok=True)
        screens = [ep["start"], *(screen for _, screen in ep["steps"])]
        for k, screen in enumerate(screens):
            fs.pipe_file(posixpath.join(root, "episodes", name, f"{k:03d}.xml"), screen_xml(screen).encode())
        for k, (action, _) in enumerate(ep["steps"], 1):
            line = {"episode": name, "step": k, "task": ep["task"], "task_id": ep["task_id"], "app": ep["app"]}
            if k == 1:
                line["before"] = f"episodes/{name}/000.xml"
            line.update(action=action, dump=f"episodes/{name}/{k:03d}.xml")
            lines.append(json.dumps(line, ensure_ascii=False))
    fs.pipe_file(posixpath.join(root, LOG_NAME), ("\n".join(lines) + "\n").encode())
    return join_uri(out_uri, LOG_NAME)


def trajectories_from_native(log_path: str) -> list[dict]:
    """Ingest a native log with the uiautomator adapter; sources made location-independent."""
    opts = {"domain": None, "source_kind": "sandbox"}
    out = []
    for record in UIAUTOMATOR.read(InputUnit(log_path), opts):
        if isinstance(record, InvalidRecord):
            raise record  # the simulator wrote it: a bad record here is a bug, not bad input
        for traj in UIAUTOMATOR.normalize(record, opts):
            d = traj.to_dict()
            d["source"] = {"kind": "sandbox", "format": UIAUTOMATOR.name, "uri": LOG_NAME, "locator": record.locator}
            out.append(d)
    return out


def generate_android(seed: int, n: int = DEFAULT_N) -> list[dict]:
    """`n` android trajectory dicts (lwm-jsonl layout), a pure function of (seed, n)."""
    # The native form goes through the real adapter, staged in memory: no disk round trip.
    scratch = f"memory://lwm-android-demo-{uuid.uuid4().hex}"
    try:
        return trajectories_from_native(write_native(scratch, simulate(seed, n)))
    finally:
        fs, root = filesystem(scratch)
        if fs.exists(root):
            fs.rm(root, recursive=True)


def write_android_demo(out_dir: str, seed: int, n: int = DEFAULT_N, native: bool = False) -> list[str]:
    """Write the demo corpus; returns the files to give the pipeline (the log reads its screens itself)."""
    os.makedirs(out_dir, exist_ok=True)
    if native:
        return [write_native(out_dir, simulate(seed, n))]
    path = os.path.join(out_dir, JSONL_NAME)
    write_jsonl_atomic(path, generate_android(seed, n))
    return [path]
