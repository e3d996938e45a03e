"""Per-trajectory steps between normalize and the trajectories layer (filter, redact, …).

Each step is ``step(traj, stats) -> Trajectory | None``: it returns the (possibly changed)
trajectory, or None to drop it after counting the reason in `stats` under ``filtered.<reason>``.

A step is registered where it is written, with `trajectory_step`: its name, the config section it
reads and its place in the default order, in one decorator on the function that builds it from a
config. The modules that register steps are found by reading the package (`step_modules`: every
module under ``stages/`` with a line starting ``@trajectory_step(``), so a new step needs no list
entry anywhere; a found module that fails to import is an error, never skipped. The ingest stage
hashes every registered step's section into its task specs (`step_sections`), so changing a step's
settings re-runs ingest on resume.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from schemas.stats import Stats
from schemas.trajectory import Trajectory

TrajectoryStep = Callable[[Trajectory, Stats], Trajectory | None]
StepBuilder = Callable[[dict[str, Any]], list[TrajectoryStep]]

# Packages read for step modules (`step_modules`); their import errors are errors, never skipped.
STEP_PACKAGES = ("stages",)
_REGISTERS = re.compile(r"^@trajectory_step\(", re.MULTILINE)


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


@cache
def step_modules(package: str) -> tuple[str, ...]:
    """The modules of `package` (and its subpackages) whose source registers a step, in name order."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"no package {package!r} to read trajectory steps from", name=package)
    found = set()
    for location in spec.submodule_search_locations:
        base = Path(location)
        for path in base.rglob("*.py"):
            if _REGISTERS.search(path.read_text(encoding="utf-8")):
                parts = path.relative_to(base).with_suffix("").parts
                found.add(".".join((package, *(p for p in parts if p != "__init__"))))
    return tuple(sorted(found))


def registered_steps() -> list[RegisteredStep]:
    """Every registered step in run order (the modules that register them are imported first)."""
    for package in STEP_PACKAGES:
        for module in step_modules(package):
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
