"""Rubric reward: the judge's answer → five scores → a reward in [5, 25] (0 when it has none).

`parse_judge_answer` is lenient about *where* the scores are and strict about *what* they are:

1. think blocks are dropped (a complete ``<think>…</think>``; an unclosed ``<think>`` up to the
   ``<final_evaluation>`` tag; everything before an orphaned ``</think>``);
2. the text inside the last ``<final_evaluation>`` (to its closing tag or the end) is searched
   when the tag is there, else the whole answer;
3. candidates, in order: fenced code blocks holding an object (the last one naming ``scores``
   first), then every balanced ``{…}`` object in the text (again the last naming ``scores``);
4. a candidate that is not valid JSON is repaired (trailing commas, single-quoted or bare keys)
   and, failing that, its ``"scores": {…}`` object alone is parsed;
5. a score may be an integer, a float (rounded), or a string such as ``"4"`` or ``"4/5"``;
   values above 5 are clamped to 5; a value below 1, not finite (NaN, Infinity), missing or
   unreadable makes the answer invalid — all five dimensions are needed, so a judge answer that rates only some of them
   gives 0 like one that rates none (a partial mean would reward an answer the judge did not finish).

reward = mean of the five scores × 5, so 5 (all 1) … 25 (all 5); an invalid answer gives
`INVALID_REWARD` (0).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from stages.reward.judge_prompts import DIMENSIONS

ANSWER_TAG = "final_evaluation"
INVALID_REWARD = 0.0
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_SCORE_STR = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*\d+)?\s*$")
_SCAN_BUDGET = 4  # `_balanced_objects` reads the text at most this many times over


@dataclass(frozen=True)
class RubricScores:
    """A parsed judge answer: the five scores (empty when invalid) and why it failed."""

    scores: dict[str, int] = field(default_factory=dict)
    error: str = ""
    strengths: tuple[str, ...] = ()
    weaknesses: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def reward(self) -> float:
        """mean × 5 ∈ [5, 25]; `INVALID_REWARD` without a valid score."""
        if not self.ok:
            return INVALID_REWARD
        return sum(self.scores[d] for d in DIMENSIONS) / len(DIMENSIONS) * 5.0


def _drop_think(text: str) -> str:
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL | re.IGNORECASE)
    close = text.lower().rfind("</think>")
    if close != -1:
        text = text[close + len("</think>"):]
    open_ = text.lower().find("<think>")
    if open_ != -1:
        answer = text.lower().find(f"<{ANSWER_TAG}>", open_)
        text = text[:open_] + (text[answer:] if answer != -1 else "")
    return text


def _tagged(text: str) -> str | None:
    low = text.lower()
    start = low.rfind(f"<{ANSWER_TAG}>")
    if start == -1:
        return None
    start += len(ANSWER_TAG) + 2
    end = low.find(f"</{ANSWER_TAG}>", start)
    return text[start:] if end == -1 else text[start:end]


def _scan_object(text: str, start: int, closing: dict[int, int]) -> int:
    """Scan from the ``{`` at `start` (outside any string) to its closing brace, recording in `closing` where
    every brace the scan meets outside strings closes (-1: never); the number of characters scanned."""
    opened, in_str, esc = [], False, False
    for j in range(start, len(text)):
        c = text[j]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == "{":
            opened.append(j)
        elif c == "}":
            closing[opened.pop()] = j
            if not opened:
                return j - start + 1
    for j in opened:
        closing[j] = -1
    return len(text) - start


def _balanced_objects(text: str) -> list[str]:
    """Every top-level balanced ``{…}`` in `text`, strings and escapes respected; a brace that never closes is
    skipped, and the objects inside it count.

    A scan from a brace that never closes runs to the end of the text; rescanning from each brace inside it
    was quadratic (20,000 unclosed braces took 10 s). A brace that an earlier scan met outside strings is where
    a scan from it would go, so it is looked up instead; only a brace that was inside a string gets a scan of
    its own, and those stop once the scans have read `_SCAN_BUDGET` times the text.
    """
    out, i, closing, budget = [], 0, {}, _SCAN_BUDGET * len(text)
    while (start := text.find("{", i)) != -1:
        if start not in closing:
            if budget <= 0:
                break
            budget -= _scan_object(text, start, closing)
        end = closing[start]
        if end == -1:
            i = start + 1
            continue
        out.append(text[start : end + 1])
        i = end + 1
    return out


def _prefer_scores(candidates: list[str]) -> list[str]:
    with_scores = [c for c in candidates if "scores" in c]
    return list(reversed(with_scores)) + list(reversed([c for c in candidates if "scores" not in c]))


def _candidates(text: str) -> list[str]:
    fenced = [m.group(1).strip() for m in _FENCE.finditer(text)]
    fenced = [c for c in fenced if c.startswith("{")]
    objects = [o for c in fenced for o in _balanced_objects(c)[:1]]
    return _prefer_scores(objects) + _prefer_scores(_balanced_objects(text))


def _repair(s: str) -> str:
    s = re.sub(r",(\s*[}\]])", r"\1", s)
    s = re.sub(r"'([A-Za-z_]\w*)'(\s*:)", r'"\1"\2', s)
    return re.sub(r"([{,]\s*)([A-Za-z_]\w*)(\s*:)", r'\1"\2"\3', s)


def _json(text: str) -> Any:
    """`text` as JSON; None where it is not JSON, or JSON Python cannot read (an integer of more digits than it
    converts, nesting deeper than its recursion limit)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return None


def _load(candidate: str) -> Any:
    for text in (candidate, _repair(candidate)):
        value = _json(text)
        if value is not None:
            return value
    m = re.search(r"[\"']?scores[\"']?\s*:\s*(\{[^{}]*\})", candidate)
    if m:
        value = _json(_repair(m.group(1)))
        return None if value is None else {"scores": value}
    return None


def _score_value(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, str) and _SCORE_STR.match(v):
        v = float(_SCORE_STR.match(v).group(1))
    if not isinstance(v, int | float) or not math.isfinite(v):  # NaN, Infinity and 1e999 are no score
        return None
    n = round(v)
    if n < 1:
        return None
    return min(n, 5)


def _as_strings(v: Any) -> tuple[str, ...]:
    if isinstance(v, list):
        return tuple(str(x) for x in v)
    return (v,) if isinstance(v, str) and v else ()


def parse_judge_answer(answer: str | None) -> RubricScores:
    """The five scores of a judge answer, leniently located and strictly validated (module doc)."""
    if not answer or not answer.strip():
        return RubricScores(error="empty answer")
    text = _drop_think(answer)
    region = _tagged(text)
    candidates = _candidates(region) if region is not None else []
    candidates += _candidates(text)
    # last resort: a bare ``"scores": {…}`` anywhere (an object whose braces never balance)
    candidates += [c for c in (region, text) if c]
    if not any("{" in c for c in candidates):
        return RubricScores(error="no JSON object")
    last_error = "no scores object"
    for cand in candidates:
        obj = _load(cand)
        if not isinstance(obj, dict) or not isinstance(obj.get("scores"), dict):
            continue
        raw = {str(k).lower(): v for k, v in obj["scores"].items()}
        scores = {d: _score_value(raw.get(d)) for d in DIMENSIONS}
        bad = [d for d, v in scores.items() if v is None]
        if bad:
            last_error = f"invalid or missing score: {', '.join(bad)}"
            continue
        return RubricScores(scores=scores, strengths=_as_strings(obj.get("strengths")),
                            weaknesses=_as_strings(obj.get("weaknesses")))
    return RubricScores(error=last_error)
