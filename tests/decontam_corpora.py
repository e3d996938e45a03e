"""Corpora for measuring decontamination: distinct tasks that share a framework's boilerplate, and
lightly edited copies of evaluation records.

- `replicate`: a real trajectory (from ../shared/data) copied with distinct tasks. In each copy every
  task word (a word of four or more letters of the task description, outside a short list of ordinary
  English words) is replaced wherever it occurs — task, actions, observations — by a pseudo-word of that
  copy, every number by another number, and about a quarter of the turns (never the first) are left
  out. What the framework writes around the task (its prompts, harness commands, banners, listings
  of ordinary files) stays, in some copies and not in others.
- `lightly_edited`: the record's task rephrased and a few words changed in every other observation (one
  word in 30, at most three, in observations of 20 words or more).

Both are written here, independently of the decontamination code they measure.
"""

from __future__ import annotations

import json
import random
import re

from schemas.stats import Stats
from stages.decontam import iter_references, reference_units

ORDINARY = set(
    ["about", "above", "after", "again", "also", "always", "another", "answer", "any", "because", "been", "before", "being", "below", "between", "both", "could", "does", "doing", "done", "down", "each", "even", "every", "first", "from", "further", "have", "having", "here", "into", "just", "like", "make", "more", "most", "much", "must", "need", "only", "other", "over", "please", "same", "should", "some", "such", "than", "that", "their", "them", "then", "there", "these", "they", "this", "those", "through", "under", "until", "using", "very", "what", "when", "where", "which", "while", "will", "with", "without", "would", "your", "find", "file", "files", "give", "list", "show", "tell", "check", "create", "open", "make", "sure"]
)
WORD = re.compile(r"[A-Za-z][A-Za-z_]{3,}")
NUMBER = re.compile(r"\d+")
SYLLABLES = ["ka", "lo", "mi", "ru", "te", "zo", "vi", "na", "pe", "su", "do", "fa", "gu", "hi", "jo", "xe"]


def shared_trajectories(folder) -> list[dict]:
    """Every trajectory (two turns or more) an ingest adapter rebuilds from one ../shared/data folder."""
    out = []
    for uri in reference_units([str(folder)]):
        out.extend(t for _, t in iter_references(uri, Stats()) if len(t["turns"]) >= 2)
    return out


def task_words(traj: dict) -> set[str]:
    task = traj["system"].get("task_description") or ""
    return {w.lower() for w in WORD.findall(task) if w.lower() not in ORDINARY}


def _pseudo(rnd: random.Random) -> str:
    return "".join(rnd.choice(SYLLABLES) for _ in range(rnd.randint(2, 4)))


def _substitute(text: str | None, words: dict[str, str], rnd: random.Random) -> str | None:
    if not text:
        return text
    if words:
        pattern = re.compile(r"(?i)(?<![A-Za-z])(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")(?![A-Za-z])")
        text = pattern.sub(lambda m: words[m[1].lower()], text)
    digits = {}
    return NUMBER.sub(lambda m: digits.setdefault(m[0], str(rnd.randrange(10 ** len(m[0])))), text)


def replicate(traj: dict, copies: int, seed: int, prefix: str) -> list[dict]:
    """`copies` copies of `traj`, each with its own task (module docstring), as lwm-jsonl dicts."""
    out = []
    vocab = task_words(traj)
    for c in range(copies):
        rnd = random.Random(f"{seed}-{prefix}-{c}")
        words = {w: _pseudo(rnd) for w in sorted(vocab)}
        kept = [t for n, t in enumerate(traj["turns"]) if n == 0 or rnd.random() >= 0.25]
        system = dict(traj["system"])
        for field in ("task_description", "initial_state"):
            system[field] = _substitute(system.get(field), words, rnd)
        system["demonstrations"] = []
        out.append({
            "traj_id": f"{prefix}-{c:03d}", "domain": traj["domain"], "split_key": f"{prefix}-{c:03d}",
            "system": system,
            "turns": [{"action": _substitute(t["action"], words, rnd) or "",
                       "observation": _substitute(t["observation"], words, rnd) or ""} for t in kept],
        })
    return out


def lightly_edited(traj: dict, tid: str, split_key: str) -> dict:
    """A lightly edited copy of a trajectory: task rephrased, a few words changed in every other observation."""
    turns = []
    for n, t in enumerate(traj["turns"]):
        obs = t["observation"]
        words = obs.split(" ")
        if n % 2 == 1 and len(words) >= 20:
            k = min(3, max(1, len(words) // 30))
            for j in range(1, k + 1):
                words[j * len(words) // (k + 1)] = "edited"
            obs = " ".join(words)
        turns.append({"action": t["action"], "observation": obs})
    system = dict(traj["system"])
    system["task_description"] = "Restated: " + (system.get("task_description") or "the same task") + " (reworded)"
    return {"traj_id": tid, "domain": traj["domain"], "split_key": split_key, "system": system, "turns": turns}


def write_jsonl(path, trajs: list[dict]) -> None:
    path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in trajs), encoding="utf-8")
