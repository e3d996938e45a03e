"""The output format of world-model agentic training (WMAT) and its checks: parse, adherence, spoilers.

A WMAT output is a world-model span followed by a policy span, each tag exactly once, in order::

    <imaginary>abstract roadmap of what comes next</imaginary>
    <keyword>keyword one, keyword two</keyword>
    <analysis>gap analysis and the concrete next-step intent</analysis>
    <confidence>70%</confidence>
    <think>the agent's reasoning for this step</think>
    <action>{"action": "search", "query": "…"}</action>

Only whitespace may stand between and around the tags, and a tag's content may not contain
another of the six tags. ``<think>`` may be empty (trajectories often record no reasoning); the
other five may not. The confidence ``q`` is a percentage: one number in [0, 100] with an optional
``%`` sign (``70``, ``70%``, ``72.5 %``); it is rescaled to [0, 1]. Keywords are separated by
commas, semicolons or newlines; duplicates (case-insensitive) count once.

A *block* (what the block writer returns) is the world-model span alone: the first four tags.

No-spoiler check (`find_spoilers`): a block is written with the future turns in view, so it must
not name concrete entities that only the future reveals. The entities of the future text are its
numbers of two or more digits, its identifiers (URLs, paths, dotted or underscored names), its
proper nouns (a capitalized word that does not open a sentence or line and is never written in
lower case in the future or known text) and its word n-grams;
those that also occur in the known text (task, history, the next action) are allowed, the rest
are spoilers when the block contains them (numbers and identifiers as whole tokens, proper
nouns case-sensitively, n-grams over lowercased words).
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

WM_TAGS = ("imaginary", "keyword", "analysis", "confidence")
POLICY_TAGS = ("think", "action")
TAGS = WM_TAGS + POLICY_TAGS
EMPTY_ALLOWED = frozenset({"think"})

_TAG = regex.compile(r"<(/?)(" + "|".join(TAGS) + r")>")
_CONFIDENCE = regex.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(%?)\s*")
_KEYWORD_SPLIT = regex.compile(r"[,;\n]")


@dataclass(frozen=True)
class WmatOutput:
    """A parsed output (or block): tag contents, keywords, q in [0, 1] and the two spans' offsets."""

    fields: dict[str, str]
    keywords: tuple[str, ...]
    confidence: float | None
    wm_span: tuple[int, int]
    policy_span: tuple[int, int] | None

    def __getattr__(self, name: str) -> str:
        if name in TAGS:
            return self.fields.get(name, "")
        raise AttributeError(name)


@dataclass(frozen=True)
class FormatCheck:
    """Result of a format check: ``ok``, a stable ``reason`` code when not, and the parse when ok."""

    ok: bool
    reason: str = ""
    output: WmatOutput | None = None


def parse_confidence(text: str) -> float | None:
    """``"70%"`` → 0.70; None unless the text is one number in [0, 100] with an optional ``%``."""
    m = _CONFIDENCE.fullmatch(text)
    if not m:
        return None
    value = float(m.group(1))
    return value / 100.0 if 0.0 <= value <= 100.0 else None


def parse_keywords(text: str) -> tuple[str, ...]:
    """Keywords in order, whitespace collapsed, duplicates (case-insensitive) and empties dropped."""
    out, seen = [], set()
    for part in _KEYWORD_SPLIT.split(text):
        kw = " ".join(part.split())
        if kw and kw.casefold() not in seen:
            seen.add(kw.casefold())
            out.append(kw)
    return tuple(out)


def _check(text: str, tags: tuple[str, ...]) -> FormatCheck:
    fields: dict[str, str] = {}
    spans: dict[str, tuple[int, int]] = {}
    pos = 0
    for name in tags:
        m = _TAG.search(text, pos)
        if m is None:
            return FormatCheck(False, f"missing_tag:{name}")
        if text[pos : m.start()].strip():
            return FormatCheck(False, "text_outside_tags")
        if m.group(1) or m.group(2) != name:
            seen = m.group(2)
            if m.group(1):
                return FormatCheck(False, f"unopened_tag:{seen}")
            if seen in fields:
                return FormatCheck(False, f"duplicate_tag:{seen}")
            return FormatCheck(False, f"missing_tag:{name}" if seen in tags else f"unexpected_tag:{seen}")
        close = _TAG.search(text, m.end())
        if close is None:
            return FormatCheck(False, f"unclosed_tag:{name}")
        if not close.group(1):
            return FormatCheck(False, f"unclosed_tag:{name}")
        if close.group(2) != name:
            return FormatCheck(False, f"mismatched_tag:{name}")
        content = text[m.end() : close.start()]
        if not content.strip() and name not in EMPTY_ALLOWED:
            return FormatCheck(False, f"empty_tag:{name}")
        fields[name] = content.strip()
        spans[name] = (m.start(), close.end())
        pos = close.end()
    if text[pos:].strip():
        extra = _TAG.search(text, pos)
        if extra is None:
            return FormatCheck(False, "text_outside_tags")
        return FormatCheck(False, f"{'duplicate' if extra.group(2) in fields else 'unexpected'}_tag:{extra.group(2)}")
    q = parse_confidence(fields["confidence"])
    if q is None:
        return FormatCheck(False, "confidence_unparseable")
    keywords = parse_keywords(fields["keyword"])
    if not keywords:
        return FormatCheck(False, "empty_tag:keyword")
    wm = (spans[WM_TAGS[0]][0], spans[WM_TAGS[-1]][1])
    policy = (spans[POLICY_TAGS[0]][0], spans[POLICY_TAGS[-1]][1]) if tags == TAGS else None
    return FormatCheck(True, "", WmatOutput(fields, keywords, q, wm, policy))


def check_output(text: str) -> FormatCheck:
    """Check a whole WMAT output (world-model span + policy span)."""
    return _check(text, TAGS)


def check_block(text: str) -> FormatCheck:
    """Check a world-model block (the four world-model tags, nothing else)."""
    return _check(text, WM_TAGS)


def render_block(imaginary: str, keywords: tuple[str, ...] | list[str], analysis: str, confidence: float) -> str:
    """The world-model span in canonical form (q in [0, 1] written as a whole percentage)."""
    return (f"<imaginary>{imaginary}</imaginary>\n<keyword>{', '.join(keywords)}</keyword>\n"
            f"<analysis>{analysis}</analysis>\n<confidence>{round(confidence * 100)}%</confidence>")


def render_policy(think: str, action: str) -> str:
    """The policy span (``<think>`` then ``<action>``)."""
    return f"<think>{think}</think>\n<action>{action}</action>"


# -- no spoilers -------------------------------------------------------------------------------

_NUMBER = regex.compile(r"(?<![\p{L}\p{N}])\p{N}[\p{N},.]*\p{N}(?![\p{N}])")
_IDENT = regex.compile(r"[\p{L}\p{N}_-]+(?:[./@_:][\p{L}\p{N}_-]+)+")
_WORD = regex.compile(r"[\p{L}\p{N}_']+")
_CAPITAL = regex.compile(r"\p{Lu}[\p{L}\p{N}'-]*")
# what may precede a sentence- or line-opening capital: start, newline, a sentence end, a bullet
_OPENER = regex.compile(r"(?:\A|[\n.!?:;#*>\]|\"(\[-]|\d\.)\s*\Z")


@dataclass(frozen=True)
class Spoiler:
    """One concrete future entity found in a block: its kind and text."""

    kind: str  # number | identifier | proper_noun | phrase
    text: str


def _numbers(text: str) -> set[str]:
    return {m.group(0).rstrip(".,") for m in _NUMBER.finditer(text) if len(regex.sub(r"\D", "", m.group(0))) >= 2}


def _identifiers(text: str) -> set[str]:
    out = set()
    for m in _IDENT.finditer(text):
        token = m.group(0).rstrip(".:_-")
        if len(token) >= 4 and regex.search(r"[\p{L}]", token) and not regex.fullmatch(r"[\p{L}]\.[\p{L}]\.?", token):
            out.add(token)
    return out


def _proper_nouns(text: str) -> set[str]:
    out = set()
    for m in _CAPITAL.finditer(text):
        if len(m.group(0)) < 3 or (m.start() and regex.match(r"[\p{L}\p{N}_]", text[m.start() - 1])):
            continue
        if _OPENER.search(text[max(0, m.start() - 4) : m.start()]):
            continue
        out.add(m.group(0))
    return out


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def find_spoilers(block: str, future: str, known: str, ngram: int = 5) -> list[Spoiler]:
    """Concrete entities of `future` absent from `known` that `block` names (module docstring)."""
    known_words = set(_words(known))
    found: list[Spoiler] = []
    block_numbers, block_idents = _numbers(block), _identifiers(block)
    known_numbers, known_idents = _numbers(known), _identifiers(known)
    for number in sorted(_numbers(future) - known_numbers):
        if number in block_numbers:
            found.append(Spoiler("number", number))
    for ident in sorted(_identifiers(future) - known_idents):
        if ident in block_idents or (len(ident) >= 8 and ident in block):
            found.append(Spoiler("identifier", ident))
    block_tokens = set(_WORD.findall(block))
    # a capitalized word also written in lower case somewhere is a common word ("Search" in a title)
    lower_seen = {w for w in _WORD.findall(future + "\n" + known) if w.islower()}
    for name in sorted(_proper_nouns(future)):
        if name.casefold() not in known_words and name.lower() not in lower_seen and name in block_tokens:
            found.append(Spoiler("proper_noun", name))
    if ngram > 0:
        future_grams = _ngrams(_words(future), ngram) - _ngrams(_words(known), ngram)
        for gram in sorted(_ngrams(_words(block), ngram) & future_grams):
            found.append(Spoiler("phrase", " ".join(gram)))
    return found
