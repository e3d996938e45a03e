"""Demo corpus for the ``web`` domain: a browser agent on simulated shop, forum and admin sites.

Format: lwm-jsonl, the sandbox's native format. Two-line example of a native turn::

    {"action": "{\\"action\\": \\"type\\", \\"element\\": 4, \\"text\\": \\"espresso grinder\\", \\"submit\\": true}",
     "observation": "Tab 0 (current): Search results | Northwind Market\\nURL: https://...\\n\\n[1] RootWebArea ..."}

Mapping: each turn is one UI action as JSON (click / type / select / scroll / go_back, elements
addressed by the index shown in the previous tree); the observation is the page's accessibility
tree rendered as indexed, indented lines (``[12] link "Sign in"``) under a tab and URL header;
a modal dialog shows only the dialog's nodes. Each turn changes the page.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.demo.common import DomainSpec, Episode, action_json, build_corpus, make_turn, outcome_of, turn_budget
from pipeline.demo.web_forum import Admin, Forum
from pipeline.demo.web_shop import Shop

ACTION_SPACE = (
    "Web browser actions, one JSON object per step; `element` is the [index] in the current accessibility tree:\n"
    '{"action": "click", "element": int}\n{"action": "type", "element": int, "text": str, "submit": bool}\n'
    '{"action": "select", "element": int, "option": str}\n{"action": "scroll", "direction": "up"|"down"}\n'
    '{"action": "go_back"}\n{"action": "goto", "url": str}'
)
DEMONSTRATIONS = (
    ('{"action": "click", "element": 3}',
     'Tab 0 (current): Sign in | Example\nURL: https://example.com/login\n\n[1] RootWebArea "Sign in | Example"\n'
     '  [2] textbox "Email" required=true\n  [3] textbox "Password" required=true\n  [4] button "Sign in"'),
)  # fmt: skip
SIMULATION_INSTRUCTIONS = (
    "Render the page that results from the action as an accessibility tree with fresh [index] numbers.",
    "You are the browser. Output the next accessibility tree only; keep site content consistent.",
    "Simulate the website. Form values typed earlier must still appear in later trees.",
)
SITES = {"admin": Admin, "forum": Forum, "shop": Shop}


@dataclass(frozen=True)
class Task:
    site_kind: str
    site_seed: int
    description: str
    goal: dict


def new_task(rng: random.Random) -> Task:
    """Draw a site (kind and content seed) and a goal on it."""
    kind = rng.choice(sorted(SITES))
    seed = rng.getrandbits(32)
    site = SITES[kind](random.Random(seed))
    description, goal = site.draw_goal(rng)
    return Task(kind, seed, description, goal)


def play_attempt(rng: random.Random, task: Task) -> Episode:
    """Walk the site toward the goal with detours (scrolling, opening other pages, going back)."""
    site = SITES[task.site_kind](random.Random(task.site_seed))
    site.personalize(rng)
    screen = site.start()
    initial = screen.text()
    steps = site.route(rng, task.goal)
    budget = turn_budget(rng)
    turns = []
    while len(turns) < budget and steps:
        left = budget - len(turns)
        if rng.random() < min(0.6, (left - len(steps)) / left):
            moves = site.detour(rng, screen)  # always ends back on `screen`
        else:
            moves = [steps.pop(0)(screen)]
        for action, nxt in moves[: budget - len(turns)]:
            screen = nxt
            turns.append(
                make_turn(
                    action_json(action), screen.text(), rng.choice((None, None, f"Goal: {task.goal['summary']}."))
                )
            )
    done = not steps
    return Episode(task.description, ACTION_SPACE, turns, initial_state=initial, outcome=outcome_of(rng, done))


SPEC = DomainSpec("web", new_task, play_attempt, DEMONSTRATIONS, SIMULATION_INSTRUCTIONS)


def generate_web(seed: int, n: int) -> list[dict]:
    """`n` web trajectory dicts in the lwm-jsonl layout."""
    return build_corpus(SPEC, seed, n)
