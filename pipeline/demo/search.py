"""Demo corpus for the ``search`` domain: a research agent driving a text web browser.

Format: lwm-jsonl, the sandbox's native format. Two-line example of a native turn::

    {"action": "{\\"action\\": \\"search\\", \\"query\\": \\"glacier retreat 2021 study\\"}",
     "observation": "Search results for \\"glacier retreat 2021 study\\" (about 48,200 results)\\n\\n[1] Glacier ..."}

Mapping: each turn is one browser command as JSON (search, click a numbered link, visit a URL,
scroll, find in page, back, answer); the observation is the text the browser tool returns:
a result page with numbered results, a page window with ``[n†label]`` links, find hits, a PDF
download notice or the answer receipt. A task is a question about one topic; its pages are
shared by all attempts, which differ in queries, clicks and length.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pipeline.demo import vocab
from pipeline.demo.common import DomainSpec, Episode, action_json, build_corpus, make_turn, outcome_of, turn_budget

ACTION_SPACE = (
    "Browser tool. Each action is one JSON object:\n"
    '{"action": "search", "query": str} | {"action": "click", "id": int} | {"action": "visit", "url": str} |\n'
    '{"action": "scroll", "direction": "up"|"down"} | {"action": "find", "pattern": str} | {"action": "back"} |\n'
    '{"action": "answer", "text": str}\n'
    "Result pages number their links [n]; page text marks links as [n†label]; pages are shown 40 lines at a time."
)
DEMONSTRATIONS = (
    ('{"action": "search", "query": "boiling point of water at altitude"}',
     'Search results for "boiling point of water at altitude" (about 2,310,000 results)\n\n'
     "[1] Boiling point and altitude - Engineering notes\n    https://notes.example.org/boiling-altitude\n"
     "    Water boils at about 93 °C at 2,000 m."),
)  # fmt: skip
SIMULATION_INSTRUCTIONS = (
    "Simulate the text browser: return the page or result list exactly as the tool renders it.",
    "You are the search and browsing backend. Keep numbering of links consistent with earlier pages.",
)
_HOSTS = (
    "example.org",
    "research.example.net",
    "news.example.com",
    "wiki.example",
    "journal.example.edu",
    "blog.example.io",
)
_ANGLES = (
    "what we know",
    "a review",
    "new data",
    "explained",
    "field notes",
    "open questions",
    "costs and benefits",
    "timeline",
)
_MODIFIERS = ("study", "statistics", "history", "2023", "review", "cost", "latest research", "pdf", "overview", "data")


@dataclass
class Page:
    title: str
    url: str
    lines: list[str]


@dataclass(frozen=True)
class Task:
    topic: str
    question: str
    fact: str
    seed: int


@dataclass
class Browser:
    pages: list[Page]
    current: Page | None = None
    offset: int = 0
    history: list[tuple[Page, int]] = field(default_factory=list)
    links: list[Page] = field(default_factory=list)


def _make_pages(rng: random.Random, task: Task) -> list[Page]:
    pages = []
    for i in range(rng.randint(5, 9)):
        host = rng.choice(_HOSTS)
        title = f"{task.topic.capitalize()}: {rng.choice(_ANGLES)}"
        url = f"https://{host}/{task.topic.replace(' ', '-')}-{rng.randint(2, 999)}"
        lines = [f"# {title}", f"By {vocab.person(rng)} · {rng.choice(vocab.MONTHS)} {rng.randint(2015, 2025)}", ""]
        for _ in range(rng.randint(8, 30)):
            lines.append(vocab.sentence(rng))
            if rng.random() < 0.3:
                lines.append(
                    f"See also [{len(lines)}†{rng.choice(vocab.TOPICS)}] and [{len(lines) + 1}†{rng.choice(_ANGLES)}]."
                )
        if i == 0:
            lines.insert(rng.randint(3, len(lines)), task.fact)
        pages.append(Page(title, url, lines))
    return pages


def _window(browser: Browser) -> str:
    page = browser.current
    assert page is not None
    end = min(len(page.lines), browser.offset + 40)
    head = f"Title: {page.title}\nURL: {page.url}\nViewing lines {browser.offset}-{end} of {len(page.lines)}\n\n"
    return head + "\n".join(page.lines[browser.offset : end])


def _open(browser: Browser, page: Page) -> str:
    if browser.current is not None:
        browser.history.append((browser.current, browser.offset))
    browser.current, browser.offset = page, 0
    return _window(browser)


def _search(rng: random.Random, browser: Browser, task: Task) -> tuple[dict, str]:
    words = task.topic.split()
    query = " ".join(
        rng.sample(words, max(1, len(words) - rng.randint(0, 1))) + rng.sample(_MODIFIERS, rng.randint(0, 2))
    )
    hits = rng.sample(browser.pages, rng.randint(2, min(6, len(browser.pages))))
    browser.links = hits
    lines = [f'Search results for "{query}" (about {rng.randint(2, 900) * 1000:,} results)', ""]
    for i, page in enumerate(hits, 1):
        lines += [f"[{i}] {page.title}", f"    {page.url}", f"    {rng.choice(page.lines[3:])[:160]}"]
    return {"action": "search", "query": query}, "\n".join(lines)


def _click(rng: random.Random, browser: Browser, task: Task) -> tuple[dict, str]:
    if not browser.links:
        return _search(rng, browser, task)
    i = rng.randrange(len(browser.links))
    return {"action": "click", "id": i + 1}, _open(browser, browser.links[i])


def _visit(rng: random.Random, browser: Browser, task: Task) -> tuple[dict, str]:
    page = rng.choice(browser.pages)
    if rng.random() < 0.3:
        # Links to reports often end in a PDF that the text browser only downloads.
        url = f"{page.url}/report-{rng.randint(2015, 2025)}-full.pdf"
        size = f"{rng.uniform(0.3, 9):.1f} MB"
        return {
            "action": "visit",
            "url": url,
        }, f"Downloaded {url} (application/pdf, {size}); saved to downloads/{url.rsplit('/', 1)[1]}"
    return {"action": "visit", "url": page.url}, _open(browser, page)


def _scroll(rng: random.Random, browser: Browser, task: Task) -> tuple[dict, str]:
    if browser.current is None:
        return _click(rng, browser, task)
    down = browser.offset + 40 < len(browser.current.lines) or browser.offset == 0
    browser.offset = browser.offset + 40 if down else max(0, browser.offset - 40)
    if browser.offset >= len(browser.current.lines):
        browser.offset = max(0, len(browser.current.lines) - 40)
    return {"action": "scroll", "direction": "down" if down else "up"}, _window(browser)


def _find(rng: random.Random, browser: Browser, task: Task) -> tuple[dict, str]:
    if browser.current is None:
        return _click(rng, browser, task)
    pattern = rng.choice(("percent", "years", task.topic.split()[-1], "cost", "pilot", "data"))
    hits = [(i, ln) for i, ln in enumerate(browser.current.lines) if pattern.lower() in ln.lower()][:5]
    if not hits:
        return {"action": "find", "pattern": pattern}, f"No matches for `{pattern}`."
    body = "\n".join(f"【{i}】 L{i}: {ln}" for i, ln in hits)
    return {"action": "find", "pattern": pattern}, f"Find results for `{pattern}` in `{browser.current.title}`:\n{body}"


def _back(rng: random.Random, browser: Browser, task: Task) -> tuple[dict, str]:
    if not browser.history:
        return _search(rng, browser, task)
    browser.current, browser.offset = browser.history.pop()
    return {"action": "back"}, _window(browser)


def _answer(rng: random.Random, task: Task, correct: bool) -> tuple[dict, str]:
    text = task.fact if correct else vocab.sentence(rng)
    receipt = rng.choice(
        (f"Answer submitted: {text}", "Answer recorded.", f"Final answer received ({len(text)} characters).")
    )
    return {"action": "answer", "text": text}, receipt


_MOVES = (_search, _click, _click, _visit, _scroll, _scroll, _find, _back)


def new_task(rng: random.Random) -> Task:
    """A question about one topic, with the sentence that answers it."""
    topic = rng.choice(vocab.TOPICS)
    fact = vocab.sentence(rng)
    question = rng.choice(
        (
            f"What does recent reporting say about {topic}? Quote the key finding.",
            f"Find a source on {topic} and report the main number it gives.",
            f"I'm writing a brief on {topic}. What is one well-sourced fact I can cite?",
            f"Look up {topic} and tell me what changed most recently.",
        )
    )
    return Task(topic, question, fact, rng.getrandbits(32))


def play_attempt(rng: random.Random, task: Task) -> Episode:
    """Search, open results, scroll and find, then answer (right or wrong)."""
    browser = Browser(_make_pages(random.Random(task.seed), task))
    budget = turn_budget(rng)
    turns = []
    for step in range(budget):
        if step == 0:
            args, obs = _search(rng, browser, task)
        elif step == budget - 1 and budget > 2:
            found = browser.pages[0] in [browser.current, *(p for p, _ in browser.history)]
            args, obs = _answer(rng, task, found or rng.random() < 0.3)
        else:
            args, obs = rng.choice(_MOVES)(rng, browser, task)
        turns.append(make_turn(action_json(args), obs, rng.choice((None, None, f"Step {step + 1}: {args['action']}."))))
    answered = budget > 2
    success = answered and task.fact in turns[-1]["action"]
    return Episode(task.question, ACTION_SPACE, turns, outcome=outcome_of(rng, success))


SPEC = DomainSpec("search", new_task, play_attempt, DEMONSTRATIONS, SIMULATION_INSTRUCTIONS)


def generate_search(seed: int, n: int) -> list[dict]:
    """`n` search trajectory dicts in the lwm-jsonl layout."""
    return build_corpus(SPEC, seed, n)
