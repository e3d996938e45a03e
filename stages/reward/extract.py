"""Strict extraction of a model's predicted observation from its completion.

The prediction counts only between ``<predicted_observation>`` and ``</predicted_observation>``
(the tags the rl and sft prompts ask for, `stages.render`). Everything outside the pair — the
reasoning before it, any text after it — is ignored. Complete ``<think>…</think>`` blocks are
reasoning too and are removed first, so a thinking model that mentions the tag while it thinks
is not penalised for it.

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
from dataclasses import dataclass

OPEN_TAG = "<predicted_observation>"
CLOSE_TAG = "</predicted_observation>"
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


@dataclass(frozen=True)
class Extraction:
    """The prediction (None on a format failure) and why it failed (`status`)."""

    prediction: str | None
    status: str  # ok | missing | duplicate | misordered

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def strip_think(text: str) -> str:
    """`text` without complete ``<think>…</think>`` blocks (an unclosed one is left as it is)."""
    return _THINK.sub("", text)


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
