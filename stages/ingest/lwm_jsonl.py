"""``lwm-jsonl``: the unified trajectory schema itself, one trajectory per line.

What an in-house sandbox should write. Native record (one line, abridged)::

    {"traj_id": "t1", "domain": "terminal", "split_key": "task-7", "system": {"task_description": "...",
     "action_space": "..."}, "turns": [{"action": "[{\\"keystrokes\\": \\"ls\\\\n\\"}]", "observation": "a b"}]}

Mapping: field for field (SPEC §4). ``traj_id`` may be omitted (derived from the file and line);
``split_key`` defaults to ``traj_id``; ``source`` is filled from the file and line. A domain or source kind given to
the run (``--domain``, ``--source-kind``, ``--opt``) replaces the record's own; ``source.kind`` defaults to public.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import DOMAINS, Source, Trajectory, make_traj_id, validate
from stages.ingest.common import records_from_container
from stages.ingest.reading import InputUnit
from stages.ingest.registry import Probe, RawRecord


class LwmJsonlAdapter:
    name = "lwm-jsonl"
    description = "the unified trajectory schema, one trajectory per line"
    domains = DOMAINS
    default_domain = "terminal"
    line_records = True  # a .jsonl file may be read as byte ranges of whole lines
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        rec = probe.first_record
        if isinstance(rec, dict) and isinstance(rec.get("turns"), list) and isinstance(rec.get("system"), dict):
            return 0.95 if probe.container == "jsonl" else 0.7
        return 0.0

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        return records_from_container(unit, self.name, opts)

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        value = record.value()
        if not isinstance(value, dict):
            raise InvalidRecord("wrong_type", "a line must hold one trajectory object", record.locator)
        if opts.get("domain"):
            value = {**value, "domain": opts["domain"]}
        if not value.get("traj_id"):
            value = {**value, "traj_id": make_traj_id(self.name, f"{record.uri}:{record.locator}")}
        traj = Trajectory.from_dict(value, record.locator)
        src = traj.source
        traj.source = Source(
            kind=opts.get("source_kind") or src.kind or "public",  # a kind given to the run holds, as a domain does
            format=self.name,
            uri=record.uri,
            locator=record.locator,
        )
        validate(traj, record.locator)
        yield traj


ADAPTER = LwmJsonlAdapter()
