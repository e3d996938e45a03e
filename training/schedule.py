"""Learning-rate schedules: linear warmup, then cosine or linear decay (or constant)."""

from __future__ import annotations

import math

SCHEDULES = ("cosine", "linear", "constant")


def lr_multiplier(step: int, warmup_steps: int, max_steps: int, kind: str, min_ratio: float) -> float:
    """Factor on the peak learning rate for the optimizer step that follows `step` finished steps.

    Warmup rises linearly to 1 over `warmup_steps`; the decay then falls from 1 to `min_ratio`
    at `max_steps` and stays there (a resumed run with a larger `max_steps` stretches the tail).
    """
    if kind not in SCHEDULES:
        raise ValueError(f"schedule {kind!r} is not one of {', '.join(SCHEDULES)}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if kind == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    if kind == "linear":
        return 1.0 - (1.0 - min_ratio) * progress
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
