"""The simulated online shop of the web demo: home, search results, product pages, cart."""

from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.demo import vocab
from pipeline.demo.uitree import Node, index_of, node
from pipeline.demo.web_screen import Move, Screen, Step, click, footer, scroll_detour, stable_id, type_into


@dataclass
class Product:
    name: str
    kind: str
    price: float
    rating: float
    reviews: int
    blurb: str


class Shop:
    """An online store: home, search results, product pages, cart."""

    def __init__(self, rng: random.Random) -> None:
        self.name = f"{rng.choice(vocab.COMPANIES).split()[0]} {rng.choice(('Market', 'Outlet', 'Store', 'Depot'))}"
        self.host = f"shop.{vocab.slug(self.name).replace('_', '')}.example"
        kinds = rng.sample(vocab.PRODUCTS, 3)
        self.products = [
            Product(f"{rng.choice(vocab.LAST_NAMES)} {rng.choice(('X', 'Pro ', 'Lite ', 'S'))}{rng.randint(2, 90)} {k}", k,
                    round(rng.uniform(12, 400), 2), round(rng.uniform(2.8, 4.9), 1), rng.randint(3, 9000), vocab.sentence(rng))
            for k in kinds for _ in range(rng.randint(4, 7))
        ]  # fmt: skip
        self.reviews = {
            p.name: [f"{vocab.person(rng)}: {vocab.sentence(rng)}" for _ in range(rng.randint(1, 3))]
            for p in self.products
        }
        self.greeting, self.deliver_to, self.suggested = "Hello, sign in", "Deliver to you", ()

    def personalize(self, rng: random.Random) -> None:
        """Who is browsing this session: greeting, delivery address, personal suggestions."""
        first = rng.choice(vocab.FIRST_NAMES)
        self.greeting = f"Hello, {first}"
        self.deliver_to = f"Deliver to {first} – {rng.choice(vocab.CITIES)} {rng.randint(10000, 99999)}"
        picks = rng.sample(self.products, min(len(self.products), rng.randint(3, 5)))
        self.suggested = tuple(f"{p.name} ${p.price * rng.uniform(0.8, 1.1):.2f}" for p in picks)

    def _nav(self, cart: int) -> list[Node]:
        return [node("link", self.name, 1), node("StaticText", self.deliver_to, 1), node("searchbox", f"Search {self.name}", 1),
                node("button", "Search", 1), node("link", f"Cart ({cart})", 1), node("link", self.greeting, 1), node("link", "Sign in", 1)]  # fmt: skip

    def _suggestions(self) -> list[Node]:
        return [node("heading", "Inspired by your browsing history", 1)] + [node("link", s, 2) for s in self.suggested]

    def start(self) -> Screen:
        deals = self.products[:: max(1, len(self.products) // 4)][:4]
        body = [node("heading", "Today's deals", 1)]
        for p in deals:
            body += [node("link", p.name, 2), node("StaticText", f"${p.price:.2f}", 2)]
        return Screen(
            f"{self.name} – Home",
            f"https://{self.host}/",
            [node("RootWebArea", self.name), *self._nav(0), *body, *self._suggestions(), *footer(self.host)],
        )

    def results(self, query: str, sort: str) -> Screen:
        hits = [p for p in self.products if p.kind in query or query in p.name]
        hits.sort(key=lambda p: p.price if sort.startswith("Price") else -p.reviews)
        rows = []
        for p in hits:
            rows += [
                node("link", p.name, 2),
                node("StaticText", f"${p.price:.2f}", 2),
                node("StaticText", f"{p.rating} out of 5 stars ({p.reviews:,})", 2),
            ]
        head = [node("RootWebArea", f"Search results | {self.name}"), *self._nav(0), node("heading", f'{len(hits)} results for "{query}"', 1),
                node("combobox", "Sort by", 1, value=sort)]  # fmt: skip
        return Screen(
            f"Search results | {self.name}",
            f"https://{self.host}/s?k={query.replace(' ', '+')}",
            head + rows[:12],
            extra=tuple(rows[12:] + footer(self.host)),
        )

    def product(self, p: Product, cart: int) -> Screen:
        body = [node("heading", p.name, 1), node("StaticText", f"${p.price:.2f}", 1), node("StaticText", f"{p.rating} out of 5 stars", 1),
                node("StaticText", p.blurb, 1), node("combobox", "Quantity", 1, value="1"), node("button", "Add to cart", 1), node("button", "Buy now", 1)]  # fmt: skip
        reviews = [node("heading", "Customer reviews", 1)] + [node("StaticText", r, 2) for r in self.reviews[p.name]]
        return Screen(f"{p.name} | {self.name}", f"https://{self.host}/dp/{abs(stable_id(p.name)) % 10**9:09d}",
                      [node("RootWebArea", p.name), *self._nav(cart), *body, *self._suggestions()], extra=tuple(reviews + footer(self.host)))  # fmt: skip

    def cart(self, items: list[Product]) -> Screen:
        rows = [node("heading", "Shopping Cart", 1)]
        for p in items:
            rows += [node("link", p.name, 2), node("StaticText", f"${p.price:.2f}", 2), node("button", "Delete", 2)]
        rows += [
            node("StaticText", f"Subtotal ({len(items)} item): ${sum(p.price for p in items):.2f}", 1),
            node("button", "Proceed to checkout", 1),
        ]
        return Screen(
            f"Shopping Cart | {self.name}",
            f"https://{self.host}/cart",
            [node("RootWebArea", "Shopping Cart"), *self._nav(len(items)), *rows, *self._suggestions()],
        )

    def review_form(self, p: Product, stars: str) -> Screen:
        fields = [node("heading", f"Create review: {p.name}", 1), node("combobox", "Overall rating", 1, value=stars),
                  node("textbox", "Add a headline", 1, value=""), node("textbox", "Add a written review", 1, value=""), node("button", "Submit", 1)]  # fmt: skip
        return Screen(f"Create review | {self.name}", f"https://{self.host}/review/create-review?asin={stable_id(p.name) % 10**9:09d}",
                      [node("RootWebArea", "Create review"), *self._nav(0), *fields])  # fmt: skip

    def draw_goal(self, rng: random.Random) -> tuple[str, dict]:
        if rng.random() < 0.3:
            p = rng.choice(self.products)
            stars = rng.choice(("2 stars", "3 stars", "4 stars", "5 stars"))
            review = f"{vocab.paragraph(rng, rng.randint(2, 4))} Overall it does what I bought it for, {rng.choice(('mostly', 'barely', 'easily'))}."
            return (f"Write a {stars} review of the {p.name} I bought on {self.name}. Use this text: {review}",
                    {"summary": f"review the {p.name}", "review_of": p.name, "stars": stars, "text": review})  # fmt: skip
        kind = rng.choice(sorted({p.kind for p in self.products}))
        budget = rng.choice((50, 100, 150, 250, 400))
        text = f"On {self.name}, find a {kind} under ${budget} rated at least 4 stars and add it to the cart."
        return text, {"summary": f"a {kind} under ${budget} in the cart", "kind": kind, "budget": budget}

    def route(self, rng: random.Random, goal: dict) -> list[Step]:
        if "review_of" in goal:
            return self._review_route(goal)
        kind = goal["kind"]
        sort = rng.choice(("Featured", "Price: Low to High", "Avg. Customer Review"))
        shown = {n.name for n in self.results(kind, sort).nodes}
        hits = [p for p in self.products if p.kind == kind and p.name in shown]
        good = [p for p in hits if p.price <= goal["budget"] and p.rating >= 4] or hits
        pick = rng.choice(good)
        steps: list[Step] = [lambda s: type_into(s, f"Search {self.name}", kind, True, self.results(kind, "Featured"))]
        if sort != "Featured":
            steps.append(
                lambda s: (
                    {"action": "select", "element": index_of(s.nodes, "Sort by"), "option": sort},
                    self.results(kind, sort),
                )
            )
        steps += [
            lambda s: click(s, pick.name, self.product(pick, 0), "link"),
            lambda s: click(
                s,
                "Add to cart",
                Screen("", "", [node("dialog", "Added to cart"), node("button", "View cart", 1)], modal=True),
            ),
            lambda s: click(s, "View cart", self.cart([pick])),
        ]
        return steps

    def detour(self, rng: random.Random, screen: Screen) -> list[Move]:
        scroll = scroll_detour(screen)
        if scroll and rng.random() < 0.6:
            return scroll
        if screen.modal:
            return []
        other = rng.choice(self.products)
        return [click(screen, "Sign in", self.sign_in()), ({"action": "go_back"}, screen)] if rng.random() < 0.3 else [
            ({"action": "goto", "url": f"https://{self.host}/dp/{abs(stable_id(other.name)) % 10**9:09d}"}, self.product(other, 0)),
            ({"action": "go_back"}, screen),
        ]  # fmt: skip

    def sign_in(self) -> Screen:
        return Screen(f"Sign in | {self.name}", f"https://{self.host}/ap/signin",
                      [node("RootWebArea", "Sign in"), node("heading", "Sign in", 1), node("textbox", "Email or mobile phone number", 1, required="true"),
                       node("button", "Continue", 1), node("link", "Create your account", 1)])  # fmt: skip

    def _review_route(self, goal: dict) -> list[Step]:
        p = next(x for x in self.products if x.name == goal["review_of"])
        thanks = Screen("", "", [node("dialog", "Thanks! Review submitted"), node("button", "Close", 1)], modal=True)
        return [
            lambda s: ({"action": "goto", "url": self.product(p, 0).url}, self.product(p, 0)),
            lambda s: ({"action": "goto", "url": self.review_form(p, "").url}, self.review_form(p, "")),
            lambda s: (
                {"action": "select", "element": index_of(s.nodes, "Overall rating"), "option": goal["stars"]},
                self.review_form(p, goal["stars"]),
            ),
            lambda s: type_into(s, "Add a written review", goal["text"], True, thanks),
        ]
