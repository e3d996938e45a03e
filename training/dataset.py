"""`ShardDataset`: a torch `IterableDataset` over lwmkit shards, split across ranks and dealt out to workers.

The order of an epoch, the split into ranks, the shuffle and how a rank's dataloader workers
share its stream are described in `training.partition`: whatever the number of workers, the
loader yields the same stream, and every row of a rank's block once per epoch. Rows are read
row group by row group in record batches of ``read_batch_rows`` rows, never a whole file at once,
through fsspec (local paths, ``memory://``, ``s3://`` …); each worker reads the row groups of its
rank's block and decodes only its own rows.

Resuming: each yielded sample carries ``position = (rank, world_size, epoch, index)``. When the
dataset is iterated in the training process itself, the state advances as samples are yielded;
when dataloader workers iterate copies of it, the training process reports what it used, in
stream order, with `record_consumed`. `state_dict()` then names the next sample of the rank's
stream, and a dataset given that state by `load_state_dict` continues there exactly (same seed,
same shards, same number of ranks; any number of workers).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import IterableDataset, get_worker_info

from training.partition import Segment, block_segments, local_order, rank_block, row_group_order, worker_indices
from training.reweight import apply_category_weights
from training.shards import (
    CATEGORY_COLUMNS,
    FooterStatistics,
    RowGroup,
    ShardError,
    open_parquet,
    plan_row_groups,
    resolve_shard_files,
)

# 2: one position per rank's stream (1, per dataloader worker's block, is refused: see `load_state_dict`)
STATE_FORMAT = 2
DEFAULT_SHUFFLE_BUFFER = 512
DEFAULT_READ_BATCH_ROWS = 64
# Open Parquet files kept per reader (the rank, or each of its workers); shuffled row groups jump between files.
_OPEN_FILES = 8


class SamplePosition(NamedTuple):
    """Where a sample sits: the rank whose stream holds it, and its index in that epoch's order of the rank's block."""

    rank: int
    world_size: int
    epoch: int
    index: int


def _distributed_rank_and_size() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _list_arrays(column: pa.Array, name: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    if column.null_count or column.values.null_count:
        raise ShardError(f"{where}: column {name} holds nulls")
    return column.offsets.to_numpy(), column.values.to_numpy(zero_copy_only=False)


def _samples_of_batch(batch: pa.RecordBatch, overrides: Mapping[str, float], where: str) -> list[dict[str, Any]]:
    """Decode one record batch into sample dicts (tokens as int64, weights as float32)."""
    id_offsets, id_values = _list_arrays(batch.column("input_ids"), "input_ids", where)
    w_offsets, w_values = _list_arrays(batch.column("loss_weight"), "loss_weight", where)
    sample_ids = batch.column("sample_id").to_pylist()
    spans = batch.column("turn_spans").to_pylist() if overrides else None
    categories = batch.column("turn_category").to_pylist() if overrides else None
    samples = []
    for row in range(batch.num_rows):
        ids = id_values[id_offsets[row] : id_offsets[row + 1]].astype(np.int64)
        weights = w_values[w_offsets[row] : w_offsets[row + 1]].astype(np.float32)
        if len(ids) != len(weights):
            raise ShardError(f"{where} sample {sample_ids[row]}: {len(ids)} input_ids but {len(weights)} loss weights")
        if overrides:
            weights = apply_category_weights(
                weights, spans[row] or [], categories[row] or [], overrides, f"{where} sample {sample_ids[row]}"
            )
        samples.append(
            {"sample_id": sample_ids[row], "input_ids": torch.from_numpy(ids), "loss_weight": torch.from_numpy(weights)}
        )
    return samples


class ShardDataset(IterableDataset):
    """Samples of lwmkit shards for one rank; the rank's dataloader workers deal its stream out among themselves.

    `sources`: shard directories, globs or files (see `training.shards`). `epochs`: how many
    epochs one iteration runs (None: forever, the trainer's mode). `category_weights`: optional
    load-time overrides, e.g. ``{"echo": 0.0}`` (see `training.reweight` for the rule).
    `rank`/`world_size` default to torch.distributed, then the RANK/WORLD_SIZE variables.
    """

    def __init__(
        self,
        sources: str | Sequence[str],
        *,
        seed: int = 0,
        shuffle: bool = True,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        epochs: int | None = 1,
        category_weights: Mapping[str, float] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        read_batch_rows: int = DEFAULT_READ_BATCH_ROWS,
    ) -> None:
        super().__init__()
        self.files = resolve_shard_files([sources] if isinstance(sources, str) else list(sources))
        self.category_weights = dict(category_weights or {})
        # the column maxima of the footers read here, for the checks before a first step (they need no second read)
        self.footer_statistics = FooterStatistics()
        self.groups: list[RowGroup] = plan_row_groups(
            self.files, CATEGORY_COLUMNS if self.category_weights else (), self.footer_statistics
        )
        self.total_rows = sum(g.num_rows for g in self.groups)
        self.seed, self.shuffle, self.shuffle_buffer, self.epochs = seed, shuffle, shuffle_buffer, epochs
        self.read_batch_rows = read_batch_rows
        default_rank, default_size = _distributed_rank_and_size()
        self.rank = default_rank if rank is None else rank
        self.world_size = default_size if world_size is None else world_size
        if not 0 <= self.rank < self.world_size:
            raise ShardError(f"rank {self.rank} outside a world of size {self.world_size}")
        self.block = rank_block(self.total_rows, self.rank, self.world_size)
        # the next sample of this rank's stream: (epoch, index into that epoch's order of the block)
        self._next = (0, 0)

    def check_ranks_fed(self) -> None:
        """Refuse more ranks than rows, before any loader starts: a rank without rows would leave an endless stream
        waiting for ever, and an error raised in a dataloader worker reaches the user as torch's traceback of it.
        (Any number of dataloader workers is fed: they deal out an endless stream.)"""
        if self.total_rows < self.world_size:
            raise ShardError(
                f"{self.total_rows} rows cannot feed {self.world_size} ranks: one would get none; use fewer ranks"
            )

    # -- resumable state -------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start at the beginning of `epoch` (forgets any mid-epoch progress)."""
        self._next = (epoch, 0)

    def record_consumed(self, positions: Iterable[SamplePosition | Sequence[int]]) -> None:
        """Mark samples as used, in stream order; the state then points just after the last one given."""
        for position in positions:
            rank, world_size, epoch, index = (int(v) for v in position)
            if (rank, world_size) != (self.rank, self.world_size):
                raise ShardError(
                    f"a sample of rank {rank} of {world_size} recorded by the dataset of rank {self.rank} of "
                    f"{self.world_size}"
                )
            self._next = (epoch, index + 1)

    def state_dict(self) -> dict[str, Any]:
        """A JSON-ready state naming the next sample of this rank's stream."""
        return {
            "format": STATE_FORMAT,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "shuffle_buffer": self.shuffle_buffer,
            "total_rows": self.total_rows,
            "rank": self.rank,
            "world_size": self.world_size,
            "epoch": self._next[0],
            "index": self._next[1],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a `state_dict()`; refuses a state of other shards, another order or an older format."""
        if state.get("format") == 1:
            raise ShardError(
                "the data position was saved by an older lwm train, which gave each dataloader worker rows of its "
                "own; it names no position in the stream read now, so it cannot resume at the same sample: train "
                "into a new --out"
            )
        if state.get("format") != STATE_FORMAT:
            raise ShardError(f"dataset state format {state.get('format')!r} is not {STATE_FORMAT}")
        for key in ("seed", "shuffle", "shuffle_buffer", "total_rows", "world_size", "rank"):
            if state[key] != getattr(self, key):
                raise ShardError(
                    f"dataset state has {key}={state[key]!r} but this dataset has {getattr(self, key)!r}; "
                    "it cannot resume at the same sample"
                )
        self._next = (int(state["epoch"]), int(state["index"]))

    # -- iteration ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        rows = self.block[1] - self.block[0]
        if rows == 0:
            if self.epochs is None:
                self.check_ranks_fed()
            return
        epoch, index = self._next
        if index >= rows:
            epoch, index = epoch + 1, 0
        start = epoch * rows + index  # the stream position of the loader's first sample
        files: OrderedDict[str, Any] = OrderedDict()
        current = epoch
        try:
            while self.epochs is None or current < epoch + self.epochs:
                indices = worker_indices(rows, current, start, worker, workers)
                for position, sample in self._epoch_samples(files, current, indices):
                    if info is None:
                        self._next = (position.epoch, position.index + 1)
                    sample["position"] = position
                    yield sample
                current += 1
        finally:
            for parquet in files.values():
                parquet.close()

    def _epoch_samples(
        self, files: OrderedDict[str, Any], epoch: int, indices: np.ndarray
    ) -> Iterator[tuple[SamplePosition, dict[str, Any]]]:
        """The samples at `indices` (increasing) of `epoch`'s order of the block; only those rows are decoded."""
        if len(indices) == 0:
            return
        start, stop = self.block
        order = local_order(stop - start, self.shuffle_buffer if self.shuffle else 0, self.seed, epoch, self.rank)
        wanted_rows = order[indices]
        wanted = np.zeros(stop - start, dtype=bool)
        wanted[wanted_rows] = True
        group_order = row_group_order(len(self.groups), self.seed, epoch, self.shuffle)
        segments = block_segments([g.num_rows for g in self.groups], group_order, start, stop)
        rows = self._read_rows(files, segments, wanted, int(wanted_rows.min()))
        pending: dict[int, dict[str, Any]] = {}
        for index, row in zip(indices.tolist(), wanted_rows.tolist()):
            while row not in pending:
                local, sample = next(rows)
                pending[local] = sample
            yield SamplePosition(self.rank, self.world_size, epoch, index), pending.pop(row)

    def _read_rows(
        self, files: OrderedDict[str, Any], segments: Sequence[Segment], wanted: np.ndarray, first_local: int
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """(local index, sample) for the `wanted` rows (a mask over the block) of the segments, from local index
        `first_local` on; a row group without a wanted row is not read."""
        columns = ["sample_id", "input_ids", "loss_weight"]
        if self.category_weights:
            columns += list(CATEGORY_COLUMNS)
        for segment in segments:
            skip_to = segment.row_lo + max(0, first_local - segment.first_local)
            local_of_row = segment.first_local - segment.row_lo  # local index = row + local_of_row
            if skip_to >= segment.row_hi or not wanted[skip_to + local_of_row : segment.row_hi + local_of_row].any():
                continue  # the whole segment lies before the resume point, or holds none of the rows wanted
            group = self.groups[segment.group]
            parquet = self._open(files, group.uri)
            batch_start = 0
            for batch in parquet.iter_batches(
                batch_size=self.read_batch_rows, row_groups=[group.index], columns=columns, use_threads=False
            ):
                lo, hi = max(batch_start, skip_to), min(batch_start + batch.num_rows, segment.row_hi)
                picked = np.flatnonzero(wanted[lo + local_of_row : hi + local_of_row]) if lo < hi else []
                if len(picked):
                    where = f"{group.uri} row group {group.index} rows {lo}-{hi - 1}"
                    piece = batch.slice(lo - batch_start, hi - lo)
                    if len(picked) < hi - lo:  # another worker's rows are left undecoded
                        piece = piece.take(pa.array(picked))
                    for offset, sample in zip(picked.tolist(), _samples_of_batch(piece, self.category_weights, where)):
                        yield lo + local_of_row + offset, sample
                batch_start += batch.num_rows
                if batch_start >= segment.row_hi:
                    break

    @staticmethod
    def _open(files: OrderedDict[str, Any], uri: str) -> Any:
        if uri in files:
            files.move_to_end(uri)
            return files[uri]
        if len(files) >= _OPEN_FILES:
            _, oldest = files.popitem(last=False)
            oldest.close()
        files[uri] = open_parquet(uri)
        return files[uri]
