"""Per-trajectory steps between normalize and the trajectories layer (filter, redact).

Each step is ``step(traj, stats) -> Trajectory | None``: it returns the (possibly changed)
trajectory, or None to drop it after counting the reason in `stats` under ``filtered.<reason>``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from schemas.stats import Stats
from schemas.trajectory import Trajectory

TrajectoryStep = Callable[[Trajectory, Stats], Trajectory | None]

# (config section, module, builder) in the order SPEC §3 runs them; modules not present yet are skipped.
_STEP_BUILDERS = [
    ("filter", "stages.filters", "build_filters"),
    ("redact", "stages.redact", "build_redactor"),
]


def build_transforms(cfg: dict[str, Any]) -> list[TrajectoryStep]:
    steps: list[TrajectoryStep] = []
    for _section, mod_name, builder in _STEP_BUILDERS:
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            if exc.name == mod_name:
                continue
            raise
        steps.extend(getattr(mod, builder)(cfg))
    return steps


def apply_transforms(traj: Trajectory, steps: list[TrajectoryStep], stats: Stats) -> Trajectory | None:
    for step in steps:
        out = step(traj, stats)
        if out is None:
            return None
        traj = out
    return traj
