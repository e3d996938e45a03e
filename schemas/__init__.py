"""The unified trajectory schema, its validation, and the shard/manifest contract."""

from schemas.errors import ConfigError, InvalidRecord
from schemas.trajectory import (
    TRAJECTORY_SCHEMA,
    Demonstration,
    Outcome,
    Source,
    SystemPrompt,
    Trajectory,
    Turn,
    make_traj_id,
    trajectories_from_table,
    trajectories_to_table,
)

__all__ = [
    "TRAJECTORY_SCHEMA",
    "ConfigError",
    "Demonstration",
    "InvalidRecord",
    "Outcome",
    "Source",
    "SystemPrompt",
    "Trajectory",
    "Turn",
    "make_traj_id",
    "trajectories_from_table",
    "trajectories_to_table",
]
