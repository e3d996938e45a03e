"""Samples longer than a row: refuse them up front, or apply the policy the user chose (``--long-samples``).

A row holds ``--micro-batch-tokens`` tokens. Cutting a longer sample to its head, as a plain
collator would, silently trains on its system prompt and drops the weighted turns that follow it,
so the trainer never does that:

- ``refuse`` (default): the run's ``manifest.json`` (or, for runs that predate the field, the
  Parquet footer statistics of ``num_tokens``) names the longest sample before any step runs;
  when it exceeds the row, the run stops with one line naming both numbers and the choices;
- ``drop``: long samples are skipped;
- ``truncate-left``: the last ``row`` tokens are kept, so the weighted tail survives;
- ``window``: the sample is cut into overlapping pieces of ``row`` tokens whose starts advance by
  ``row − overlap``; each piece keeps the weights only of the targets that no earlier piece
  covered, so every loss token of the sample is counted exactly once, with at least ``overlap``
  tokens of context before the first of them. Pieces left with no weighted target are skipped.

`LongSamplePolicy` counts what each policy touched; the trainer reports the counts per run.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec

from schemas.errors import ConfigError
from training.shards import NUM_TOKENS_LEAF, FooterStatistics, find_success_marker

POLICIES = ("refuse", "drop", "truncate-left", "window")
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class LongestSample:
    """The longest sample of the shards being trained on, and where that number came from."""

    tokens: int
    source: str  # "manifest.json" or "parquet statistics"


def _manifest_of(uri: str) -> tuple[dict[str, Any] | None, str]:
    """The manifest of the run a shard file belongs to (beside its ``_SUCCESS``), and the run root."""
    fs, path = fsspec.core.url_to_fs(uri)
    # any depth: a folder source finds files in nested folders too, below the marker its own folder is checked for
    marker = find_success_marker(fs, posixpath.dirname(path), depth=path.count("/"))
    if marker is None:
        return None, ""
    root = posixpath.dirname(marker)
    manifest_path = posixpath.join(root, MANIFEST)
    if not fs.exists(manifest_path):
        return None, root
    with fs.open(manifest_path, "rb") as handle:
        return json.load(handle), root


def run_manifests(files: Sequence[str]) -> dict[str, tuple[dict[str, Any] | None, str]]:
    """Per folder of `files`: the manifest of the run its shards belong to and the run root (`_manifest_of`),
    read once per folder."""
    manifests: dict[str, tuple[dict[str, Any] | None, str]] = {}
    for uri in files:
        folder = posixpath.dirname(fsspec.core.url_to_fs(uri)[1])
        if folder not in manifests:
            manifests[folder] = _manifest_of(uri)
    return manifests


def longest_sample(files: Sequence[str], manifests: dict[str, tuple[dict[str, Any] | None, str]] | None = None,
                   statistics: FooterStatistics | None = None) -> LongestSample | None:
    """The longest sample over `files`: from the manifest's shard entries, else the footers; None if unknown.
    `manifests`: `run_manifests` of `files`, and `statistics` the footers' maxima, where the caller has them."""
    longest, sources = 0, set()
    manifests = run_manifests(files) if manifests is None else manifests
    statistics = FooterStatistics() if statistics is None else statistics
    entries: dict[str, dict[str, dict[str, Any]]] = {}  # per run root: its manifest's shard entries by path
    for uri in files:
        path = fsspec.core.url_to_fs(uri)[1]
        manifest, root = manifests[posixpath.dirname(path)]
        if root not in entries:
            entries[root] = {s.get("path"): s for s in (manifest or {}).get("shards", [])}
        entry = entries[root].get(posixpath.relpath(path, root)) if root else None
        if entry is not None and "max_tokens" in entry:
            longest, sources = max(longest, int(entry["max_tokens"])), sources | {MANIFEST}
            continue
        footer = statistics.column_max(uri, NUM_TOKENS_LEAF)
        footer = None if footer is None else max(footer, 0)
        if footer is None:
            return None
        longest, sources = max(longest, footer), sources | {"parquet statistics"}
    return LongestSample(longest, " and ".join(sorted(sources))) if sources else None


def check_row_length(longest: LongestSample | None, row: int, policy: str, context: tuple[int, str] | None = None,
                     ) -> str | None:
    """Refuse a run whose longest sample exceeds the row under ``refuse``; else a note for the log (or None).
    `context`: the positions the model takes and the config field naming them, where fewer than the row: then
    the sample limit (`training.compatibility`)."""
    if policy not in POLICIES:
        raise ConfigError(f"--long-samples must be one of {', '.join(POLICIES)}, not {policy!r}")
    limited = context is not None and context[0] < row
    limit = context[0] if limited else row
    what = (f"the model's context of {limit} tokens ({context[1]}), under --micro-batch-tokens {row}" if limited
            else f"the row of {row}")
    if longest is None:
        return (
            "the longest sample is unknown (no max_tokens in the manifest, no num_tokens statistics); "
            f"samples over {limit} tokens are handled when they arrive (--long-samples {policy})"
        )
    if longest.tokens <= limit:
        return None
    if policy == "refuse":
        if limited:
            raise ConfigError(
                f"the longest sample has {longest.tokens} tokens ({longest.source}) but {what}: the model has no "
                "positions for the rest; choose --long-samples drop | truncate-left | window"
            )
        raise ConfigError(
            f"the longest sample has {longest.tokens} tokens ({longest.source}) but a row holds "
            f"--micro-batch-tokens {row}: raise --micro-batch-tokens to {longest.tokens}, or choose "
            "--long-samples drop | truncate-left | window"
        )
    return f"the longest sample has {longest.tokens} tokens ({longest.source}), over {what}: {policy}"


@dataclass
class LongSampleCounts:
    """What a policy did to this rank's samples so far."""

    long: int = 0  # samples over the row length
    dropped: int = 0
    truncated_left: int = 0
    windowed: int = 0
    pieces: int = 0  # pieces the windowed samples were cut into (kept ones)
    empty_pieces: int = 0  # pieces skipped because none of their targets has weight
    lost_loss_tokens: int = 0  # weighted targets removed by drop or truncate-left

    def add(self, other: LongSampleCounts) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)

    def as_list(self) -> list[float]:
        return [float(v) for v in vars(self).values()]

    @classmethod
    def from_list(cls, values: Sequence[float]) -> LongSampleCounts:
        return cls(*(int(v) for v in values))


def window_starts(length: int, row: int, overlap: int) -> list[int]:
    """Start of each piece of a `length`-token sample in rows of `row` tokens overlapping by `overlap`."""
    if not 1 <= overlap < row:
        raise ConfigError(f"--window-overlap must lie in 1..{row - 1} tokens (under a window's {row}), not {overlap}")
    starts, start = [0], 0
    while start + row < length:
        start = min(start + row - overlap, length - row)
        starts.append(start)
    return starts


def window_pieces(sample: Mapping[str, Any], row: int, overlap: int) -> list[dict[str, Any]]:
    """The pieces of one sample; each target token keeps its weight in exactly one piece."""
    ids, weights = sample["input_ids"], sample["loss_weight"]
    pieces, covered = [], 1  # token 0 is never a target
    for start in window_starts(len(ids), row, overlap):
        end = start + row
        piece_weights = weights[start:end].clone()
        piece_weights[: max(0, covered - start)] = 0
        covered = end
        pieces.append({**sample, "input_ids": ids[start:end], "loss_weight": piece_weights, "window_start": start})
    return pieces


class LongSamplePolicy:
    """Applies one policy to a stream of samples, counting what it did.

    `counts` covers every sample the policy has read. A trainer reads ahead, so it counts what it
    actually trained on instead: each yielded sample carries ``long_counts``, the counts of itself
    and of the samples dropped just before it (None when there are none). Window pieces carry
    ``piece = (number, count)``, and only the first piece carries the sample's counts. A run that
    stops between two pieces of a sample resumes after the pieces it used: `skip_pieces` maps a
    sample position to the number of its (kept) pieces already trained on.
    """

    def __init__(self, row: int, policy: str, overlap: int | None = None, give_up_after: int = 0) -> None:
        """`give_up_after`: samples read in a row without one to train on (all dropped, or windows without a weighted
        token) that end the run with a `ConfigError`; over an endless stream of samples that never fit, a trainer
        would otherwise wait for ever. 0: never (a finite stream)."""
        if policy not in POLICIES:
            raise ConfigError(f"--long-samples must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.row, self.policy, self.give_up_after = row, policy, give_up_after
        self.overlap = max(1, row // 4) if overlap is None else overlap
        if policy == "window":
            window_starts(row + 1, row, self.overlap)  # validates the overlap
        self.counts = LongSampleCounts()
        self.skip_pieces: dict[tuple[int, ...], int] = {}

    def __call__(self, samples: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        pending = LongSampleCounts()
        idle = 0  # samples read since the last one yielded
        skipped: list[Any] = []  # their positions: the next sample yielded carries them (`skipped_positions`)
        for sample in samples:
            n = len(sample["input_ids"])
            if n <= self.row:
                idle = 0
                yield self._noted(sample, pending, skipped)
                pending, skipped = LongSampleCounts(), []
                continue
            idle += 1
            if self.give_up_after and idle > self.give_up_after:
                raise ConfigError(
                    f"--long-samples {self.policy} leaves nothing to train on: none of the last {idle - 1} samples "
                    f"gives a piece to train on within --micro-batch-tokens {self.row}; raise --micro-batch-tokens"
                    + (" or choose --long-samples truncate-left | window" if self.policy == "drop" else "")
                )
            own = LongSampleCounts(long=1)
            if self.policy == "refuse":
                raise ConfigError(
                    f"sample {sample.get('sample_id')} has {n} tokens, over --micro-batch-tokens {self.row}; "
                    "choose --long-samples drop | truncate-left | window, or a longer row"
                )
            if self.policy == "drop":
                own.dropped, own.lost_loss_tokens = 1, int((sample["loss_weight"][1:] > 0).sum())
                self.counts.add(own)
                pending.add(own)
                if sample.get("position") is not None:
                    skipped.append(sample["position"])
                continue
            if self.policy == "truncate-left":
                cut = n - self.row
                own.truncated_left, own.lost_loss_tokens = 1, int((sample["loss_weight"][1 : cut + 1] > 0).sum())
                pieces = [{**sample, "input_ids": sample["input_ids"][cut:], "loss_weight": sample["loss_weight"][cut:]}]
                resumed = False
            else:
                pieces, resumed = self._windows(sample, own)
            self.counts.add(own)
            if not resumed:  # a sample resumed after some of its windows was counted before the stop
                pending.add(own)
            if not pieces and sample.get("position") is not None:  # windows without a weighted token
                skipped.append(sample["position"])
            for piece in pieces:
                idle = 0
                yield self._noted(piece, pending, skipped)
                pending, skipped = LongSampleCounts(), []

    @staticmethod
    def _noted(sample: dict[str, Any], counts: LongSampleCounts, skipped: list[Any] | None = None) -> dict[str, Any]:
        return {**sample, "long_counts": counts if counts.long else None, "skipped_positions": skipped or None}

    def _windows(self, sample: dict[str, Any], own: LongSampleCounts) -> tuple[list[dict[str, Any]], bool]:
        pieces = window_pieces(sample, self.row, self.overlap)
        kept = [p for p in pieces if bool((p["loss_weight"][1:] > 0).any())]
        own.windowed, own.empty_pieces, own.pieces = 1, len(pieces) - len(kept), len(kept)
        position = sample.get("position")
        done = self.skip_pieces.pop(position_key(position), 0) if position is not None else 0
        return [{**piece, "piece": (number, len(kept))} for number, piece in enumerate(kept) if number >= done], done > 0


def position_key(position: Any) -> tuple[int, ...]:
    """A hashable, JSON-friendly form of a sample position."""
    return tuple(int(v) for v in position)


@dataclass
class PieceTracker:
    """Which samples the trainer has fully used, and how far it got into a windowed one."""

    partial: dict[tuple[int, ...], int] = field(default_factory=dict)

    def finished_positions(self, positions: Sequence[Any], pieces: Sequence[Any]) -> list[Any]:
        """Positions whose samples are now used up; remembers the pieces used of the others."""
        done = []
        for position, piece in zip(positions, pieces):
            if position is None:
                continue
            key = position_key(position)
            if piece is None or int(piece[0]) == int(piece[1]) - 1:
                self.partial.pop(key, None)
                done.append(position)
            else:
                self.partial[key] = int(piece[0]) + 1
        return done

    def state(self) -> list[list[int]]:
        return [[*key, count] for key, count in sorted(self.partial.items())]

    @staticmethod
    def skip_map(state: Iterable[Sequence[int]]) -> dict[tuple[int, ...], int]:
        return {tuple(int(v) for v in item[:-1]): int(item[-1]) for item in state}
