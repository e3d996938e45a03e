"""Ingest tasks are balanced by bytes, not by file count: whatever the configured sizes, an input is cut into
about `TARGET_TASKS` tasks of similar bytes, so two workers (or more) always have work to share."""

from __future__ import annotations

from pathlib import Path

from stages.ingest.ranges import MIN_TASK_BYTES, TARGET_TASKS, SplitSettings, plan_ingest
from stages.ingest.reading import InputUnit

MB = 1_000_000


def _sizes(plan) -> list[int]:
    return [w.byte_range.end - w.byte_range.start if w.byte_range else sum(Path(u.uri).stat().st_size for u in w.units)
            for w in plan]


def test_one_40_mb_file_becomes_equal_ranges_for_every_worker(tmp_path):
    path = tmp_path / "big.jsonl"
    with path.open("wb") as f:  # sparse is enough: planning reads sizes only for plain JSONL
        f.truncate(40 * MB + 7)
    plan = plan_ingest([(InputUnit(str(path)), "lwm-jsonl")], SplitSettings())  # defaults: 64 MiB ranges
    sizes = _sizes(plan)
    assert len(plan) == TARGET_TASKS >= 2 * 2  # at least two tasks per worker on two workers
    assert sum(sizes) == 40 * MB + 7 and max(sizes) - min(sizes) <= 1
    starts = [w.byte_range.start for w in plan]
    assert starts == sorted(starts) and starts[0] == 0


def test_many_small_files_group_into_tasks_of_similar_bytes(tmp_path):
    units = []
    for i in range(400):  # 40 MB in files of 100 kB; the default group closes at 8 MiB or 64 files
        p = tmp_path / f"f{i:03d}.jsonl"
        p.write_bytes(b"x" * (100 * 1000))
        units.append((InputUnit(str(p)), "lwm-jsonl"))
    plan = plan_ingest(units, SplitSettings())
    sizes = _sizes(plan)
    per_task = 40 * MB // TARGET_TASKS
    assert sum(sizes) == 40 * MB and len(plan) >= TARGET_TASKS
    assert all(per_task <= s < per_task + 100 * 1000 for s in sizes[:-1])  # closed at the first file over
    assert sizes[-1] <= per_task + 100 * 1000


def test_a_small_input_is_not_cut_finer_than_min_task_bytes(tmp_path):
    units = []
    for i in range(8):
        p = tmp_path / f"s{i}.jsonl"
        p.write_bytes(b"x" * 50_000)
        units.append((InputUnit(str(p)), "lwm-jsonl"))
    big = tmp_path / "t.jsonl"
    big.write_bytes(b"y\n" * (MIN_TASK_BYTES // 2 + 1000))  # just over MIN_TASK_BYTES: two ranges, not sixteen
    plan = plan_ingest([(InputUnit(str(big)), "lwm-jsonl"), *units], SplitSettings())
    assert [len(w.units) for w in plan] == [1, 1, 8]
    assert [w.byte_range is not None for w in plan] == [True, True, False]
