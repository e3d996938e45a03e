"""Word banks the demo generators draw from, so that simulated logs vary like real ones.

Only plain data and two tiny samplers live here; each domain module decides what to say.
"""

from __future__ import annotations

import random

FIRST_NAMES = (
    "Ana", "Bilal", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ilya", "Jonas", "Keiko", "Lars",
    "Maya", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tomás", "Uma", "Viktor", "Wen", "Yusuf",
    "Zoe", "Aiko", "Bruno", "Carmen", "Dmitri", "Elena", "Felix", "Greta", "Hugo", "Ines", "Jamal", "Kira",
)  # fmt: skip
LAST_NAMES = (
    "Okafor", "Lindqvist", "Tanaka", "Moreau", "Haddad", "Novak", "Silva", "Kowalski", "Nguyen", "Schmidt",
    "Rossi", "Petrov", "Garcia", "Kim", "Brennan", "Osei", "Duarte", "Fischer", "Yilmaz", "Costa", "Ivanova",
    "Hoffmann", "Mensah", "Bauer", "Sato", "Andersen", "Ramos", "Weber", "Chowdhury", "Keller",
)  # fmt: skip
COMPANIES = (
    "Acme Logistics", "Bluefin Analytics", "Cobalt Health", "Driftwood Studios", "Evergreen Foods",
    "Foxglove Labs", "Granite Insurance", "Harbor Freight Co", "Ironclad Security", "Juniper Robotics",
    "Kestrel Airlines", "Lumen Energy", "Maple Ledger", "Northwind Traders", "Orchid Biotech",
    "Pinecone Media", "Quarry Mining", "Redwood Capital", "Saffron Kitchens", "Tidewater Ports",
)  # fmt: skip
CITIES = (
    "Lisbon", "Osaka", "Nairobi", "Toronto", "Tallinn", "Valparaíso", "Krakow", "Hanoi", "Accra", "Denver",
    "Porto", "Bergen", "Izmir", "Cebu", "Leeds", "Graz", "Austin", "Lyon", "Pune", "Adelaide", "Monterrey",
)  # fmt: skip
TOPICS = (
    "solar panel efficiency", "sourdough hydration", "zebra migration", "quantum error correction",
    "urban heat islands", "lithium battery recycling", "medieval trade routes", "coral bleaching",
    "container orchestration", "sleep and memory", "wind turbine noise", "microplastics in rivers",
    "the history of the printing press", "volcanic soil fertility", "electric bus adoption",
    "honeybee colony collapse", "desalination costs", "glacier retreat", "open source licensing",
    "vertical farming yields", "the Antikythera mechanism", "typhoon forecasting", "tidal power",
)  # fmt: skip
PRODUCTS = (
    "wireless earbuds", "standing desk", "espresso grinder", "trail running shoes", "mechanical keyboard",
    "air purifier", "cast iron skillet", "robot vacuum", "hiking backpack", "noise cancelling headphones",
    "e-reader", "electric kettle", "camping tent", "yoga mat", "4K monitor", "smart thermostat",
    "road bike helmet", "graphing calculator", "rice cooker", "portable charger",
)  # fmt: skip
ADJECTIVES = (
    "stale", "missing", "duplicate", "slow", "flaky", "broken", "outdated", "oversized", "unused",
    "misconfigured", "expired", "orphaned", "corrupted", "pending", "legacy", "urgent", "archived",
)  # fmt: skip
NOUNS = (
    "invoice", "order", "ticket", "session", "report", "upload", "payment", "shipment", "profile",
    "token", "backup", "schedule", "booking", "subscription", "receipt", "export", "webhook", "cart",
)  # fmt: skip
VERBS = (
    "validate", "parse", "merge", "render", "cache", "retry", "normalize", "paginate", "export",
    "archive", "schedule", "notify", "serialize", "throttle", "reconcile", "sanitize", "aggregate",
)  # fmt: skip
PACKAGES = (
    ("requests", "2.31.0"), ("numpy", "1.26.4"), ("pandas", "2.2.1"), ("flask", "3.0.2"),
    ("pydantic", "2.6.4"), ("httpx", "0.27.0"), ("rich", "13.7.1"), ("sqlalchemy", "2.0.29"),
    ("click", "8.1.7"), ("pyyaml", "6.0.1"), ("fastapi", "0.110.0"), ("pytest-cov", "5.0.0"),
    ("boto3", "1.34.70"), ("redis", "5.0.3"), ("jinja2", "3.1.3"), ("orjson", "3.10.0"),
)  # fmt: skip
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
SENTENCE_OPENERS = (
    "Recent measurements suggest", "A 2023 field study found", "According to the maintainers,",
    "Independent reviewers noted", "Survey data from several regions show", "Engineers reported",
    "The original paper argues", "Local officials confirmed", "Critics point out", "Early adopters say",
)  # fmt: skip
SENTENCE_CLAIMS = (
    "costs fell by roughly {n} percent over {y} years",
    "the effect is strongest in {city} and weakest near the coast",
    "about {n} of every hundred installations needed rework",
    "results vary with temperature more than with humidity",
    "the backlog grew to {n} thousand cases before {month}",
    "a pilot in {city} ran for {y} years without major failures",
    "the method needs {n} percent less water than the baseline",
    "adoption doubled once prices dropped below {n} dollars",
    "the first prototype was built in {city} in {year}",
    "maintenance rather than hardware drives most of the cost",
    "the trend reversed after {month} {year}",
    "only {n} sites reported complete data",
)  # fmt: skip


def person(rng: random.Random) -> str:
    """A random full name."""
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def sentence(rng: random.Random) -> str:
    """One plausible factual-sounding sentence with random numbers and places."""
    claim = rng.choice(SENTENCE_CLAIMS).format(
        n=rng.randint(3, 95),
        y=rng.randint(2, 12),
        city=rng.choice(CITIES),
        month=rng.choice(MONTHS),
        year=rng.randint(1998, 2025),
    )
    return f"{rng.choice(SENTENCE_OPENERS)} {claim}."


def paragraph(rng: random.Random, sentences: int) -> str:
    """Several random sentences joined into one paragraph."""
    return " ".join(sentence(rng) for _ in range(sentences))


def slug(*parts: str) -> str:
    """Lowercase identifier from words: ``slug("Acme Logistics")`` → ``acme_logistics``."""
    return "_".join("".join(c for c in p.lower() if c.isalnum() or c == " ").replace(" ", "_") for p in parts)
