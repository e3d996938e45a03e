"""The simulated MCP servers of the mcp demo: each tool's schema and how it answers a call.

A tool call is made by `Tool.call(rng, ctx)`, which invents plausible arguments from the task
context and returns them with the tool's result text, so arguments and results always agree.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.demo import vocab


@dataclass
class Context:
    """Facts of one task that several calls refer to (who, where, which file)."""

    company: str
    person: str
    city: str
    repo: str
    channel: str
    path: str
    topic: str
    table: str
    created: list[str] = field(default_factory=list)
    issues: list[int] = field(default_factory=list)  # issue numbers a listing has shown

    @property
    def email(self) -> str:
        first, last = self.person.lower().split()[:2]
        return f"{first}.{last}@{vocab.slug(self.company.split()[0])}.com"


@dataclass(frozen=True)
class Tool:
    name: str
    server: str
    description: str
    params: dict[str, tuple[str, str]]  # name → (JSON type, description)
    call: Callable[[random.Random, Context], tuple[dict[str, Any], str]]
    read_only: bool = False  # the same call returns the same result within one session

    def schema(self) -> dict[str, Any]:
        """The tool as an MCP ``tools/list`` entry."""
        props = {k: {"type": t, "description": d} for k, (t, d) in self.params.items()}
        return {"name": self.name, "description": self.description,
                "inputSchema": {"type": "object", "properties": props, "required": list(self.params)[:1]}}  # fmt: skip


def _js(value: Any, rng: random.Random) -> str:
    # Servers differ: some pretty-print, most return compact JSON.
    return json.dumps(value, ensure_ascii=False, indent=2 if rng.random() < 0.3 else None)


def _stamp(rng: random.Random) -> str:
    return (
        f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(7, 19):02d}:{rng.randint(0, 59):02d}:00Z"
    )


def _read_file(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    people = [vocab.person(rng) for _ in range(rng.randint(2, 5))]
    lines = [f"# {rng.choice(vocab.NOUNS).capitalize()} review, {ctx.company}", "", vocab.paragraph(rng, 2), ""]
    lines += [f"- {p}: owns the {rng.choice(vocab.NOUNS)} {rng.choice(vocab.VERBS)} work" for p in people]
    return {"path": ctx.path}, "\n".join(lines)


def _write_file(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    path = ctx.path.rsplit("/", 1)[0] + f"/{vocab.slug(rng.choice(vocab.NOUNS))}_summary.md"
    content = f"# Summary for {ctx.company}\n\n" + vocab.paragraph(rng, rng.randint(2, 5))
    ctx.created.append(path)
    return {"path": path, "content": content}, f"Successfully wrote to {path}"


def _list_directory(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    folder = ctx.path.rsplit("/", 1)[0]
    names = sorted(
        {
            f"{vocab.slug(rng.choice(vocab.NOUNS))}_{rng.randint(1, 40)}.{rng.choice(('md', 'csv', 'json', 'txt'))}"
            for _ in range(rng.randint(3, 9))
        }
    )
    entries = [f"[FILE] {n}" for n in [*names, ctx.path.rsplit("/", 1)[1]]] + [
        f"[DIR] {d}" for d in rng.sample(("archive", "drafts", "exports", "old"), 2)
    ]
    return {"path": folder}, "\n".join(entries)


def _db_query(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    limit = rng.randint(3, 8)
    sql = (
        f"SELECT id, customer, amount, status FROM {ctx.table} WHERE status = 'open' ORDER BY amount DESC LIMIT {limit}"
    )
    rows = [{"id": rng.randint(1000, 9999), "customer": rng.choice(vocab.COMPANIES), "amount": round(rng.uniform(20, 9000), 2), "status": "open"}
            for _ in range(rng.randint(1, limit))]  # fmt: skip
    return {"sql": sql}, _js(
        {"columns": ["id", "customer", "amount", "status"], "rows": rows, "row_count": len(rows)}, rng
    )


def _db_describe(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    cols = [("id", "integer", "NO"), ("customer", "text", "NO"), ("amount", "numeric(12,2)", "NO"), ("status", "text", "YES"),
            ("created_at", "timestamp with time zone", "NO"), (f"{rng.choice(vocab.NOUNS)}_ref", "uuid", "YES")]  # fmt: skip
    return {"table": ctx.table}, _js([{"column": c, "type": t, "nullable": n} for c, t, n in cols], rng)


def _db_insert(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    row = {"customer": ctx.company, "amount": round(rng.uniform(10, 5000), 2), "status": rng.choice(("open", "paid"))}
    return {"table": ctx.table, "row": row}, _js({"inserted": 1, "id": rng.randint(10000, 99999)}, rng)


def _create_contact(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    person = vocab.person(rng)
    args = {
        "name": person,
        "email": f"{person.lower().replace(' ', '.')}@{vocab.slug(ctx.company.split()[0])}.com",
        "company": ctx.company,
    }
    ctx.created.append(person)
    created = {"created_at": _stamp(rng)} if rng.random() < 0.5 else {"created": True}
    return args, _js({"id": f"ct_{rng.getrandbits(40):010x}", **args, **created}, rng)


def _search_contacts(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    hits = [{"id": f"ct_{rng.getrandbits(40):010x}", "name": vocab.person(rng), "title": rng.choice(("CFO", "Head of Ops", "Buyer", "CTO", "Account Manager")),
             "last_contacted": _stamp(rng)[:10]} for _ in range(rng.randint(0, 4))]  # fmt: skip
    return {"query": ctx.company}, _js({"total": len(hits), "contacts": hits}, rng)


def _update_deal(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    args = {
        "deal_id": f"dl_{rng.randint(100, 999)}",
        "stage": rng.choice(("qualified", "proposal", "negotiation", "closed_won")),
    }
    return args, _js({"status": "ok"}, rng) if rng.random() < 0.6 else "OK"


def _list_issues(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    issues = [{"number": rng.randint(10, 900), "title": f"{rng.choice(vocab.VERBS).capitalize()} fails for {rng.choice(vocab.ADJECTIVES)} {rng.choice(vocab.NOUNS)}s",
               "labels": ["bug"], "comments": rng.randint(0, 14), "author": vocab.slug(rng.choice(vocab.FIRST_NAMES))} for _ in range(rng.randint(1, 5))]  # fmt: skip
    ctx.issues = [i["number"] for i in issues]
    return {"repo": ctx.repo, "state": "open", "labels": "bug"}, _js(issues, rng)


def _get_issue(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    number = rng.choice(ctx.issues) if ctx.issues else rng.randint(10, 900)
    body = (
        vocab.paragraph(rng, 2)
        + f"\n\nSteps: run `{rng.choice(vocab.VERBS)}` on a {rng.choice(vocab.NOUNS)} with an empty {rng.choice(vocab.NOUNS)} field."
    )
    return {"repo": ctx.repo, "number": number}, _js(
        {"number": number, "state": "open", "body": body, "assignee": None}, rng
    )


def _create_issue(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    title = f"{rng.choice(vocab.ADJECTIVES).capitalize()} {rng.choice(vocab.NOUNS)}s are not {rng.choice(vocab.VERBS)}d after {rng.choice(vocab.NOUNS)} import"
    args = {"repo": ctx.repo, "title": title, "body": vocab.sentence(rng)}
    number = rng.randint(10, 900)
    return args, _js(
        {
            "number": number,
            "title": title,
            "html_url": f"https://github.com/{ctx.repo}/issues/{number}",
            "state": "open",
        },
        rng,
    )


def _post_message(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    text = f"Heads up: {vocab.sentence(rng)} {vocab.sentence(rng)}"
    if rng.random() < 0.5:
        return {"channel": ctx.channel, "text": text}, "sent"
    return {"channel": ctx.channel, "text": text}, f"Message posted to #{ctx.channel}"


def _search_messages(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    hits = [{"user": vocab.slug(rng.choice(vocab.FIRST_NAMES)), "ts": f"17{rng.randint(10**7, 10**8 - 1)}.{rng.randint(100, 999)}",
             "text": vocab.sentence(rng)} for _ in range(rng.randint(1, 4))]  # fmt: skip
    return {"query": ctx.company.split()[0].lower(), "channel": ctx.channel}, _js({"matches": hits}, rng)


def _send_email(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    subject = f"{ctx.company}: {rng.choice(vocab.NOUNS)} update"
    body = f"Hi {ctx.person.split()[0]},\n\n{vocab.paragraph(rng, rng.randint(2, 4))}\n\nBest,\nthe ops team"
    result = f"Email sent to {ctx.email} (subject: {subject})" if rng.random() < 0.5 else "sent"
    return {"to": ctx.email, "subject": subject, "body": body}, result


def _forecast(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    days = rng.randint(2, 5)
    rows = [{"date": f"2024-{rng.randint(3, 10):02d}-{d + 1:02d}", "high_c": rng.randint(8, 33), "low_c": rng.randint(-2, 15),
             "rain_mm": round(rng.uniform(0, 22), 1), "summary": rng.choice(("sunny", "showers", "overcast", "windy", "thunderstorms"))}
            for d in range(days)]  # fmt: skip
    return {"city": ctx.city, "days": days}, _js(
        {"city": ctx.city, "days": days, "units": "metric", "forecast": rows}, rng
    )


def _list_events(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    events = [{"title": f"{rng.choice(vocab.NOUNS).capitalize()} sync with {vocab.person(rng)}", "start": _stamp(rng), "minutes": rng.choice((15, 30, 45, 60))}
              for _ in range(rng.randint(0, 4))]  # fmt: skip
    return {"calendar": "team", "date_from": "2024-03-01", "date_to": "2024-03-15"}, _js(
        {"calendar": "team", "events": events}, rng
    )


def _create_event(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    args = {
        "calendar": "team",
        "title": f"{ctx.company} offsite in {ctx.city}",
        "start": _stamp(rng),
        "attendees": [ctx.email],
    }
    return args, _js({"id": f"evt_{rng.getrandbits(32):08x}", **args, "status": "confirmed"}, rng)


def _web_search(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    results = [{"title": f"{ctx.topic.capitalize()}: {rng.choice(('what we know', 'a review', 'new data', 'explained', 'field notes'))}",
                "url": f"https://{rng.choice(('example.org', 'research.net', 'news.example.com', 'wiki.example'))}/{vocab.slug(ctx.topic).replace('_', '-')}-{rng.randint(1, 99)}",
                "snippet": vocab.sentence(rng)} for _ in range(rng.randint(2, 5))]  # fmt: skip
    return {"query": ctx.topic}, _js({"query": ctx.topic, "results": results}, rng)


def _fetch(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    url = f"https://example.org/{vocab.slug(ctx.topic).replace('_', '-')}"
    text = f"Title: {ctx.topic.capitalize()}\nURL: {url}\nPublished: {_stamp(rng)[:10]}\n\n{vocab.paragraph(rng, rng.randint(3, 6))}"
    return {"url": url}, text


def _memory_store(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    args = {"key": f"{vocab.slug(ctx.company)}_{rng.choice(vocab.NOUNS)}", "value": vocab.sentence(rng)}
    return args, _js({"status": "ok"}, rng)


def _echo(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    message = f"connectivity check for {ctx.company} {rng.choice(vocab.NOUNS)} {rng.choice(vocab.VERBS)} pipeline run {rng.randint(1, 999)}"
    return {"message": message}, f"Echo: {message}" if rng.random() < 0.5 else message


def _think(rng: random.Random, ctx: Context) -> tuple[dict, str]:
    thought = (f"I have what I need about {ctx.company}. Next I should {rng.choice(vocab.VERBS)} the {rng.choice(vocab.NOUNS)} list "
               f"and check it against {ctx.person}'s notes before writing anything.")  # fmt: skip
    return {"thought": thought}, _js({"thought": thought}, rng)


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool("fs_read_file", "filesystem", "Read a text file.", {"path": ("string", "absolute path")}, _read_file, read_only=True),
        Tool("fs_write_file", "filesystem", "Create or overwrite a text file.", {"path": ("string", "absolute path"), "content": ("string", "file text")}, _write_file),
        Tool("fs_list_directory", "filesystem", "List a directory.", {"path": ("string", "absolute path")}, _list_directory, read_only=True),
        Tool("db_query", "postgres", "Run a read-only SQL query.", {"sql": ("string", "one SELECT statement")}, _db_query, read_only=True),
        Tool("db_describe_table", "postgres", "Columns of a table.", {"table": ("string", "table name")}, _db_describe, read_only=True),
        Tool("db_insert", "postgres", "Insert one row.", {"table": ("string", "table name"), "row": ("object", "column values")}, _db_insert),
        Tool("crm_create_contact", "crm", "Create a contact.", {"name": ("string", "full name"), "email": ("string", "address"), "company": ("string", "")}, _create_contact),
        Tool("crm_search_contacts", "crm", "Search contacts by company or name.", {"query": ("string", "free text")}, _search_contacts, read_only=True),
        Tool("crm_update_deal", "crm", "Move a deal to another stage.", {"deal_id": ("string", ""), "stage": ("string", "pipeline stage")}, _update_deal),
        Tool("github_list_issues", "github", "List issues of a repository.", {"repo": ("string", "owner/name"), "state": ("string", ""), "labels": ("string", "")}, _list_issues, read_only=True),
        Tool("github_get_issue", "github", "Get one issue.", {"repo": ("string", "owner/name"), "number": ("integer", "")}, _get_issue, read_only=True),
        Tool("github_create_issue", "github", "Open an issue.", {"repo": ("string", "owner/name"), "title": ("string", ""), "body": ("string", "")}, _create_issue),
        Tool("slack_post_message", "slack", "Post a message to a channel.", {"channel": ("string", "name without #"), "text": ("string", "")}, _post_message),
        Tool("slack_search_messages", "slack", "Search messages.", {"query": ("string", ""), "channel": ("string", "")}, _search_messages, read_only=True),
        Tool("email_send", "mail", "Send an email.", {"to": ("string", "address"), "subject": ("string", ""), "body": ("string", "")}, _send_email),
        Tool("weather_forecast", "weather", "Daily forecast for a city.", {"city": ("string", ""), "days": ("integer", "1-7")}, _forecast, read_only=True),
        Tool("calendar_list_events", "calendar", "Events in a date range.", {"calendar": ("string", ""), "date_from": ("string", ""), "date_to": ("string", "")}, _list_events, read_only=True),
        Tool("calendar_create_event", "calendar", "Create an event.", {"calendar": ("string", ""), "title": ("string", ""), "start": ("string", "ISO time"), "attendees": ("array", "emails")}, _create_event),
        Tool("web_search", "search", "Search the web.", {"query": ("string", "")}, _web_search, read_only=True),
        Tool("web_fetch", "search", "Fetch a page as text.", {"url": ("string", "")}, _fetch, read_only=True),
        Tool("memory_store", "memory", "Remember a fact under a key.", {"key": ("string", ""), "value": ("string", "")}, _memory_store),
        Tool("debug_echo", "everything", "Echo the message back (connectivity test).", {"message": ("string", "")}, _echo),
        Tool("think", "reasoning", "Write down a thought; returns it unchanged.", {"thought": ("string", "")}, _think),
    )
}  # fmt: skip


def tools_of(servers: list[str]) -> list[Tool]:
    """Every tool of the given servers, in catalog order."""
    return [t for t in TOOLS.values() if t.server in servers]
