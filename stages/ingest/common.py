"""Small pieces shared by the adapters: raw records from containers, text helpers, ids."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import Source, SystemPrompt, Trajectory, Turn, make_traj_id, validate
from stages.ingest.reading import (
    InputUnit,
    container_kind,
    decode_line,
    iter_container,
    iter_lines,
    json_document_error,
    loads,
    max_record_bytes,
    read_document,
)
from stages.ingest.registry import RawRecord

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def line_records(uri: str, fmt: str, lines: Iterable[tuple[int, str] | InvalidRecord]) -> Iterator[RawRecord | InvalidRecord]:
    """Each JSONL line of `lines` (``(line_number, text)``, or why a line was refused) as a `RawRecord` whose payload
    is the line as written, handing the adapter the value its reader decoded (bad lines as `InvalidRecord`)."""
    for item in lines:
        value = item if isinstance(item, InvalidRecord) else decode_line(uri, *item)
        yield value if isinstance(value, InvalidRecord) else RawRecord(uri, f"line {item[0]}", fmt, item[1], [value])


def records_from_container(unit: InputUnit, fmt: str, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
    """Each record of a JSON/JSONL/CSV/Parquet file as a `RawRecord` (bad ones as `InvalidRecord`).

    A JSONL record's payload is its line as written; a record of the other containers is its value dumped as JSON."""
    if container_kind(unit.uri) == "jsonl":
        yield from line_records(unit.uri, fmt, iter_lines(unit.uri, max_record_bytes(opts)))
        return
    for item in iter_container(unit.uri, max_record_bytes(opts)):
        if isinstance(item, InvalidRecord):
            yield item
            continue
        locator, value = item
        try:
            payload = json.dumps(value, ensure_ascii=False, default=str)
        except RecursionError:
            yield InvalidRecord("too_deep", "JSON nested deeper than the parser allows", locator, unit.uri)
            continue
        yield RawRecord(unit.uri, locator, fmt, payload)


def load_document(unit: InputUnit, opts: dict[str, Any]) -> Any:
    """The whole JSON file parsed, or the `InvalidRecord` (locator ``document``) saying why it cannot be."""
    data = read_document(unit.uri, max_record_bytes(opts))
    if isinstance(data, InvalidRecord):
        return data
    try:
        return loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return InvalidRecord("malformed_json", json_document_error(exc), "document", unit.uri)


def records_from_document(unit: InputUnit, fmt: str, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
    """The whole JSON file as one record (locator ``document``), whatever its top-level shape."""
    value = load_document(unit, opts)
    if isinstance(value, InvalidRecord):
        yield value
        return
    yield RawRecord(unit.uri, "document", fmt, json.dumps(value, ensure_ascii=False))


def canonical_json(value: Any) -> str:
    """Canonical action text for structured actions: compact, key order kept as given."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences and collapse carriage-return overwrites per line."""
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    if "\r" in text:
        text = "\n".join(line.rsplit("\r", 1)[-1] if line.rstrip("\r") else line.rstrip("\r") for line in text.split("\n"))
    return text


def text_of(content: Any) -> str:
    """Text of a message content: a string, or a list of parts (text parts joined by newlines)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    return json.dumps(content, ensure_ascii=False)


def make_trajectory(
    record: RawRecord,
    *,
    domain: str,
    native_key: str,
    turns: list[Turn],
    system: SystemPrompt,
    source_kind: str = "public",
    split_key: str | None = None,
    outcome=None,
    meta: dict[str, Any] | None = None,
) -> Trajectory:
    """Assemble and validate a trajectory with the provenance of `record`."""
    traj_id = make_traj_id(record.format, native_key)
    traj = Trajectory(
        traj_id=traj_id,
        domain=domain,
        split_key=split_key or traj_id,
        source=Source(kind=source_kind, format=record.format, uri=record.uri, locator=record.locator),
        system=system,
        turns=turns,
        outcome=outcome,
        meta=json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str) if meta else None,
    )
    validate(traj, record.locator)
    return traj


class SkippedMember(InvalidRecord):
    """A broken member of a larger record (one event file of a recorded run): it costs that member only.

    It is written to ``quarantine/`` like any bad record, but counted as ``members.skipped`` (and
    ``skipped.<reason>``), not as a quarantined record: the run it belongs to is still read.
    """
