"""The unified environment trajectory (SPEC §4): Arrow schema and typed records.

``trajectory = system ⊕ [turn_1 … turn_T]`` with ``system = task_description ⊕ action_space ⊕
initial_state ⊕ demonstrations ⊕ simulation_instruction``. Field names are the contract: the
Arrow schema, the Python records and the ``lwm-jsonl`` interchange format use the same ones.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from schemas.errors import InvalidRecord

DOMAINS = ("mcp", "search", "terminal", "swe", "android", "web", "os")
GUI_DOMAINS = ("android", "web", "os")
SOURCE_KINDS = ("sandbox", "public", "internal")

SOURCE_TYPE = pa.struct(
    [
        ("kind", pa.string()),
        ("format", pa.string()),
        ("uri", pa.string()),
        ("locator", pa.string()),
    ]
)
DEMONSTRATION_TYPE = pa.struct([("action", pa.string()), ("observation", pa.string())])
SYSTEM_TYPE = pa.struct(
    [
        ("task_description", pa.string()),
        ("action_space", pa.string()),
        ("initial_state", pa.string()),
        ("demonstrations", pa.list_(DEMONSTRATION_TYPE)),
        ("simulation_instruction", pa.string()),
    ]
)
TURN_TYPE = pa.struct(
    [
        ("action", pa.string()),
        ("observation", pa.string()),
        ("reasoning", pa.string()),
        ("meta", pa.string()),
    ]
)
OUTCOME_TYPE = pa.struct([("success", pa.bool_()), ("reward", pa.float64())])

TRAJECTORY_SCHEMA = pa.schema(
    [
        ("traj_id", pa.string()),
        ("domain", pa.string()),
        ("split_key", pa.string()),
        ("source", SOURCE_TYPE),
        ("system", SYSTEM_TYPE),
        ("turns", pa.list_(TURN_TYPE)),
        ("outcome", OUTCOME_TYPE),
        ("meta", pa.string()),
    ]
)


def make_traj_id(fmt: str, native_key: str) -> str:
    """Stable id from the source format and the record's native identity (id, or file + locator)."""
    digest = hashlib.sha256(f"{fmt}\x00{native_key}".encode()).hexdigest()
    return digest[:24]


def _dump_meta(meta: Any) -> str | None:
    if meta is None or meta == {} or meta == "":
        return None
    if isinstance(meta, str):
        return meta
    return json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str)


@dataclass
class Source:
    kind: str = "public"
    format: str = ""
    uri: str = ""
    locator: str = ""


@dataclass
class Demonstration:
    action: str
    observation: str


@dataclass
class SystemPrompt:
    task_description: str = ""
    action_space: str = ""
    initial_state: str | None = None
    demonstrations: list[Demonstration] = field(default_factory=list)
    simulation_instruction: str | None = None


@dataclass
class Turn:
    action: str
    observation: str
    reasoning: str | None = None
    meta: str | None = None  # JSON text


@dataclass
class Outcome:
    success: bool | None = None
    reward: float | None = None


@dataclass
class Trajectory:
    traj_id: str
    domain: str
    split_key: str
    source: Source
    system: SystemPrompt
    turns: list[Turn]
    outcome: Outcome | None = None
    meta: str | None = None  # JSON text

    def to_dict(self) -> dict[str, Any]:
        """Plain dict in the exact field layout of `TRAJECTORY_SCHEMA` (and of lwm-jsonl)."""
        # Written out by hand: `dataclasses.asdict` deep-copies every string and was a hot spot.
        src, sy, out = self.source, self.system, self.outcome
        return {
            "traj_id": self.traj_id,
            "domain": self.domain,
            "split_key": self.split_key,
            "source": {"kind": src.kind, "format": src.format, "uri": src.uri, "locator": src.locator},
            "system": {
                "task_description": sy.task_description,
                "action_space": sy.action_space,
                "initial_state": sy.initial_state,
                "demonstrations": [{"action": d.action, "observation": d.observation} for d in sy.demonstrations],
                "simulation_instruction": sy.simulation_instruction,
            },
            "turns": [
                {"action": t.action, "observation": t.observation, "reasoning": t.reasoning, "meta": t.meta}
                for t in self.turns
            ],
            "outcome": None if out is None else {"success": out.success, "reward": out.reward},
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], locator: str = "") -> Trajectory:
        """Build from a plain dict (lwm-jsonl line or Arrow row); raises `InvalidRecord`."""
        if not isinstance(d, dict):
            raise InvalidRecord("wrong_type", f"expected an object, got {type(d).__name__}", locator)
        try:
            src = d.get("source") or {}
            sysd = d.get("system") or {}
            turns = [
                Turn(
                    action=t["action"],
                    observation=t["observation"],
                    reasoning=t.get("reasoning"),
                    meta=_dump_meta(t.get("meta")),
                )
                for t in d.get("turns") or []
            ]
            out = d.get("outcome")
            traj = cls(
                traj_id=d.get("traj_id") or "",
                domain=d.get("domain") or "",
                split_key=d.get("split_key") or d.get("traj_id") or "",
                source=Source(**{k: src.get(k) or "" for k in ("kind", "format", "uri", "locator")}),
                system=SystemPrompt(
                    task_description=sysd.get("task_description") or "",
                    action_space=sysd.get("action_space") or "",
                    initial_state=sysd.get("initial_state"),
                    demonstrations=[
                        Demonstration(x["action"], x["observation"])
                        for x in sysd.get("demonstrations") or []
                    ],
                    simulation_instruction=sysd.get("simulation_instruction"),
                ),
                turns=turns,
                outcome=Outcome(out.get("success"), out.get("reward")) if out else None,
                meta=_dump_meta(d.get("meta")),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidRecord("missing_field", f"trajectory field {exc}", locator) from None
        validate(traj, locator)
        return traj


def validate(traj: Trajectory, locator: str = "") -> None:
    """Check the invariants of SPEC §4; raise `InvalidRecord` naming the first broken one."""

    def bad(reason: str, detail: str) -> None:
        raise InvalidRecord(reason, detail, locator)

    if not traj.traj_id:
        bad("missing_field", "traj_id is empty")
    if traj.domain not in DOMAINS:
        bad("bad_domain", f"domain {traj.domain!r} is not one of {', '.join(DOMAINS)}")
    if not traj.split_key:
        bad("missing_field", "split_key is empty")
    if traj.source.kind and traj.source.kind not in SOURCE_KINDS:
        bad("bad_value", f"source.kind {traj.source.kind!r} is not one of {', '.join(SOURCE_KINDS)}")
    for name in ("task_description", "action_space"):
        if not isinstance(getattr(traj.system, name), str):
            bad("wrong_type", f"system.{name} must be text")
    if not traj.turns:
        bad("no_turns", "the trajectory has no turns")
    for i, t in enumerate(traj.turns, 1):
        if not isinstance(t.action, str) or not isinstance(t.observation, str):
            bad("wrong_type", f"turn {i}: action and observation must be text")
        for name in ("reasoning", "meta"):
            value = getattr(t, name)
            if value is not None and not isinstance(value, str):
                bad("wrong_type", f"turn {i}: {name} must be text or null")


def trajectories_to_table(trajs: list[Trajectory]) -> pa.Table:
    """Arrow table with `TRAJECTORY_SCHEMA` (rows in the given order)."""
    return pa.Table.from_pylist([t.to_dict() for t in trajs], schema=TRAJECTORY_SCHEMA)


def trajectories_from_table(table: pa.Table) -> list[Trajectory]:
    """Inverse of `trajectories_to_table`."""
    return [Trajectory.from_dict(row) for row in table.to_pylist()]
