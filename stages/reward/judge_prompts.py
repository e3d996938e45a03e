"""The judge's instructions: one system prompt per domain and the user message layout.

Written for lwmkit. The judge compares a world model's predicted observation with the real one
on five dimensions, 1–5 each, and answers JSON inside ``<final_evaluation>`` (the layout the
AgentWorldBench judge uses, so one judge deployment serves both). The domain part says which
content the model could know (must match) and which it can only make plausible (format and
plausibility are enough) — the distinction every dimension depends on.
"""

from __future__ import annotations

DIMENSIONS = ("format", "factuality", "consistency", "realism", "quality")

_FRAME = """You grade a world model: a language model that plays the environment of an agent and predicts
the observation the environment returns after the agent's action. You receive the earlier turns
(each action and the real observation), the current action, the model's predicted observation and
the real observation (the ground truth). The ground truth is the reference; every judgement you
make must point at a concrete difference from it or agreement with it.

{domain_notes}

Score each dimension from 1 (unusable) to 5 (no flaw):
- format: layout and conventions of the observation (structure, delimiters, line breaks, field
  names, prompt lines) compared with the ground truth; content errors do not count here.
- factuality: everything the model could know — from the action, the earlier turns, or the
  determinism of the operation — must agree with the ground truth; content the model could not
  know only has to be plausible and of the right form.
- consistency: no contradiction with the state established in earlier turns.
- realism: behaves like the real environment does (silent commands stay silent, errors look like
  real errors, numbers in believable ranges).
- quality: complete and proportionate — nothing important missing, nothing invented at length.

Reason briefly, then end with exactly one block:
<final_evaluation>
```json
{{"strengths": ["..."], "weaknesses": ["..."],
  "scores": {{"format": 1-5, "factuality": 1-5, "consistency": 1-5, "realism": 1-5, "quality": 1-5}}}}
```
</final_evaluation>"""

DOMAIN_NOTES = {
    "mcp": "Domain: tool servers (MCP). Observations are tool results, usually JSON. Field names, "
    "types, error shapes and values implied by the call's arguments must match; values the server "
    "holds privately (ids, timestamps, article text) need only be plausible.",
    "search": "Domain: web search and browsing. Observations are result lists and page text. The "
    "query echo, the number and layout of results and facts stated earlier must match; result "
    "titles, snippets and page text the model cannot know need only be plausible and on topic.",
    "terminal": "Domain: a Linux terminal. Observations are the text the terminal prints. Exit "
    "status, error messages of deterministic failures, echoed input, files written earlier in the "
    "session and computed results must match exactly; listings of pre-existing files, versions, "
    "sizes, PIDs and times need only be plausible and correctly formatted.",
    "swe": "Domain: a software-engineering agent's tools (shell, file viewer, editor) in a code "
    "repository. Edits and views of content shown or written earlier must match exactly, including "
    "line numbers; unseen repository content and test output need only be plausible.",
    "android": "Domain: an Android phone. Observations are the next screen as indexed UI element "
    "lines (class, text, resource id, bounds). Which screen the action leads to and which elements "
    "appear or disappear must match; exact bounds and unseen list contents need only be plausible.",
    "web": "Domain: a web browser. Observations are the page as indexed accessibility-tree lines. "
    "The page the action leads to and the presence or absence of the elements it implies must "
    "match; unseen page content needs only be plausible.",
    "os": "Domain: a desktop operating system. Observations are the screen as indexed "
    "accessibility-tree lines (role, name, bounds). Windows, dialogs and controls the action opens "
    "or closes must match; unseen content and exact geometry need only be plausible.",
}


def judge_system_prompt(domain: str) -> str:
    """The judge's system prompt for `domain` (an unknown domain gets the frame alone)."""
    notes = DOMAIN_NOTES.get(domain, "Domain: a generic environment; observations are text.")
    return _FRAME.format(domain_notes=notes)


def judge_user_prompt(history: list[tuple[str, str]], current: str, prediction: str, reference: str) -> str:
    """The user message: earlier turns, the current action, the prediction, the ground truth."""
    parts = []
    if history:
        parts.append("# Earlier turns\n")
        for prompt, observation in history:
            parts.append(f"{prompt}\n**Observation:**\n{observation}\n")
    parts.append(f"# Current turn\n{current}\n")
    parts.append(f"# Predicted observation (world model)\n```\n{prediction}\n```\n")
    parts.append(f"# Real observation (ground truth)\n```\n{reference}\n```\n")
    parts.append("Grade the prediction on the five dimensions and answer in the <final_evaluation> block.")
    return "\n".join(parts)
