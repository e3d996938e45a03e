"""``asciinema``: terminal recordings (asciicast v2 and v3 ``.cast``), with an optional keystroke log.

A recording is a JSON header line and one event per line, ``[time, code, data]``: ``"o"`` is
output, ``"i"`` is input (recorded with ``--stdin``). Native record (the first two lines)::

    {"version": 2, "width": 80, "height": 24, "timestamp": 1700000000, "title": "fix the build"}
    [0.52, "o", "\\u001b[32muser@box\\u001b[0m:~$ "]

v2 times are seconds since the start; v3 times are intervals since the previous event.

**Keystroke log sidecar.** Recordings made without ``--stdin`` have no input events; a
keystroke log beside the cast, ``<name>.keys.jsonl`` for ``<name>.cast``, supplies them (tmux
``pipe-pane`` or a key logger can write it). One line per key chunk, time on the cast's clock::

    {"t": 1.2, "keys": "ls -la\\r"}

When the sidecar exists it replaces the cast's own input events.

Mapping to the unified schema (domain ``terminal``):

- Keystrokes are grouped into one action per command line: keys accumulate until Enter (or an
  interrupting Ctrl-C / Ctrl-D / Ctrl-Z); Enter inside a bracketed paste does not end the group,
  and the paste markers are dropped. The action is keystroke JSON
  ``[{"keystrokes": "ls -la\\n", "duration": 1.25}]``: Enter is written ``\\n`` and ``duration``
  is the time from Enter to the next keystroke (or the end of the recording).
- Keys typed while a full-screen program owns the terminal (alternate screen: vim, less, htop)
  form one action that ends when the program leaves the alternate screen, Enter or not.
- The observation is the output after Enter up to the next keystroke: ANSI codes removed,
  ``\\r`` overwrites collapsed (a progress bar becomes its final line), control characters dropped.
  The echo of the typed command line is not part of it (the action already carries it; a late echo
  at the start of the output is removed too); the prompt printed after the output stays, as
  it is the next state. A full-screen program's drawing becomes ``[full-screen program: vim]``.
- Output before the first keystroke (motd, first prompt) is ``system.initial_state``; the
  header's ``title`` is the task description; typed keys never submitted are counted in ``meta``.
- A recording without any input (and no sidecar) is quarantined as ``no_input_events``: a
  command cannot be recovered from output alone without guessing.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from schemas.errors import InvalidRecord
from schemas.trajectory import SystemPrompt, Trajectory, Turn
from stages.ingest.common import make_trajectory
from stages.ingest.reading import (
    InputUnit,
    filesystem,
    iter_jsonl,
    loads,
    max_record_bytes,
    read_document,
    split_compression,
)
from stages.ingest.registry import Probe, RawRecord
from stages.ingest.terminal_text import (
    FULL_SCREEN_LEAVE,
    PASTE_END,
    PASTE_START,
    clean_terminal_text,
    full_screen_after,
    keystroke_action,
    replace_full_screen,
)

FORMAT = "asciinema"
KEYS_SUFFIX = ".keys.jsonl"
SUBMIT_KEYS = frozenset(("\r", "\n", "\r\n", "\x03", "\x04", "\x1a"))


class AsciinemaAdapter:
    name = FORMAT
    description = "asciinema .cast terminal recordings (v2/v3), with an optional <name>.keys.jsonl keystroke log"
    domains = ("terminal",)
    default_domain = "terminal"
    options: dict[str, str] = {}

    def sniff(self, probe: Probe) -> float:
        if probe.uri.endswith(KEYS_SUFFIX):
            rec = probe.first_record
            return 0.9 if isinstance(rec, dict) and "keys" in rec and "t" in rec else 0.0
        header = _parse_header(probe.head.split("\n", 1)[0])
        if header is None:
            return 0.0
        return 0.95 if probe.container == "cast" else 0.9

    def read(self, unit: InputUnit, opts: dict[str, Any]) -> Iterator[RawRecord | InvalidRecord]:
        if unit.uri.endswith(KEYS_SUFFIX):
            # A keystroke log is read together with its recording; alone it cannot make turns.
            if _cast_beside(unit.uri) is None:
                yield InvalidRecord(
                    "orphan_keys_log", "no .cast recording beside this keystroke log", "document", unit.uri
                )
            return
        max_bytes = max_record_bytes(opts)
        try:
            recording = _read_recording(unit.uri, max_bytes)
        except InvalidRecord as bad:
            bad.uri = bad.uri or unit.uri
            yield bad
            return
        payload = json.dumps(recording, ensure_ascii=False, separators=(",", ":"))
        yield RawRecord(unit.uri, "document", FORMAT, payload)

    def normalize(self, record: RawRecord, opts: dict[str, Any]) -> Iterator[Trajectory]:
        recording = record.value()
        header, events, keys = recording["header"], recording["events"], recording["keys"]
        outputs = [(t, data) for t, code, data in events if code == "o"]
        if keys is None:
            inputs = [(t, data) for t, code, data in events if code == "i"]
            input_source = "cast"
        else:
            inputs = [(t, data) for t, data in keys]
            input_source = "keys_log"
        if not inputs:
            raise InvalidRecord(
                "no_input_events", "the recording has no input events and no keystroke log", record.locator
            )
        end_time = max([t for t, _, _ in events] + [t for t, _ in inputs])
        session = _replay(inputs, outputs)
        turns = [_turn(cmd, session.next_key_time(i, end_time)) for i, cmd in enumerate(session.commands)]
        if not turns:
            raise InvalidRecord("no_turns", "no keystrokes were submitted with Enter", record.locator)
        initial = clean_terminal_text(replace_full_screen("".join(session.initial))[0]).strip("\n")
        meta = {
            "agent": "asciinema",
            "input_source": input_source,
            "unsubmitted_keys": session.unsubmitted,
            **{k: header[k] for k in ("version", "width", "height", "timestamp", "command", "env") if k in header},
        }
        yield make_trajectory(
            record,
            domain=opts.get("domain") or self.default_domain,
            native_key=f"{record.uri}:{record.locator}",
            turns=turns,
            system=SystemPrompt(task_description=str(header.get("title") or ""), initial_state=initial or None),
            source_kind=opts.get("source_kind") or "public",
            meta=meta,
        )


@dataclass
class _Command:
    """One submitted group of keystrokes and the raw output that followed it."""

    keys: str = ""
    first_key_time: float = 0.0
    submit_time: float = 0.0
    full_screen_keys: bool = False  # typed inside a full-screen program
    starts_full_screen: bool = False  # the output begins on the alternate screen
    output: list[str] = field(default_factory=list)


@dataclass
class _Session:
    commands: list[_Command] = field(default_factory=list)
    initial: list[str] = field(default_factory=list)
    unsubmitted: int = 0

    def next_key_time(self, index: int, end_time: float) -> float:
        if index + 1 < len(self.commands):
            return self.commands[index + 1].first_key_time
        return end_time


def _replay(inputs: list[tuple[float, str]], outputs: list[tuple[float, str]]) -> _Session:
    """Walk input and output in time order, grouping keys into commands and routing output."""
    # At equal times the key comes first: its echo cannot precede it.
    timeline = sorted(
        [(t, 0, i, data) for i, (t, data) in enumerate(inputs)]
        + [(t, 1, i, data) for i, (t, data) in enumerate(outputs)]
    )
    session = _Session()
    typing: _Command | None = None
    receiving: _Command | None = None
    full_screen = in_paste = False
    for time, kind, _, data in timeline:
        if kind == 0:
            for piece in _key_pieces(data):
                if piece in (PASTE_START, PASTE_END):
                    in_paste = piece == PASTE_START
                    continue
                if typing is None:
                    typing = _Command(first_key_time=time, full_screen_keys=full_screen)
                    receiving = None
                typing.keys += piece
                if piece in SUBMIT_KEYS and not in_paste and not typing.full_screen_keys:
                    typing.submit_time = time
                    session.commands.append(typing)
                    receiving, typing = typing, None
            continue
        if typing is not None:
            if typing.full_screen_keys and not full_screen_after(data, True):
                # The full-screen program has left the alternate screen: its keys are one action.
                typing.submit_time = time
                typing.output.append(_after_last_leave(data))
                session.commands.append(typing)
                receiving, typing, full_screen = typing, None, False
                continue
            full_screen = full_screen_after(data, full_screen)
            continue  # line-editing echo of the command being typed
        if receiving is not None:
            if not receiving.output:
                receiving.starts_full_screen = full_screen
            receiving.output.append(data)
        else:
            session.initial.append(data)
        full_screen = full_screen_after(data, full_screen)
    if typing is not None:
        session.unsubmitted = len(typing.keys)
    return session


def _key_pieces(data: str) -> Iterator[str]:
    """Single keys; paste markers (which toggle paste mode) and a CR LF Enter are kept whole."""
    pos = 0
    while pos < len(data):
        for marker in (PASTE_START, PASTE_END, "\r\n"):
            if data.startswith(marker, pos):
                yield marker
                pos += len(marker)
                break
        else:
            yield data[pos]
            pos += 1


def _after_last_leave(data: str) -> str:
    cut = max(data.rfind(seq) + len(seq) if seq in data else -1 for seq in FULL_SCREEN_LEAVE)
    return data[cut:] if cut >= 0 else ""


def _turn(cmd: _Command, next_key_time: float) -> Turn:
    keys = cmd.keys.replace("\r\n", "\n").replace("\r", "\n")
    program = None if cmd.full_screen_keys else _program_name(keys)
    raw = replace_full_screen("".join(cmd.output), program, cmd.starts_full_screen)[0]
    observation = clean_terminal_text(raw)
    if not cmd.full_screen_keys:
        observation = _drop_echo(observation, clean_terminal_text(keys.rstrip("\n")).strip())
    if observation.startswith("\n"):
        observation = observation[1:]  # the newline the terminal prints for Enter
    duration = round(max(0.0, next_key_time - cmd.submit_time), 3)
    return Turn(
        action=keystroke_action(keys, duration),
        observation=observation,
        meta=json.dumps({"t": round(cmd.submit_time, 3)}),
    )


def _drop_echo(observation: str, typed: str) -> str:
    first, sep, rest = observation.partition("\n")
    if typed and sep and first.rstrip().endswith(typed):
        return rest
    return observation


def _program_name(keys: str) -> str | None:
    """The program a command line starts (``sudo vim a.txt`` → ``vim``), for the full-screen placeholder."""
    for word in keys.strip().split("\n", 1)[0].split():
        if "=" in word.split("/", 1)[0] or word in ("sudo", "env", "exec", "command", "nohup", "time"):
            continue
        return posixpath.basename(word) or None
    return None


def _parse_header(line: str) -> dict[str, Any] | None:
    try:
        header = loads(line)
    except json.JSONDecodeError:
        return None
    if isinstance(header, dict) and header.get("version") in (2, 3):
        return header
    return None


def _read_recording(uri: str, max_bytes: int) -> dict[str, Any]:
    """Header, events on an absolute clock, and the sidecar keys (or None); raises `InvalidRecord`."""
    data = read_document(uri, max_bytes)
    if isinstance(data, InvalidRecord):
        raise data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord("bad_encoding", f"not UTF-8 ({exc.reason})", "document", uri) from None
    lines = text.split("\n")
    header = _parse_header(lines[0])
    if header is None:
        raise InvalidRecord("wrong_format", "line 1 is not an asciicast v2/v3 header", "line 1", uri)
    events: list[list[Any]] = []
    clock = 0.0
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue  # v3 allows comment lines
        event = _parse_event(line, f"line {lineno}", uri)
        clock = clock + event[0] if header["version"] == 3 else event[0]
        events.append([clock, event[1], event[2]])
    keys_uri = _keys_beside(uri)
    return {"header": header, "events": events, "keys": _read_keys(keys_uri, max_bytes) if keys_uri else None}


def _parse_event(line: str, locator: str, uri: str) -> list[Any]:
    try:
        event = loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidRecord("malformed_json", f"event: {exc.msg}", locator, uri) from None
    ok = (
        isinstance(event, list)
        and len(event) >= 3
        and isinstance(event[0], int | float)
        and isinstance(event[1], str)
        and isinstance(event[2], str)
    )
    if not ok:
        raise InvalidRecord("malformed_event", "an event must be [time, code, text]", locator, uri)
    return event[:3]


def _read_keys(uri: str, max_bytes: int) -> list[list[Any]]:
    keys: list[list[Any]] = []
    for item in iter_jsonl(uri, max_bytes):
        if isinstance(item, InvalidRecord):
            raise InvalidRecord("malformed_keys_log", item.one_line(), item.locator, uri)
        locator, value = item
        if not (
            isinstance(value, dict) and isinstance(value.get("t"), int | float) and isinstance(value.get("keys"), str)
        ):
            raise InvalidRecord("malformed_keys_log", 'a line must be {"t": seconds, "keys": text}', locator, uri)
        keys.append([float(value["t"]), value["keys"]])
    return keys


def _keys_beside(cast_uri: str) -> str | None:
    base, _ = split_compression(cast_uri)
    if not base.endswith(".cast"):
        return None
    candidate = base[: -len(".cast")] + KEYS_SUFFIX
    fs, path = filesystem(candidate)
    return candidate if fs.exists(path) else None


def _cast_beside(keys_uri: str) -> str | None:
    stem = keys_uri[: -len(KEYS_SUFFIX)]
    for suffix in (".cast", ".cast.gz", ".cast.zst"):
        fs, path = filesystem(stem + suffix)
        if fs.exists(path):
            return stem + suffix
    return None


ADAPTER = AsciinemaAdapter()
