"""ShardDataset: finding shards, splitting rows over ranks and dealing them to workers, shuffling, resuming,
re-weighting."""

from __future__ import annotations

import itertools
import uuid
from collections import Counter

import fsspec
import fsspec.config
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from tests.helpers import write_synthetic_shards  # noqa: E402
from training.dataset import ShardDataset  # noqa: E402
from training.partition import (  # noqa: E402
    block_segments,
    local_order,
    rank_block,
    row_group_order,
    worker_indices,
)
from training.reweight import apply_category_weights, parse_category_weights  # noqa: E402
from training.shards import ShardError, plan_row_groups, resolve_shard_files  # noqa: E402

ALL_IDS = [f"cpt-{i:05d}" for i in range(12)]  # rows_per_file=(7, 5) by default
ODD_IDS = [f"cpt-{i:05d}" for i in range(13)]


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_synthetic_shards(str(tmp_path_factory.mktemp("run")))


@pytest.fixture(scope="module")
def odd_pool(tmp_path_factory: pytest.TempPathFactory) -> str:
    """13 rows: no number of workers from 2 to 12 splits them evenly."""
    return write_synthetic_shards(str(tmp_path_factory.mktemp("odd")), rows_per_file=(7, 6))


def _ids(samples) -> list[str]:
    return [s["sample_id"] for s in samples]


# -- finding shards ----------------------------------------------------------------------------


def test_refuses_a_run_without_success_marker(tmp_path):
    pool = write_synthetic_shards(str(tmp_path), success=False)
    with pytest.raises(ShardError, match="no _SUCCESS marker"):
        ShardDataset(pool)


def test_marker_at_the_output_root_covers_pool_folder_glob_and_file(tmp_path):
    pool = write_synthetic_shards(str(tmp_path))
    assert len(resolve_shard_files([pool])) == 2
    assert len(resolve_shard_files([f"{tmp_path}/shards/*/part-*.parquet"])) == 2
    assert resolve_shard_files([f"{pool}/part-00001.parquet"]) == [f"{pool}/part-00001.parquet"]


def test_rl_style_shards_without_weights_are_refused(tmp_path):
    folder = tmp_path / "shards" / "rl"
    folder.mkdir(parents=True)
    table = pa.table({"sample_id": ["a"], "input_ids": pa.array([[1, 2]], pa.list_(pa.int32()))})
    pq.write_table(table, folder / "part-00000.parquet")
    (tmp_path / "_SUCCESS").write_text("")
    with pytest.raises(ShardError, match=r"loss_weight.*rl pool"):
        ShardDataset(str(folder))


def test_row_groups_come_from_the_footers(pool_dir):
    groups = plan_row_groups(resolve_shard_files([pool_dir]))
    # 7 rows in groups of 3 → 3, 3, 1; 5 rows → 3, 2
    assert [g.num_rows for g in groups] == [3, 3, 1, 3, 2]


def test_reads_from_memory_filesystem():
    pool = write_synthetic_shards(f"memory://lwm-{uuid.uuid4().hex}")
    assert pool.startswith("memory://")
    assert sorted(_ids(ShardDataset(pool))) == ALL_IDS


def test_reads_from_s3(monkeypatch):
    server_module = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.setenv(name, "testing")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setitem(fsspec.config.conf, "s3", {"client_kwargs": {"endpoint_url": f"http://{host}:{port}"}})
        fsspec.filesystem("s3", skip_instance_cache=True).mkdir("shards-bucket")
        pool = write_synthetic_shards("s3://shards-bucket/run")
        assert pool == "s3://shards-bucket/run/shards/cpt"
        assert (
            sorted(_ids(ShardDataset(pool, rank=1, world_size=2)) + _ids(ShardDataset(pool, rank=0, world_size=2)))
            == ALL_IDS
        )
    finally:
        server.stop()


# -- partition -----------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("workers", [0, 1, 2])
def test_every_row_exactly_once_per_epoch(pool_dir, world_size, workers):
    for epoch in (0, 1):
        seen: list[str] = []
        for rank in range(world_size):
            dataset = ShardDataset(pool_dir, rank=rank, world_size=world_size, shuffle_buffer=4)
            dataset.set_epoch(epoch)
            loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
            seen += _ids(loader)
        counts = Counter(seen)
        assert sorted(counts) == ALL_IDS
        assert set(counts.values()) == {1}


@pytest.mark.parametrize("workers", [2, 3])
def test_every_row_is_drawn_once_per_epoch_of_the_endless_stream_with_workers(odd_pool, workers):
    """The loader takes as many samples from each worker: workers that owned blocks of their own (6 and 7 rows
    with two) drew the rows of the smaller block more often (26 draws each in four epochs: a row of the 6 about
    4.3 times, one of the 7 about 3.7)."""
    epochs = 4
    dataset = ShardDataset(odd_pool, shuffle_buffer=4, epochs=None)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
    drawn = _ids(itertools.islice(iter(loader), epochs * len(ODD_IDS)))
    assert Counter(drawn) == {sample_id: epochs for sample_id in ODD_IDS}
    for epoch in range(epochs):
        assert sorted(drawn[epoch * len(ODD_IDS) : (epoch + 1) * len(ODD_IDS)]) == ODD_IDS


def test_the_stream_is_the_same_with_zero_one_or_two_workers(odd_pool):
    def stream(workers):
        dataset = ShardDataset(odd_pool, shuffle_buffer=4, epochs=None)
        loader = dataset if workers is None else torch.utils.data.DataLoader(dataset, batch_size=None,
                                                                              num_workers=workers)
        return [(s["sample_id"], tuple(s["position"])) for s in itertools.islice(iter(loader), 3 * 13 + 5)]

    in_process = stream(None)
    assert stream(0) == stream(1) == stream(2) == in_process
    assert [i for i, _ in in_process[:13]] != [i for i, _ in in_process[13:26]]  # each epoch reshuffled


def test_more_ranks_than_rows_are_refused_before_any_loader_starts(pool_dir):
    with pytest.raises(ShardError, match=r"^12 rows cannot feed 13 ranks: one would get none; use fewer ranks$"):
        ShardDataset(pool_dir, rank=0, world_size=13).check_ranks_fed()
    ShardDataset(pool_dir, rank=0, world_size=12).check_ranks_fed()


def test_shuffle_depends_on_seed_and_epoch_only(pool_dir):
    def order(seed, epoch):
        dataset = ShardDataset(pool_dir, seed=seed, shuffle_buffer=4)
        dataset.set_epoch(epoch)
        return _ids(dataset)

    assert order(0, 0) == order(0, 0)
    assert order(0, 0) != order(0, 1)
    assert order(0, 0) != order(1, 0)
    assert _ids(ShardDataset(pool_dir, shuffle=False)) == ALL_IDS


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=8),
    ranks=st.integers(1, 7),
    seed=st.integers(0, 2**16),
    epoch=st.integers(0, 5),
)
def test_blocks_cover_the_epoch_row_space_exactly_once(sizes, ranks, seed, epoch):
    order = row_group_order(len(sizes), seed, epoch, shuffle=True)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rows = []
    for rank in range(ranks):
        start, stop = rank_block(sum(sizes), rank, ranks)
        segments = block_segments(sizes, order, start, stop)
        assert sum(s.row_hi - s.row_lo for s in segments) == stop - start
        rows += [int(starts[s.group]) + r for s in segments for r in range(s.row_lo, s.row_hi)]
    assert sorted(rows) == list(range(sum(sizes)))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 300), buffer=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_local_order_is_a_permutation_with_bounded_displacement(n, buffer, seed):
    order = local_order(n, buffer, seed, epoch=0, rank=0)
    assert sorted(order.tolist()) == list(range(n))
    if n:
        assert int(np.abs(order - np.arange(n)).max()) <= max(buffer, 0)


@settings(max_examples=80, deadline=None)
@given(rows=st.integers(1, 9), start=st.integers(0, 40), workers=st.integers(1, 5))
def test_workers_deal_out_every_stream_position_from_the_start_once_in_turn(rows, start, workers):
    dealt = {}  # stream position -> the worker that yields it
    for worker in range(workers):
        for epoch in range(8):
            for index in worker_indices(rows, epoch, start, worker, workers).tolist():
                assert epoch * rows + index not in dealt
                dealt[epoch * rows + index] = worker
    assert sorted(dealt) == list(range(start, 8 * rows))
    assert all(worker == (position - start) % workers for position, worker in dealt.items())


# -- resuming -------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 5, 11, 12, 15])
def test_resume_after_k_samples_continues_with_the_next(pool_dir, k):
    full = _ids(ShardDataset(pool_dir, shuffle_buffer=4, epochs=2))
    first = ShardDataset(pool_dir, shuffle_buffer=4, epochs=2)
    taken = _ids(itertools.islice(iter(first), k))
    state = first.state_dict()
    resumed = ShardDataset(pool_dir, shuffle_buffer=4, epochs=None)
    resumed.load_state_dict(state)
    rest = _ids(itertools.islice(iter(resumed), 24 - k))
    assert taken == full[:k]
    assert rest == full[k:]


def test_resume_with_workers_from_recorded_positions(pool_dir):
    def loader_of(dataset):
        return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)

    full = _ids(loader_of(ShardDataset(pool_dir, shuffle_buffer=4)))
    dataset = ShardDataset(pool_dir, shuffle_buffer=4)
    taken = list(itertools.islice(iter(loader_of(dataset)), 5))
    dataset.record_consumed(s["position"] for s in taken)
    resumed = ShardDataset(pool_dir, shuffle_buffer=4)
    resumed.load_state_dict(dataset.state_dict())
    assert _ids(taken) + _ids(loader_of(resumed)) == full


@pytest.mark.parametrize(("workers", "stops"), [(2, (5,)), (2, (5, 8)), (3, (4, 11)), (3, (7, 9, 10))])
def test_resume_with_workers_continues_the_stream_in_its_order(pool_dir, workers, stops):
    """Not only each worker's share: the loader's order (workers in turn), so a resumed run trains on the same
    batches as one that never stopped."""

    def loader_of(dataset):
        return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)

    full = _ids(itertools.islice(iter(loader_of(ShardDataset(pool_dir, shuffle_buffer=4, epochs=None))), 30))
    seen: list[str] = []
    state = None
    for stop in (*stops, 30):
        dataset = ShardDataset(pool_dir, shuffle_buffer=4, epochs=None)
        if state is not None:
            dataset.load_state_dict(state)
        taken = list(itertools.islice(iter(loader_of(dataset)), stop - len(seen)))
        dataset.record_consumed(s["position"] for s in taken)
        seen += _ids(taken)
        state = dataset.state_dict()
    assert seen == full


def test_set_epoch_after_a_resume_starts_the_epoch_with_the_first_worker(pool_dir):
    def loader_of(dataset):
        return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)

    fresh = _ids(loader_of(ShardDataset(pool_dir, shuffle_buffer=4, epochs=1)))
    dataset = ShardDataset(pool_dir, shuffle_buffer=4, epochs=None)
    taken = list(itertools.islice(iter(loader_of(dataset)), 3))  # worker 1's turn is next
    dataset.record_consumed(s["position"] for s in taken)
    resumed = ShardDataset(pool_dir, shuffle_buffer=4, epochs=1)
    resumed.load_state_dict(dataset.state_dict())
    resumed.set_epoch(0)  # forget the progress: the epoch from its start, in its order
    assert _ids(loader_of(resumed)) == fresh


@pytest.mark.parametrize(("before", "after"), [(0, 2), (2, 3), (3, 0)])
def test_resume_with_another_number_of_workers_continues_the_same_stream(odd_pool, before, after):
    def loader_of(dataset, workers):
        return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)

    full = _ids(itertools.islice(iter(loader_of(ShardDataset(odd_pool, shuffle_buffer=4, epochs=None), 0)), 30))
    dataset = ShardDataset(odd_pool, shuffle_buffer=4, epochs=None)
    taken = list(itertools.islice(iter(loader_of(dataset, before)), 17))
    dataset.record_consumed(s["position"] for s in taken)
    resumed = ShardDataset(odd_pool, shuffle_buffer=4, epochs=None)
    resumed.load_state_dict(dataset.state_dict())
    assert _ids(taken) + _ids(itertools.islice(iter(loader_of(resumed, after)), 13)) == full


def test_state_of_another_world_size_is_refused(pool_dir):
    dataset = ShardDataset(pool_dir)
    next(iter(dataset))
    other = ShardDataset(pool_dir, rank=0, world_size=2)
    with pytest.raises(ShardError, match="world_size=1 but this dataset has 2"):
        other.load_state_dict(dataset.state_dict())


def test_a_state_of_per_worker_blocks_is_refused_in_one_line(pool_dir):
    """Format 1 gave each dataloader worker a block of its own: its progress names no position in today's stream."""
    old = {"format": 1, "seed": 0, "shuffle": True, "shuffle_buffer": 512, "total_rows": 12, "num_consumers": 2,
           "epoch": 0, "progress": {"0": [0, 3], "1": [0, 2]}, "next_worker": 1}
    with pytest.raises(ShardError) as refused:
        ShardDataset(pool_dir).load_state_dict(old)
    assert "\n" not in str(refused.value)
    assert "saved by an older lwm train" in str(refused.value) and "new --out" in str(refused.value)


def test_state_of_other_seed_is_refused(pool_dir):
    with pytest.raises(ShardError, match="seed"):
        ShardDataset(pool_dir, seed=1).load_state_dict(ShardDataset(pool_dir, seed=2).state_dict())


# -- category re-weighting ----------------------------------------------------------------------


def test_override_replaces_only_nonzero_weights_inside_the_category_spans():
    weights = np.array([0, 0, 0.05, 0.05, 0, 1, 1, 0], dtype=np.float32)
    spans = [{"start": 2, "end": 4}, {"start": 5, "end": 7}]
    zeroed = apply_category_weights(weights, spans, ["echo", "retrieval"], {"echo": 0.0})
    assert zeroed.tolist() == [0, 0, 0, 0, 0, 1, 1, 0]
    masked_inside = np.array([0, 0.05, 0, 0.05], dtype=np.float32)
    raised = apply_category_weights(masked_inside, [{"start": 0, "end": 4}], ["echo"], {"echo": 1.0})
    assert raised.tolist() == [0, 1, 0, 1]
    assert weights[2] == np.float32(0.05)  # the input is not modified


def test_override_rejects_spans_outside_the_sample():
    with pytest.raises(ShardError, match=r"turn span \[3, 9\)"):
        apply_category_weights(np.zeros(5, np.float32), [{"start": 3, "end": 9}], ["echo"], {"echo": 0.0})


def test_parse_category_weights():
    assert parse_category_weights(["echo=0", "boilerplate=0.5"]) == {"echo": 0.0, "boilerplate": 0.5}
    for bad in ("echo", "echo=x", "=1", "echo=-1"):
        with pytest.raises(ShardError):
            parse_category_weights([bad])


def test_dataset_applies_overrides_at_load_time(pool_dir):
    plain = {s["sample_id"]: s["loss_weight"] for s in ShardDataset(pool_dir, shuffle=False)}
    no_echo = {
        s["sample_id"]: s["loss_weight"] for s in ShardDataset(pool_dir, shuffle=False, category_weights={"echo": 0})
    }
    # the synthetic samples give their second turn the echo category with keep 0.05
    assert any(np.isclose(w.numpy(), 0.05).any() for w in plain.values())
    changed = 0
    for sample_id, weights in plain.items():
        expected = torch.where(torch.isclose(weights, torch.tensor(0.05)), torch.tensor(0.0), weights)
        assert torch.equal(no_echo[sample_id], expected)
        changed += int(not torch.equal(weights, expected))
    assert changed > 0
