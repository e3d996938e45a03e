"""Demo corpus for the ``mcp`` domain: tool calls against simulated MCP servers.

Format: lwm-jsonl, the sandbox's native format. Two-line example of a native turn::

    {"action": "{\\"name\\": \\"crm_search_contacts\\", \\"arguments\\": {\\"query\\": \\"Acme Logistics\\"}}",
     "observation": "{\\"total\\": 1, \\"contacts\\": [{\\"id\\": \\"ct_3f0a\\", \\"name\\": \\"Ana Silva\\"}]}"}

Mapping: each turn is one call, canonical JSON ``{"name", "arguments"}``; the observation is the
tool's result text (JSON rows, file text, created records echoing the request, bare ``sent`` /
``{"status": "ok"}`` acknowledgements, an echo tool and a ``think`` tool). The action space is per
trajectory: the ``tools/list`` schemas of the servers the task mounts; every call is declared.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from pipeline.demo import vocab
from pipeline.demo.common import DomainSpec, Episode, action_json, build_corpus, make_turn, outcome_of, turn_budget
from pipeline.demo.mcp_tools import TOOLS, Context, tools_of

DEMONSTRATIONS = (('{"name": "fs_list_directory", "arguments": {"path": "/data"}}', "[FILE] notes.md\n[DIR] archive"),)
SIMULATION_INSTRUCTIONS = (
    "Return exactly the text the MCP server would return for this call: JSON where the tool returns JSON.",
    "You simulate the tool servers listed in the action space. Answer each call with its raw result only.",
    "Respond as the tool would. Invalid arguments produce the server's error text, not an explanation.",
)

# (task text, servers to mount, the plan of tool calls); {placeholders} come from the Context.
_TASKS = (
    ("Read {path} and add every person it lists to the CRM as a contact at {company}.",
     ("filesystem", "crm"), ("fs_read_file", "crm_search_contacts", "crm_create_contact", "crm_create_contact", "think", "crm_create_contact")),
    ("Find open bug reports in {repo} and post a short summary to #{channel}.",
     ("github", "slack"), ("github_list_issues", "github_get_issue", "think", "slack_post_message")),
    ("Check the weather in {city} and book the {company} offsite on the driest day; tell {person} by email.",
     ("weather", "calendar", "mail"), ("weather_forecast", "calendar_list_events", "calendar_create_event", "email_send")),
    ("List the largest open rows in the {table} table and export a summary next to {path}.",
     ("postgres", "filesystem"), ("db_describe_table", "db_query", "think", "fs_write_file")),
    ("Research {topic} and save the key facts for later.",
     ("search", "memory", "filesystem"), ("web_search", "web_fetch", "memory_store", "fs_write_file")),
    ("Verify the MCP connection works, then look through {path} and its folder.",
     ("everything", "filesystem"), ("debug_echo", "fs_list_directory", "fs_read_file")),
    ("Record a new {table} row for {company}, move their deal forward and let #{channel} know.",
     ("postgres", "crm", "slack"), ("db_insert", "crm_update_deal", "slack_post_message", "slack_search_messages")),
    ("Open a GitHub issue in {repo} for the problem people discuss in #{channel}.",
     ("slack", "github", "reasoning"), ("slack_search_messages", "think", "github_create_issue", "slack_post_message")),
)  # fmt: skip


@dataclass(frozen=True)
class Task:
    description: str
    servers: tuple[str, ...]
    plan: tuple[str, ...]
    context_seed: int


def _context(rng: random.Random) -> Context:
    company = rng.choice(vocab.COMPANIES)
    folder = rng.choice(("/data", "/home/user/docs", "/srv/shared", "/workspace/notes"))
    return Context(
        company=company,
        person=vocab.person(rng),
        city=rng.choice(vocab.CITIES),
        repo=f"{vocab.slug(company.split()[0])}/{rng.choice(vocab.NOUNS)}-{rng.choice(('service', 'sdk', 'cli', 'web'))}",
        channel=rng.choice(("ops", "eng-alerts", "sales", "general", "support-escalations", "finance")),
        path=f"{folder}/{rng.choice(vocab.NOUNS)}_{rng.choice(('review', 'roster', 'notes', 'plan'))}.md",
        topic=rng.choice(vocab.TOPICS),
        table=rng.choice(("invoices", "orders", "payments", "shipments", "subscriptions")),
    )


def new_task(rng: random.Random) -> Task:
    """Draw a task template, the extra servers it mounts, and the seed of its facts."""
    text, servers, plan = rng.choice(_TASKS)
    mounted = list(servers)
    for server in [TOOLS[name].server for name in plan] + ["memory", "reasoning", "everything"]:
        # The plan's own servers always; the utility servers now and then, as real configs do.
        if server not in mounted and (server in (TOOLS[name].server for name in plan) or rng.random() < 0.3):
            mounted.append(server)
    seed = rng.getrandbits(32)
    description = text.format(**vars(_context(random.Random(seed))))
    return Task(description, tuple(mounted), plan, seed)


def play_attempt(rng: random.Random, task: Task) -> Episode:
    """One attempt: the task's plan of calls, with extra lookups and repeats mixed in."""
    ctx = _context(random.Random(task.context_seed))
    declared = tools_of(list(task.servers))
    names = [t.name for t in declared]
    budget = turn_budget(rng)
    plan = list(task.plan)
    answered: dict[str, str] = {}  # read-only calls already made: a repeat gets the same answer
    turns = []
    while len(turns) < budget:
        if plan and rng.random() > 0.3:
            name = plan.pop(0)
        else:
            name = rng.choice(names)
        args, result = TOOLS[name].call(rng, ctx)
        action = action_json({"name": name, "arguments": args})
        if TOOLS[name].read_only:
            result = answered.setdefault(action, result)
        reasoning = rng.choice((None, f"Call {name}.", f"Next: {name.replace('_', ' ')}."))
        turns.append(make_turn(action, result, reasoning))
    action_space = json.dumps([t.schema() for t in declared], ensure_ascii=False, indent=1)
    return Episode(task.description, action_space, turns, outcome=outcome_of(rng, not plan))


SPEC = DomainSpec("mcp", new_task, play_attempt, DEMONSTRATIONS, SIMULATION_INSTRUCTIONS)


def generate_mcp(seed: int, n: int) -> list[dict]:
    """`n` mcp trajectory dicts in the lwm-jsonl layout."""
    return build_corpus(SPEC, seed, n)
