"""Per-trajectory steps between normalize and the trajectories layer (filter, redact, …).

Each step is ``step(traj, stats) -> Trajectory | None``: it returns the (possibly changed)
trajectory, or None to drop it after counting the reason in `stats` under ``filtered.<reason>``.

A step is registered where it is written, with `trajectory_step`: its name, the config section it
reads and its place in the default order, in one decorator on the function that builds it from a
config. The ingest stage hashes every registered step's section into its task specs
(`step_sections`), so changing a step's settings re-runs ingest on resume.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas.stats import Stats
from schemas.trajectory import Trajectory

TrajectoryStep = Callable[[Trajectory, Stats], Trajectory | None]
StepBuilder = Callable[[dict[str, Any]], list[TrajectoryStep]]

# Modules whose import registers built-in steps; a missing one is an error, never skipped.
STEP_MODULES = ("stages.filters", "stages.redact")


@dataclass(frozen=True)
class RegisteredStep:
    name: str
    section: str  # the config section the builder reads
    order: int  # steps run by ascending order (SPEC §3: filters, then redaction)
    build: StepBuilder


_STEPS: dict[str, RegisteredStep] = {}


def trajectory_step(name: str, *, section: str, order: int) -> Callable[[StepBuilder], StepBuilder]:
    """Register ``build(cfg) -> [step, …]`` (an empty list when the config turns the step off)."""

    def register(build: StepBuilder) -> StepBuilder:
        known = _STEPS.get(name)
        if known is not None and known.build is not build:
            raise ValueError(f"trajectory step {name!r} is registered twice")
        _STEPS[name] = RegisteredStep(name, section, order, build)
        return build

    return register


def unregister_step(name: str) -> None:
    _STEPS.pop(name, None)


def registered_steps() -> list[RegisteredStep]:
    """Every registered step in run order (the built-in modules are imported first)."""
    for module in STEP_MODULES:
        importlib.import_module(module)
    return sorted(_STEPS.values(), key=lambda s: (s.order, s.name))


def step_sections() -> tuple[str, ...]:
    """The config sections the registered steps read, sorted."""
    return tuple(sorted({s.section for s in registered_steps()}))


def build_steps(cfg: dict[str, Any]) -> list[TrajectoryStep]:
    return [step for registered in registered_steps() for step in registered.build(cfg)]


def apply_steps(traj: Trajectory, steps: list[TrajectoryStep], stats: Stats) -> Trajectory | None:
    for step in steps:
        out = step(traj, stats)
        if out is None:
            return None
        traj = out
    return traj
