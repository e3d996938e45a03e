"""Texts of a rendered sample in the AgentWorldBench conventions (SPEC §7) and the chat formats.

User turn:      ``### Turn N\\n**Action:**\\n```json\\n{action}\\n```
``                (first turn: ``**Task Instruction:**`` for android, ``**Current State:**`` for
                GUI domains and terminal, before the action)
History reply:  ``**Environment Observation:**\\n{observation}``
Target prompt:  the user turn followed by `PREDICT_INSTRUCTION`
Target reply:   ``{reasoning}<predicted_observation>\\n{observation}\\n</predicted_observation>``
"""

from __future__ import annotations

from schemas.trajectory import GUI_DOMAINS, Trajectory

OBSERVATION_HEADER = "**Environment Observation:**\n"
PREDICT_INSTRUCTION = (
    "\n\nWork out how the environment reacts to this action, reasoning step by step, and then give "
    "the exact observation it returns between <predicted_observation> and </predicted_observation>."
)
PRED_OPEN = "<predicted_observation>\n"
PRED_CLOSE = "\n</predicted_observation>"

CHATML_START = "<|im_start|>"
CHATML_END = "<|im_end|>"


def user_prompt(traj: Trajectory, turn_idx: int) -> str:
    """The user message announcing action `turn_idx` (1-based) of `traj`."""
    turn = traj.turns[turn_idx - 1]
    parts = [f"### Turn {turn_idx}\n"]
    if turn_idx == 1:
        if traj.domain == "android" and traj.system.task_description:
            parts.append(f"**Task Instruction:**\n{traj.system.task_description}\n\n")
        if (traj.domain in GUI_DOMAINS or traj.domain == "terminal") and traj.system.initial_state:
            parts.append(f"**Current State:**\n{traj.system.initial_state}\n\n")
    parts.append(f"**Action:**\n```json\n{turn.action}\n```")
    return "".join(parts)


def target_prompt(traj: Trajectory, turn_idx: int) -> str:
    return user_prompt(traj, turn_idx) + PREDICT_INSTRUCTION


def history_reply(observation: str) -> str:
    return OBSERVATION_HEADER + observation


def target_reply(observation: str, reasoning: str | None) -> str:
    return f"{reasoning or ''}{PRED_OPEN}{observation}{PRED_CLOSE}"


def chatml(role: str, content: str) -> str:
    return f"{CHATML_START}{role}\n{content}{CHATML_END}\n"


def plain(role: str, content: str) -> str:
    return f"{content}\n\n"
