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
    # surrogateescape: a native key holding a non-UTF-8 file name hashes that name's bytes
    digest = hashlib.sha256(f"{fmt}\x00{native_key}".encode("utf-8", "surrogateescape")).hexdigest()
    return digest[:24]


def _dump_meta(meta: Any) -> str | None:
    if meta is None or meta == {} or meta == "":
        return None
    if isinstance(meta, str):
        return meta
    return json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str)


def printable_uri(uri: str) -> str:
    """`uri` as valid UTF-8 text: the bytes of a non-UTF-8 file name (which reach Python as lone
    surrogates) are written as ``\\xNN``."""
    if not isinstance(uri, str) or uri.isascii():
        return uri
    try:
        raw = uri.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that no file-name decoding produced
        return uri.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


@dataclass
class Source:
    kind: str = "public"
    format: str = ""
    uri: str = ""  # recorded as printable UTF-8 (`printable_uri`); the input is opened by its own name
    locator: str = ""

    def __post_init__(self) -> None:
        self.uri = printable_uri(self.uri)


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
                outcome=Outcome(out.get("success"), out.get("reward")) if out is not None else None,
                meta=_dump_meta(d.get("meta")),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidRecord("missing_field", f"trajectory field {exc}", locator) from None
        except RecursionError:
            raise InvalidRecord("too_deep", "a trajectory field is nested too deeply", locator) from None
        validate(traj, locator)
        return traj


def validate(traj: Trajectory, locator: str = "") -> None:
    """Check the invariants of SPEC §4; raise `InvalidRecord` naming the first broken one.

    This is the one validation every trajectory passes, in ``lwm run`` and ``lwm validate`` alike:
    besides the invariants it checks every field's type against `TRAJECTORY_SCHEMA` and that every
    text is encodable UTF-8 (no lone surrogate such as a JSON ``"\\ud800"``), so nothing that passes
    can fail later in a writer, the redactor or the renderer. An integer `outcome.reward` is stored
    as its float.
    """

    def bad(reason: str, detail: str) -> None:
        raise InvalidRecord(reason, detail, locator)

    for name, value, optional in () if _texts_are_valid(traj) else _text_fields(traj):
        if value is None and optional:
            continue
        if not isinstance(value, str):
            bad("wrong_type", f"{name} must be text{' or null' if optional else ''}, got {type(value).__name__}")
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad("bad_encoding", f"{name} holds a lone surrogate (U+{ord(value[exc.start]):04X}) at {exc.start}")
    if not traj.traj_id:
        bad("missing_field", "traj_id is empty")
    if traj.domain not in DOMAINS:
        bad("bad_domain", f"domain {traj.domain!r} is not one of {', '.join(DOMAINS)}")
    if not traj.split_key:
        bad("missing_field", "split_key is empty")
    if traj.source.kind and traj.source.kind not in SOURCE_KINDS:
        bad("bad_value", f"source.kind {traj.source.kind!r} is not one of {', '.join(SOURCE_KINDS)}")
    if not traj.turns:
        bad("no_turns", "the trajectory has no turns")
    out = traj.outcome
    if out is not None:
        if not isinstance(out, Outcome):
            bad("wrong_type", "outcome must be an object or null")
        if out.success is not None and not isinstance(out.success, bool):
            bad("wrong_type", f"outcome.success must be true, false or null, got {type(out.success).__name__}")
        reward = out.reward
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
            bad("wrong_type", f"outcome.reward must be a number or null, got {type(reward).__name__}")
        if isinstance(reward, int):  # stored as float64: an integer reward becomes its nearest float
            try:
                out.reward = float(reward)
            except OverflowError:
                bad("bad_value", "outcome.reward is out of range")


def _texts_are_valid(traj: Trajectory) -> bool:
    """Whether every text field is a `str` (or None where optional) that encodes as UTF-8: the check of
    `_text_fields` without naming each field, for the common case. False sends `validate` through the named
    fields, which finds and reports the first broken one (or passes what only this quick check declined:
    a subclass of `str`)."""
    src, sy, turns = traj.source, traj.system, traj.turns
    if type(src) is not Source or type(sy) is not SystemPrompt or type(sy.demonstrations) is not list \
            or type(turns) is not list:
        return False
    required = [traj.traj_id, traj.domain, traj.split_key, src.kind, src.format, src.uri, src.locator,
                sy.task_description, sy.action_space]
    optional = [sy.initial_state, sy.simulation_instruction, traj.meta]
    for d in sy.demonstrations:
        if type(d) is not Demonstration:
            return False
        required += (d.action, d.observation)
    for t in turns:
        if type(t) is not Turn:
            return False
        required += (t.action, t.observation)
        optional += (t.reasoning, t.meta)
    for value in required:
        if type(value) is not str or not (value.isascii() or _encodable(value)):
            return False
    for value in optional:
        if value is not None and (type(value) is not str or not (value.isascii() or _encodable(value))):
            return False
    return True


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text_fields(traj: Trajectory):
    """``(name, value, optional)`` of every text field, in schema order (wrong containers are
    reported as a wrong-typed field)."""
    yield "traj_id", traj.traj_id, False
    yield "domain", traj.domain, False
    yield "split_key", traj.split_key, False
    src = traj.source
    if not isinstance(src, Source):
        yield "source", src, False
        return
    for name in ("kind", "format", "uri", "locator"):
        yield f"source.{name}", getattr(src, name), False
    sy = traj.system
    if not isinstance(sy, SystemPrompt):
        yield "system", sy, False
        return
    yield "system.task_description", sy.task_description, False
    yield "system.action_space", sy.action_space, False
    yield "system.initial_state", sy.initial_state, True
    yield "system.simulation_instruction", sy.simulation_instruction, True
    if not isinstance(sy.demonstrations, list):
        yield "system.demonstrations", sy.demonstrations, False
        return
    for i, d in enumerate(sy.demonstrations, 1):
        yield f"system.demonstrations[{i}].action", getattr(d, "action", None), False
        yield f"system.demonstrations[{i}].observation", getattr(d, "observation", None), False
    if not isinstance(traj.turns, list):
        yield "turns", traj.turns, False
        return
    for i, t in enumerate(traj.turns, 1):
        if not isinstance(t, Turn):
            yield f"turn {i}", t, False
            continue
        yield f"turn {i}: action", t.action, False
        yield f"turn {i}: observation", t.observation, False
        yield f"turn {i}: reasoning", t.reasoning, True
        yield f"turn {i}: meta", t.meta, True
    yield "meta", traj.meta, True


def trajectories_to_table(trajs: list[Trajectory]) -> pa.Table:
    """Arrow table with `TRAJECTORY_SCHEMA` (rows in the given order)."""
    return pa.Table.from_pylist([t.to_dict() for t in trajs], schema=TRAJECTORY_SCHEMA)


def trajectories_from_table(table: pa.Table) -> list[Trajectory]:
    """Inverse of `trajectories_to_table`."""
    return [Trajectory.from_dict(row) for row in table.to_pylist()]
