"""`ShardDataset`: a torch `IterableDataset` over lwmkit shards, split across ranks and workers.

The order of an epoch, the split into consumers (rank × dataloader worker) and the shuffle are
described in `training.partition`. Rows are read row group by row group in record batches of
``read_batch_rows`` rows, never a whole file at once, through fsspec (local paths, ``memory://``,
``s3://`` …).

Resuming: each yielded sample carries ``position = (consumer, num_consumers, epoch, index)``.
When the dataset is iterated in the training process itself, the state advances as samples are
yielded; when dataloader workers iterate copies of it, the training process reports what it
used with `record_consumed`. `state_dict()` then names, per consumer, the next sample to yield,
and a dataset given that state by `load_state_dict` continues there exactly (same seed, same
shards, same number of ranks × workers).
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

from training.partition import Segment, block_segments, consumer_block, local_order, row_group_order
from training.reweight import apply_category_weights
from training.shards import CATEGORY_COLUMNS, RowGroup, ShardError, open_parquet, plan_row_groups, resolve_shard_files

STATE_FORMAT = 1
DEFAULT_SHUFFLE_BUFFER = 512
DEFAULT_READ_BATCH_ROWS = 64
# Open Parquet files kept per consumer; shuffled row groups jump between files.
_OPEN_FILES = 8


class SamplePosition(NamedTuple):
    """Where a sample sits in the epoch order: the consumer that read it and its rank in that stream."""

    consumer: int
    num_consumers: int
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
    """Samples of lwmkit shards for one rank; each dataloader worker of the rank reads its own share.

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
        self.groups: list[RowGroup] = plan_row_groups(self.files, CATEGORY_COLUMNS if self.category_weights else ())
        self.total_rows = sum(g.num_rows for g in self.groups)
        self.seed, self.shuffle, self.shuffle_buffer, self.epochs = seed, shuffle, shuffle_buffer, epochs
        self.read_batch_rows = read_batch_rows
        default_rank, default_size = _distributed_rank_and_size()
        self.rank = default_rank if rank is None else rank
        self.world_size = default_size if world_size is None else world_size
        if not 0 <= self.rank < self.world_size:
            raise ShardError(f"rank {self.rank} outside a world of size {self.world_size}")
        self._epoch = 0
        self._progress: dict[int, tuple[int, int]] = {}
        self._num_consumers: int | None = None
        # Dataloader workers take turns (0, 1, …) from the start of every iteration. A state saved when worker k's
        # sample was next resumes with worker 0 reading consumer k's share, 1 the next, and so on: the same order.
        self._rotation = 0

    def check_consumers_fed(self, num_workers: int) -> None:
        """Refuse ranks × dataloader workers that leave a consumer without rows, before any worker starts: an
        endless stream would wait on it for ever, and an error raised in a worker reaches the user as torch's
        traceback of it."""
        consumers = self.world_size * max(1, num_workers)
        if self.total_rows < consumers:
            raise ShardError(
                f"{self.total_rows} rows cannot feed {consumers} consumers ({self.world_size} rank(s) × "
                f"{max(1, num_workers)} dataloader worker(s)): one would get none; use fewer ranks or --num-workers"
            )

    # -- resumable state -------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start every consumer at the beginning of `epoch` (forgets any mid-epoch progress)."""
        self._epoch, self._progress, self._rotation = epoch, {}, 0

    def record_consumed(self, positions: Iterable[SamplePosition | Sequence[int]]) -> None:
        """Mark samples as used; per consumer, the state then points just after the last one given."""
        for position in positions:
            consumer, num_consumers, epoch, index = (int(v) for v in position)
            self._check_consumers(num_consumers)
            self._num_consumers = num_consumers
            self._progress[consumer] = (epoch, index + 1)

    def state_dict(self) -> dict[str, Any]:
        """A JSON-ready state naming, per consumer, the next sample to yield."""
        return {
            "format": STATE_FORMAT,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "shuffle_buffer": self.shuffle_buffer,
            "total_rows": self.total_rows,
            "num_consumers": self._num_consumers,
            "epoch": self._epoch,
            "progress": {str(c): list(p) for c, p in sorted(self._progress.items())},
            "next_worker": self._next_worker(),
        }

    def _next_worker(self) -> int:
        """The dataloader worker (as this rank's consumer offset) whose sample comes next in the stream. The stream
        takes the workers' shares in turn, 0, 1, …, W−1, 0, … (a resumed loader is rotated to continue it), so
        after n samples the first n mod W have one more: the first with the fewest is next."""
        if not self._num_consumers or self._num_consumers <= self.world_size:
            return 0
        workers = self._num_consumers // self.world_size
        taken = []
        for w in range(workers):
            consumer = self.rank * workers + w
            start, stop = consumer_block(self.total_rows, consumer, self._num_consumers)
            epoch, index = self._progress.get(consumer, (self._epoch, 0))
            taken.append((epoch - self._epoch) * (stop - start) + index)
        return taken.index(min(taken))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a `state_dict()`; refuses a state of other shards or another order."""
        if state.get("format") != STATE_FORMAT:
            raise ShardError(f"dataset state format {state.get('format')!r} is not {STATE_FORMAT}")
        for key in ("seed", "shuffle", "shuffle_buffer", "total_rows"):
            if state[key] != getattr(self, key):
                raise ShardError(
                    f"dataset state has {key}={state[key]!r} but this dataset has {getattr(self, key)!r}; "
                    "it cannot resume at the same sample"
                )
        self._epoch = int(state["epoch"])
        self._num_consumers = state["num_consumers"]
        self._progress = {int(c): (int(p[0]), int(p[1])) for c, p in state["progress"].items()}
        self._rotation = int(state.get("next_worker", 0))

    def _check_consumers(self, num_consumers: int) -> None:
        if self._num_consumers is not None and self._num_consumers != num_consumers:
            raise ShardError(
                f"the dataset state was saved with {self._num_consumers} consumers (ranks × dataloader workers) "
                f"but now there are {num_consumers}; resume with the same number of ranks and workers"
            )

    # -- iteration ----------------------------------------------------------------------------

    def _consumer(self) -> tuple[int, int, bool]:
        info = get_worker_info()
        if info is None:
            return self.rank, self.world_size, True
        return (self.rank * info.num_workers + (info.id + self._rotation) % info.num_workers,
                self.world_size * info.num_workers, False)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        consumer, num_consumers, in_process = self._consumer()
        self._check_consumers(num_consumers)
        if in_process:
            self._num_consumers = num_consumers
        epoch, index = self._progress.get(consumer, (self._epoch, 0))
        start, stop = consumer_block(self.total_rows, consumer, num_consumers)
        if stop == start and self.epochs is None:
            raise ShardError(
                f"{self.total_rows} rows cannot feed {num_consumers} consumers (ranks × workers): "
                f"consumer {consumer} would get none; use fewer ranks or workers"
            )
        if index >= stop - start:
            epoch, index = epoch + 1, 0
        files: OrderedDict[str, Any] = OrderedDict()
        done = 0
        try:
            while self.epochs is None or done < self.epochs:
                for position, sample in self._epoch_samples(files, consumer, num_consumers, epoch, index):
                    if in_process:
                        self._progress[consumer] = (position.epoch, position.index + 1)
                    sample["position"] = position
                    yield sample
                epoch, index, done = epoch + 1, 0, done + 1
        finally:
            for parquet in files.values():
                parquet.close()

    def _epoch_samples(
        self, files: OrderedDict[str, Any], consumer: int, num_consumers: int, epoch: int, index: int
    ) -> Iterator[tuple[SamplePosition, dict[str, Any]]]:
        start, stop = consumer_block(self.total_rows, consumer, num_consumers)
        order = local_order(stop - start, self.shuffle_buffer if self.shuffle else 0, self.seed, epoch, consumer)
        remaining = order[index:]
        if len(remaining) == 0:
            return
        first_needed = int(remaining.min())
        yielded = order[:index]
        already = set(yielded[yielded >= first_needed].tolist())
        group_order = row_group_order(len(self.groups), self.seed, epoch, self.shuffle)
        segments = block_segments([g.num_rows for g in self.groups], group_order, start, stop)
        rows = self._read_rows(files, segments, first_needed)
        pending: dict[int, dict[str, Any]] = {}
        for position_index, wanted in enumerate(remaining.tolist(), start=index):
            while wanted not in pending:
                local, sample = next(rows)
                if local not in already:
                    pending[local] = sample
            yield SamplePosition(consumer, num_consumers, epoch, position_index), pending.pop(wanted)

    def _read_rows(
        self, files: OrderedDict[str, Any], segments: Sequence[Segment], first_local: int
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """(local index, sample) for every row of the segments from local index `first_local` on."""
        columns = ["sample_id", "input_ids", "loss_weight"]
        if self.category_weights:
            columns += list(CATEGORY_COLUMNS)
        for segment in segments:
            skip_to = segment.row_lo + max(0, first_local - segment.first_local)
            if skip_to >= segment.row_hi:
                continue  # the whole segment lies before the resume point
            group = self.groups[segment.group]
            parquet = self._open(files, group.uri)
            batch_start = 0
            for batch in parquet.iter_batches(
                batch_size=self.read_batch_rows, row_groups=[group.index], columns=columns, use_threads=False
            ):
                lo, hi = max(batch_start, skip_to), min(batch_start + batch.num_rows, segment.row_hi)
                if lo < hi:
                    where = f"{group.uri} row group {group.index} rows {lo}-{hi - 1}"
                    piece = batch.slice(lo - batch_start, hi - lo)
                    for offset, sample in enumerate(_samples_of_batch(piece, self.category_weights, where)):
                        yield segment.first_local + lo - segment.row_lo + offset, sample
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
