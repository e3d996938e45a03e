"""Strict extraction of a model's predicted observation from its completion.

The prediction counts only between ``<predicted_observation>`` and ``</predicted_observation>``
(the tags the rl and sft prompts ask for, `stages.render`). Everything outside the pair — the
reasoning before it, any text after it — is ignored. Think blocks are reasoning too and are
removed first, so a thinking model that mentions the tag while it thinks is not penalised for it:
a complete ``<think>…</think>``, and everything before a ``</think>`` that closes no ``<think>``
(the chat templates of R1, QwQ and Qwen3-Thinking put the opening tag in the prompt, so the
completion holds only the closing one), and an unclosed ``<think>`` up to the first
``<predicted_observation>`` after it (or to the end: a completion cut off while thinking). All three
are what the AgentWorldBench evaluator removes; like it, think tags match in any case.

What is a format failure (the reward module gives it a fixed, configurable reward):

- ``missing``: no opening tag, or no closing tag after it;
- ``duplicate``: more than one opening or more than one closing tag outside think blocks;
- ``misordered``: the closing tag comes before the opening one.

The renderer writes ``<predicted_observation>\\n{observation}\\n</predicted_observation>``, so
exactly one newline after the opening tag and one before the closing tag belong to the tags and
are removed; any other whitespace is part of the prediction (terminal output is whitespace-exact).
Tags are matched case-sensitively, as rendered.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

OPEN_TAG = "<predicted_observation>"
CLOSE_TAG = "</predicted_observation>"
_THINK_TAG = re.compile(r"<(/?)think>", re.IGNORECASE)
_OPEN_TAG_ANY_CASE = re.compile(re.escape(OPEN_TAG), re.IGNORECASE)


@dataclass(frozen=True)
class Extraction:
    """The prediction (None on a format failure) and why it failed (`status`)."""

    prediction: str | None
    status: str  # ok | missing | duplicate | misordered

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def strip_think(text: str) -> str:
    """`text` without its ``<think>…</think>`` blocks, without everything up to a ``</think>`` that closes no
    ``<think>``, and without an unclosed ``<think>`` up to the first opening prediction tag after it (or the end)
    (module docstring).

    Each ``</think>`` closes the earliest ``<think>`` still open, as the AgentWorldBench evaluator pairs them.
    """
    open_at: deque[int] = deque()
    spans = []
    for m in _THINK_TAG.finditer(text):
        if not m.group(1):
            open_at.append(m.start())
        else:
            spans.append((open_at.popleft() if open_at else 0, m.end()))
    for start in open_at:  # never closed: reasoning up to the answer's tag (any case, as the evaluator looks)
        answer = _OPEN_TAG_ANY_CASE.search(text, start)
        spans.append((start, answer.start() if answer else len(text)))
    if not spans:
        return text
    kept, pos = [], 0
    for start, end in sorted(spans):
        if start > pos:
            kept.append(text[pos:start])
        pos = max(pos, end)
    kept.append(text[pos:])
    return "".join(kept)


def extract_prediction(completion: str) -> Extraction:
    """The text inside the one ``<predicted_observation>`` pair of `completion`, strictly."""
    text = strip_think(completion or "")
    opens, closes = text.count(OPEN_TAG), text.count(CLOSE_TAG)
    if opens > 1 or closes > 1:
        return Extraction(None, "duplicate")
    if opens == 0 or closes == 0:
        return Extraction(None, "missing")
    start, end = text.index(OPEN_TAG) + len(OPEN_TAG), text.index(CLOSE_TAG)
    if end < start:
        return Extraction(None, "misordered")
    body = text[start:end]
    if body.startswith("\n"):
        body = body[1:]
    if body.endswith("\n"):
        body = body[:-1]
    return Extraction(body, "ok")
