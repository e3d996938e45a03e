"""World-model system prompts built from the five schema fields (minimal placeholder)."""

from __future__ import annotations

from schemas.trajectory import Trajectory


def render_system(traj: Trajectory, variant: str, extra_dirs: tuple[str, ...] = ()) -> str:
    """The system prompt of `traj` under template `variant`."""
    s = traj.system
    parts = [
        f"You simulate the {traj.domain} environment. Predict the next observation for each action.",
        f"## Task\n{s.task_description}",
        f"## Action space\n{s.action_space}",
    ]
    if s.initial_state:
        parts.append(f"## Initial state\n{s.initial_state}")
    if s.demonstrations:
        demos = "\n\n".join(f"Action:\n{d.action}\nObservation:\n{d.observation}" for d in s.demonstrations)
        parts.append(f"## Demonstrations\n{demos}")
    if s.simulation_instruction:
        parts.append(f"## Simulation instruction\n{s.simulation_instruction}")
    return "\n\n".join(parts)
