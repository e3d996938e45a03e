"""World-model agentic training (WMAT) data: which steps get a block, how a block is asked for and
checked, and how the two agent-side pools are rendered.

A *block* ``z_t = z_traj ⊕ z_eval`` sits between the state and the action of step t: an abstract
roadmap of what comes next (``<imaginary>``), keywords of the later trajectory (``<keyword>``),
a gap analysis ending in the concrete next-step intent (``<analysis>``) and the success
probability (``<confidence>``). A strong model writes it **from the future ground truth**; the
answer is kept only if it is a well-formed block (`stages.reward.wmat_format.check_block`, q
parseable) with no spoilers against the future turns (`find_spoilers`).

What the model sees at step t (`block_messages`): the task and action space, the known part (the
initial state, turns 1..t−1 and the action of step t, which the block's intent may name), and,
marked as ground truth not to be revealed, the future (the observation of step t, every later
turn) and the episode's outcome. Observations are cut to ``obs_chars`` characters each.

The agent-side samples (rendered here, tokenized by the caller):

- **mid-training** (`midtrain_segments`): the whole trajectory from the agent's view as a chat —
  system (task and action space), then per step a user message with the state (the initial
  state, or the previous observation) and an assistant message with the block (at block steps)
  and the policy span ``<think>…</think> <action>…</action>``; the last observation closes it.
- **FE-SFT** (`fesft_segments`): one single-turn sample per block step; the prompt holds the task,
  the format instruction and the history, the reply is the block followed by the policy span.

Segments carry a category: ``world_model`` (a block), ``policy`` (think + action, with the
closing end-of-turn token), ``observation`` (an environment message of the mid-training chat), or
None (system, prompts and chat scaffolding, weight 0).
"""

from __future__ import annotations

import regex

from schemas.trajectory import Trajectory
from stages.pools import stable_unit
from stages.render import CHATML_END, CHATML_START
from stages.reward.wmat_format import FormatCheck, check_block, find_spoilers, render_policy

WORLD_MODEL, POLICY, OBSERVATION = "world_model", "policy", "observation"

WRITER_SYSTEM = """You write world-model blocks for the trajectory of an agent. A block is inserted at one step,
between the state the agent sees and the action it takes, and teaches the agent to imagine
before it acts. You are shown what the agent knows at that step, the action it takes next, and
— as ground truth that must NOT be revealed — what really happens afterwards and how the episode
ends.

Write exactly these four tags and nothing else:
<imaginary>An abstract roadmap of the remaining steps, with placeholders instead of concrete
future content ("open [a promising result]", "extract [the key figure]").</imaginary>
<keyword>3 to 6 short keywords, separated by commas, that will occur in the later trajectory;
prefer words the agent can already anticipate from the task and the current state.</keyword>
<analysis>A gap analysis: what is known, what is still missing to finish the task, and the
concrete next-step intent (what the next action does and why).</analysis>
<confidence>The probability, as a percentage from 0 to 100, that the episode ends in success,
judged from the current state; calibrated against the real outcome you were shown.</confidence>

No spoilers: never name a concrete entity that only the future reveals — no names, numbers,
URLs, identifiers or quoted sentences from the future observations. Everything you write must
be something the agent could reasonably imagine at this step."""

REASK_NOTE = {
    "spoiler": "Your previous answer revealed concrete future content ({detail}). Use abstract placeholders instead.",
    "malformed": "Your previous answer was not exactly the four tags <imaginary>, <keyword>, <analysis>, "
                 "<confidence> in this order ({detail}).",
    "no_confidence": "Your previous answer had no usable confidence: write one percentage from 0 to 100 "
                     "inside <confidence></confidence>.",
}

FORMAT_INSTRUCTION = """Before acting, imagine. Answer with a world-model span and then a policy span:
<imaginary>abstract roadmap of what comes next</imaginary>
<keyword>keywords you expect in the rest of the episode, comma-separated</keyword>
<analysis>what is known, what is missing, and your next-step intent</analysis>
<confidence>probability of success, 0-100%</confidence>
<think>your reasoning for this step</think>
<action>the action, exactly in the action format</action>"""

_REASONING_MODEL_THINK = regex.compile(r"\A\s*<think>.*?</think>", regex.DOTALL)


def choose_steps(traj_id: str, num_turns: int, count: int, seed: int | str = 0) -> list[int]:
    """`count` steps (1-based, ascending) of a trajectory, chosen by stable hash (all when fewer)."""
    if count <= 0 or num_turns <= 0:
        return []
    ranked = sorted(range(1, num_turns + 1), key=lambda t: (stable_unit("wmat-step", seed, traj_id, t), t))
    return sorted(ranked[:count])


def _cut(text: str | None, limit: int) -> str:
    text = text or ""
    if limit <= 0 or len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters]"


def _outcome_text(traj: Trajectory) -> str:
    o = traj.outcome
    if o is None or (o.success is None and o.reward is None):
        return "unknown"
    parts = []
    if o.success is not None:
        parts.append("success" if o.success else "failure")
    if o.reward is not None:
        parts.append(f"reward {o.reward:g}")
    return ", ".join(parts)


def known_text(traj: Trajectory, t: int) -> str:
    """What the agent knows at step t, plus its next action (the no-spoiler check's allowed text)."""
    s = traj.system
    parts = [s.task_description or "", s.action_space or "", s.initial_state or ""]
    for turn in traj.turns[: t - 1]:
        parts += [turn.action, turn.observation]
    parts.append(traj.turns[t - 1].action)
    return "\n".join(parts)


def future_text(traj: Trajectory, t: int) -> str:
    """What only the future reveals at step t: the observation of step t and every later turn."""
    parts = [traj.turns[t - 1].observation]
    for turn in traj.turns[t:]:
        parts += [turn.action, turn.observation]
    return "\n".join(parts)


def block_messages(traj: Trajectory, t: int, obs_chars: int = 1500, note: str = "") -> list[dict[str, str]]:
    """The chat request asking for the block of step t (module docstring)."""
    s = traj.system
    lines = [f"# Domain\n{traj.domain}", f"# Task\n{s.task_description or ''}", f"# Action space\n{s.action_space or ''}"]
    if s.initial_state:
        lines.append(f"# Initial state\n{_cut(s.initial_state, obs_chars)}")
    lines.append("# Known so far")
    for i, turn in enumerate(traj.turns[: t - 1], 1):
        lines.append(f"## Step {i}\n### Action\n{turn.action}\n### Observation\n{_cut(turn.observation, obs_chars)}")
    if t == 1:
        lines.append("(nothing yet: this is the first step)")
    lines.append(f"# The block goes here: step {t} of {len(traj.turns)}, before this action\n{traj.turns[t - 1].action}")
    lines.append("# Ground truth, do not reveal")
    lines.append(f"## Observation of step {t}\n{_cut(traj.turns[t - 1].observation, obs_chars)}")
    for i, turn in enumerate(traj.turns[t:], t + 1):
        lines.append(f"## Step {i}\n### Action\n{turn.action}\n### Observation\n{_cut(turn.observation, obs_chars)}")
    lines.append(f"## Outcome of the episode\n{_outcome_text(traj)}")
    user = "\n\n".join(lines) + f"\n\nWrite the world-model block for step {t}."
    if note:
        user += "\n\n" + note
    return [{"role": "system", "content": WRITER_SYSTEM}, {"role": "user", "content": user}]


def validate_block(answer: str | None, traj: Trajectory, t: int, spoiler_ngram: int = 5
                   ) -> tuple[FormatCheck | None, str, str, str]:
    """(parsed block or None, reason code, detail, the block's text) of one answer.

    Reason codes: ``""`` (kept), ``malformed`` (tags), ``no_confidence`` (the tag is missing or q
    does not parse), ``spoiler``. A leading reasoning-model ``<think>…</think>`` is ignored.
    """
    if not answer:
        return None, "malformed", "empty answer", ""
    text = _REASONING_MODEL_THINK.sub("", answer).strip()
    check = check_block(text)
    if not check.ok:
        if check.reason in ("missing_tag:confidence", "confidence_unparseable", "empty_tag:confidence"):
            return None, "no_confidence", check.reason, text
        return None, "malformed", check.reason, text
    # the confidence is a stated probability, not content: only the other three tags are checked
    content = "\n".join(check.output.fields[k] for k in ("imaginary", "keyword", "analysis"))
    spoilers = find_spoilers(content, future_text(traj, t), known_text(traj, t), spoiler_ngram)
    if spoilers:
        detail = ", ".join(f"{s.kind} {s.text!r}" for s in spoilers[:3])
        return None, "spoiler", detail, text
    return check, "", "", text


# -- rendering ----------------------------------------------------------------------------------

Segment = tuple[str, str | None]  # (text, category or None for weight 0)


def agent_system(traj: Trajectory, with_format: bool) -> str:
    s = traj.system
    text = f"You are an agent. Complete the task.\n\n# Task\n{s.task_description or ''}\n\n# Action space\n{s.action_space or ''}"
    return text + ("\n\n# Output format\n" + FORMAT_INSTRUCTION if with_format else "")


def _message(role: str, body: list[Segment], chat_format: str, end_category: str | None = None) -> list[Segment]:
    if chat_format == "plain":
        return [*body, ("\n\n", end_category)]
    return [(f"{CHATML_START}{role}\n", None), *body, (CHATML_END, end_category), ("\n", None)]


def _state(traj: Trajectory, t: int) -> str:
    if t == 1:
        return traj.system.initial_state or "(the episode starts)"
    return traj.turns[t - 2].observation


def _reply(block: str | None, traj: Trajectory, t: int) -> list[Segment]:
    turn = traj.turns[t - 1]
    policy = render_policy(turn.reasoning or "", turn.action)
    return ([(block, WORLD_MODEL), ("\n", None)] if block else []) + [(policy, POLICY)]


def midtrain_segments(traj: Trajectory, blocks: dict[int, str], chat_format: str = "chatml") -> list[Segment]:
    """The mid-training sample: the whole trajectory, agent view, blocks inserted at their steps."""
    segs = _message("system", [(agent_system(traj, with_format=False), None)], chat_format)
    for t in range(1, len(traj.turns) + 1):
        # a placeholder state (no initial state recorded) is not an observation to learn
        cat = OBSERVATION if t > 1 or traj.system.initial_state else None
        segs += _message("user", [(_state(traj, t), cat)], chat_format, cat)
        segs += _message("assistant", _reply(blocks.get(t), traj, t), chat_format, POLICY)
    segs += _message("user", [(traj.turns[-1].observation, OBSERVATION)], chat_format, OBSERVATION)
    return [(text, cat) for text, cat in segs if text]


def fesft_prompt(traj: Trajectory, t: int) -> str:
    """The single-turn prompt of step t: the history in text, then the current state."""
    lines = ["# History"]
    if t == 1:
        lines.append("(no steps yet)")
    for i, turn in enumerate(traj.turns[: t - 1], 1):
        lines.append(f"## Step {i}\nAction: {turn.action}\nObservation:\n{turn.observation}")
    lines.append(f"# Current state (step {t})\n{_state(traj, t)}")
    return "\n\n".join(lines)


def fesft_segments(traj: Trajectory, t: int, block: str, chat_format: str = "chatml") -> list[Segment]:
    """The FE-SFT sample of step t: format + history in the prompt, block + policy span as the reply."""
    segs = _message("system", [(agent_system(traj, with_format=True), None)], chat_format)
    segs += _message("user", [(fesft_prompt(traj, t), None)], chat_format)
    segs += _message("assistant", _reply(block, traj, t), chat_format, POLICY)
    return [(text, cat) for text, cat in segs if text]


def tokenize_segments(seg, segments: list[Segment], weights: dict[str, float]
                      ) -> tuple[list[int], list[float], list[tuple[int, int]], list[str]]:
    """Ids, per-token loss weights, and the token span and category of each weighted part.

    The whole text is tokenized at once (`project_weights`); a token takes the category of the
    segment holding its last byte. Consecutive tokens of one category form one span, so the
    policy span includes its end-of-turn token and a block and the policy span that follows it are
    separate spans (the newline between them has no category).
    """
    from stages.tokenizer.segments import project_weights

    ids, index = project_weights(seg, [(seg.norm(text), 1.0) for text, _ in segments], return_index=True)
    loss, spans, cats = [], [], []
    prev = None
    for i, k in enumerate(index):
        cat = segments[k][1]
        loss.append(float(weights.get(cat, 0.0)) if cat else 0.0)
        if cat is not None and cat == prev:
            spans[-1] = (spans[-1][0], i + 1)
        elif cat is not None:
            spans.append((i, i + 1))
            cats.append(cat)
        prev = cat
    return ids, loss, spans, cats
