"""The simulated discussion forum and store admin of the web demo."""

from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.demo import vocab
from pipeline.demo.uitree import Node, index_of, node
from pipeline.demo.web_screen import Move, Screen, Step, click, footer, scroll_detour, stable_id, type_into

_FORUMS = ("homeimprovement", "askscience", "cooking", "cycling", "personalfinance", "gardening", "travel", "programming",
           "photography", "boardgames", "running", "aquariums")  # fmt: skip


@dataclass
class Post:
    title: str
    author: str
    score: int
    hours: int
    body: str
    comments: list[str]


class Forum:
    """A link-aggregator forum: forum list, post lists, posts, the submission form."""

    def __init__(self, rng: random.Random) -> None:
        self.host = f"forum.{rng.choice(('postmill', 'threads', 'agora', 'commons'))}.example"
        self.forums = rng.sample(_FORUMS, 5)
        self.posts = {f: [self._post(rng) for _ in range(rng.randint(4, 9))] for f in self.forums}
        self.user, self.trending = "guest", ()

    def personalize(self, rng: random.Random) -> None:
        """Who is logged in this session, and what the sidebar shows as trending."""
        self.user = f"{vocab.slug(rng.choice(vocab.FIRST_NAMES))}_{rng.choice(vocab.NOUNS)}{rng.randint(1, 999)}"
        self.trending = tuple(
            f"{self._post(rng).title} ({rng.randint(20, 900)} comments)" for _ in range(rng.randint(2, 4))
        )

    @staticmethod
    def _post(rng: random.Random) -> Post:
        title = (
            rng.choice(("Anyone else seeing", "Question about", "Update on", "Thoughts on", "PSA:"))
            + f" {rng.choice(vocab.TOPICS)}?"
        )
        comments = [
            f"{vocab.slug(rng.choice(vocab.FIRST_NAMES))}{rng.randint(1, 99)}: {vocab.sentence(rng)}"
            for _ in range(rng.randint(0, 4))
        ]
        return Post(
            title,
            f"{vocab.slug(rng.choice(vocab.FIRST_NAMES))}_{rng.randint(1, 999)}",
            rng.randint(1, 3000),
            rng.randint(1, 70),
            vocab.paragraph(rng, 2),
            comments,
        )

    def _nav(self, sidebar: bool = True) -> list[Node]:
        nav = [
            node("link", "Forums", 1),
            node("link", "Wiki", 1),
            node("searchbox", "Search query", 1),
            node("link", self.user, 1),
        ]
        if not sidebar:
            return nav
        return nav + [node("complementary", "Trending", 1)] + [node("link", t, 2) for t in self.trending]

    def start(self) -> Screen:
        rows = [node("heading", "Forums", 1)]
        for f in self.forums:
            rows += [node("link", f, 2), node("StaticText", f"{len(self.posts[f]) * 137 + 12:,} subscribers", 2)]
        return Screen("Forums", f"http://{self.host}/forums", [node("RootWebArea", "Forums"), *self._nav(), *rows])

    def forum(self, name: str, sort: str) -> Screen:
        posts = sorted(self.posts[name], key=lambda p: -p.score if sort == "Top" else p.hours)
        rows = []
        for p in posts:
            rows += [node("link", p.title, 2), node("StaticText", f"Submitted by {p.author} {p.hours} hours ago", 2),
                     node("link", f"{len(p.comments)} comments", 2), node("StaticText", str(p.score), 2)]  # fmt: skip
        head = [
            node("RootWebArea", f"/f/{name}"),
            *self._nav(),
            node("heading", f"/f/{name}", 1),
            node("link", "Submit", 1),
            node("combobox", "Sort by", 1, value=sort),
        ]
        return Screen(
            f"/f/{name}",
            f"http://{self.host}/f/{name}" + ("/top" if sort == "Top" else ""),
            head + rows[:16],
            extra=tuple(rows[16:] + footer(self.host)),
        )

    def post(self, name: str, p: Post, voted: bool) -> Screen:
        body = [node("heading", p.title, 1), node("StaticText", f"Submitted by {p.author} {p.hours} hours ago in /f/{name}", 1),
                node("StaticText", p.body, 1), node("button", "Upvote", 1, pressed=str(voted).lower()), node("StaticText", str(p.score + voted), 1)]  # fmt: skip
        comments = [node("heading", f"{len(p.comments)} comments", 1)] + [node("StaticText", c, 2) for c in p.comments]
        slug = vocab.slug(p.title)[:40]
        return Screen(f"{p.title} - /f/{name}", f"http://{self.host}/f/{name}/{stable_id(slug) % 90000 + 10000}/{slug}",
                      [node("RootWebArea", p.title), *self._nav(), *body, *comments])  # fmt: skip

    def form(self, name: str, title: str, body: str) -> Screen:
        fields = [node("heading", "Create submission", 1), node("textbox", "Title", 1, value=title, required="true"),
                  node("textbox", "Body", 1, value=body), node("combobox", "Forum", 1, value=name), node("button", "Create submission", 1)]  # fmt: skip
        return Screen(
            "Create submission",
            f"http://{self.host}/submit/{name}",
            [node("RootWebArea", "Create submission"), *self._nav(sidebar=False), *fields],
        )

    def draw_goal(self, rng: random.Random) -> tuple[str, dict]:
        name = rng.choice(self.forums)
        if rng.random() < 0.5:
            topic = rng.choice(vocab.TOPICS)
            title = f"Looking for good sources on {topic}"
            body = f"I am reading up on {topic}. {vocab.paragraph(rng, rng.randint(2, 4))} Any pointers to solid data would help."
            return (f'Post in /f/{name} with the title "{title}" asking for sources; mention what you already read.',
                    {"summary": f"a new post in /f/{name}", "forum": name, "title": title, "body": body})  # fmt: skip
        return f"Upvote the top post of all time in /f/{name} and tell me who wrote it.", {
            "summary": f"upvote the top post in /f/{name}",
            "forum": name,
        }

    def route(self, rng: random.Random, goal: dict) -> list[Step]:
        name = goal["forum"]
        steps: list[Step] = [lambda s: click(s, name, self.forum(name, "Hot"), "link")]
        if "title" in goal:
            title, body = goal["title"], goal["body"]
            return [
                *steps,
                lambda s: click(s, "Submit", self.form(name, "", "")),
                lambda s: type_into(s, "Title", title, False, self.form(name, title, "")),
                lambda s: type_into(s, "Body", body, False, self.form(name, title, body)),
                lambda s: click(s, "Create submission", self.post(name, Post(title, self.user, 1, 0, body, []), False)),
            ]
        top = max(self.posts[name], key=lambda p: p.score)
        return [
            *steps,
            lambda s: (
                {"action": "select", "element": index_of(s.nodes, "Sort by"), "option": "Top"},
                self.forum(name, "Top"),
            ),
            lambda s: click(s, top.title, self.post(name, top, False), "link"),
            lambda s: click(s, "Upvote", self.post(name, top, True)),
        ]

    def detour(self, rng: random.Random, screen: Screen) -> list[Move]:
        scroll = scroll_detour(screen)
        if scroll:
            return scroll
        other = rng.choice(self.forums)
        return [
            ({"action": "goto", "url": f"http://{self.host}/f/{other}"}, self.forum(other, "Hot")),
            ({"action": "go_back"}, screen),
        ]


@dataclass
class Order:
    number: int
    customer: str
    status: str
    total: float
    items: list[tuple[str, int, float]]


class Admin:
    """A store back office: dashboard, order grid, order page with status and comments."""

    def __init__(self, rng: random.Random) -> None:
        self.company = rng.choice(vocab.COMPANIES)
        self.host = f"admin.{vocab.slug(self.company.split()[0])}.example"
        self.admin, self.last_login = "admin", ""
        self.orders = [
            Order(rng.randint(100000, 999999), vocab.person(rng), rng.choice(("Pending", "Processing", "On Hold")), 0.0,
                  [(rng.choice(vocab.PRODUCTS), rng.randint(1, 3), round(rng.uniform(5, 300), 2)) for _ in range(rng.randint(1, 4))])
            for _ in range(rng.randint(6, 14))
        ]  # fmt: skip
        for o in self.orders:
            o.total = round(sum(q * p for _, q, p in o.items), 2)

    def personalize(self, rng: random.Random) -> None:
        """Which back-office user is signed in this session, and their last login."""
        self.admin = f"{rng.choice(vocab.FIRST_NAMES).lower()}.{rng.choice(vocab.LAST_NAMES).lower()}"
        self.last_login = f"Last login {rng.choice(vocab.MONTHS)} {rng.randint(1, 28)}, {rng.randint(1, 12)}:{rng.randint(0, 59):02d} from 10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"

    def _menu(self) -> list[Node]:
        menu = [node("link", n, 1) for n in ("Dashboard", "Sales", "Orders", "Customers", "Catalog", "Reports")]
        return [*menu, node("link", self.admin, 1), node("StaticText", self.last_login, 1)]

    def start(self) -> Screen:
        stats = [node("heading", "Dashboard", 1), node("StaticText", f"Lifetime Sales ${sum(o.total for o in self.orders) * 41:,.2f}", 1),
                 node("StaticText", f"Average Order ${sum(o.total for o in self.orders) / len(self.orders):,.2f}", 1),
                 node("StaticText", f"Last Orders: {', '.join(o.customer for o in self.orders[:3])}", 1)]  # fmt: skip
        return Screen(
            f"Dashboard / {self.company} Admin",
            f"https://{self.host}/admin/dashboard/",
            [node("RootWebArea", "Dashboard"), *self._menu(), *stats],
        )

    def grid(self, query: str) -> Screen:
        shown = [o for o in self.orders if query in str(o.number)]
        rows = [node("table", "Orders", 1)]
        for o in shown:
            rows += [node("row", "", 2), node("cell", f"#{o.number}", 3), node("cell", o.customer, 3), node("cell", o.status, 3),
                     node("cell", f"${o.total:,.2f}", 3), node("link", "View", 3)]  # fmt: skip
        head = [node("RootWebArea", "Orders"), *self._menu(), node("heading", "Orders", 1), node("textbox", "Search by keyword", 1, value=query),
                node("StaticText", f"{len(shown)} records found", 1)]  # fmt: skip
        return Screen(
            f"Orders / Sales / {self.company} Admin",
            f"https://{self.host}/admin/sales/order/",
            head + rows[:31],
            extra=tuple(rows[31:]),
        )

    def order(self, o: Order, status: str, comment: str, saved: bool) -> Screen:
        items = [node("table", "Items Ordered", 1)] + [
            node("row", f"{name} × {q} ${p:,.2f}", 2) for name, q, p in o.items
        ]
        body = ([node("alert", "You saved the order.", 1)] if saved else []) + [
            node("heading", f"Order # {o.number}", 1), node("StaticText", f"Customer: {o.customer}", 1), *items,
            node("StaticText", f"Grand Total ${o.total:,.2f}", 1), node("combobox", "Status", 1, value=status),
            node("textbox", "Comment", 1, value=comment), node("button", "Submit Comment", 1)]  # fmt: skip
        return Screen(f"# {o.number} / Orders / {self.company} Admin", f"https://{self.host}/admin/sales/order/view/order_id/{o.number}/",
                      [node("RootWebArea", f"# {o.number}"), *self._menu(), *body])  # fmt: skip

    def draw_goal(self, rng: random.Random) -> tuple[str, dict]:
        o = rng.choice(self.orders)
        status = rng.choice(("Complete", "Canceled", "Closed", "Suspected Fraud"))
        comment = f"{rng.choice(('Customer called:', 'Per warehouse:', 'Note from finance:'))} {vocab.paragraph(rng, rng.randint(1, 3))}"
        return (f"Set order #{o.number} to {status} and add this comment: {comment}",
                {"summary": f"order #{o.number} {status}", "number": o.number, "status": status, "comment": comment})  # fmt: skip

    def route(self, rng: random.Random, goal: dict) -> list[Step]:
        o = next(x for x in self.orders if x.number == goal["number"])
        status, comment = goal["status"], goal["comment"]
        return [
            lambda s: click(s, "Orders", self.grid("")),
            lambda s: type_into(s, "Search by keyword", str(o.number), True, self.grid(str(o.number))),
            lambda s: click(s, "View", self.order(o, o.status, "", False)),
            lambda s: (
                {"action": "select", "element": index_of(s.nodes, "Status"), "option": status},
                self.order(o, status, "", False),
            ),
            lambda s: type_into(s, "Comment", comment, False, self.order(o, status, comment, False)),
            lambda s: click(s, "Submit Comment", self.order(o, status, "", True)),
        ]

    def detour(self, rng: random.Random, screen: Screen) -> list[Move]:
        scroll = scroll_detour(screen)
        if scroll:
            return scroll
        page = rng.choice(("Customers", "Reports", "Catalog"))
        if screen.modal or page not in [n.name for n in screen.nodes]:
            return []
        other = Screen(f"{page} / {self.company} Admin", f"https://{self.host}/admin/{page.lower()}/",
                       [node("RootWebArea", page), *self._menu(), node("heading", page, 1), node("StaticText", "We couldn't find any records.", 1)])  # fmt: skip
        return [click(screen, page, other), ({"action": "go_back"}, screen)]
