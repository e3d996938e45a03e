"""The four turn statistics of SPEC §5: overlap, novelty, Jaccard similarity and length ratio.

For one turn with action text ``a`` and observation text ``o`` (exactly as stored in the
trajectories layer) and their word sets ``A = word_set(a)``, ``O = word_set(o)``:

- ``ol  = |A ∩ O| / |A|``   how much of the action the observation echoes
- ``nov = |O \\ A| / |O|``   the fraction of the observation's words that are new
- ``jac = |A ∩ O| / |A ∪ O|`` symmetric similarity (reported, no default rule uses it)
- ``r   = len(o) / len(a)``  length ratio in characters (code points)

Empty cases. "Empty" means an empty *word set* for the three set statistics and *zero
characters* for ``r``; the two differ for a text made only of punctuation or whitespace.

- ``|A| = 0`` → ``ol = 0`` (nothing of the action can be echoed);
- ``|O| = 0`` → ``nov = 0`` (a wordless observation carries no new words);
- ``|A ∪ O| = 0`` → ``jac = 0`` (two wordless texts are not called similar);
- ``len(a) = 0`` → ``r = len(o)`` (SPEC: the ratio to an action of length one);
- ``len(o) = 0`` → ``r = 0`` (a no-output turn; also wins when both are empty).

An action of only punctuation, such as ``{}`` or ``[]`` (a tool called with no arguments), has
no words but has characters: ``ol = 0`` while ``r`` stays the ordinary character ratio, so
``{}`` → ``"ok"`` has ``nov = 1, r = 1`` and is an ordinary high-novelty action turn rather
than a turn with an inflated ratio. Likewise an observation of only punctuation (``[]``) gets
``nov = 0`` and its true character ratio, so it falls with the no-output turns.

All set statistics lie in [0, 1]; ``r`` is ≥ 0 and unbounded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from masking.words import word_set


@dataclass(frozen=True, slots=True)
class TurnStats:
    """The four statistics of one turn, plus the observation length the ``short`` rule needs."""

    ol: float
    nov: float
    jac: float
    r: float
    obs_chars: int

    def as_row(self) -> dict[str, float]:
        """The four statistics as the shard's ``turn_stats`` struct (``ol, nov, jac, r``)."""
        return {"ol": self.ol, "nov": self.nov, "jac": self.jac, "r": self.r}


def stats_from_word_sets(
    act_words: frozenset[str], obs_words: frozenset[str], act_chars: int, obs_chars: int
) -> TurnStats:
    """`TurnStats` from precomputed word sets and character lengths (lets callers reuse word sets)."""
    common = len(act_words & obs_words)
    union = len(act_words) + len(obs_words) - common
    ol = common / len(act_words) if act_words else 0.0
    nov = (len(obs_words) - common) / len(obs_words) if obs_words else 0.0
    jac = common / union if union else 0.0
    if obs_chars == 0:
        r = 0.0
    elif act_chars == 0:
        r = float(obs_chars)
    else:
        r = obs_chars / act_chars
    return TurnStats(ol=ol, nov=nov, jac=jac, r=r, obs_chars=obs_chars)


def turn_stats(action: str, observation: str,
               words: Callable[[str], frozenset[str]] = word_set) -> TurnStats:
    """The statistics of one (action, observation) turn, with the empty-set rules of the module docstring.

    `words`: `word_set` or a function equal to it (a task's `stages.memo.TextMemo` of it)."""
    return stats_from_word_sets(words(action), words(observation), len(action), len(observation))
