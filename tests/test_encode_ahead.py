"""The sample task's second tokenizer thread (`stages.tokenizer.ahead`): the same ids, counters and outputs as
without it, within its window, and harmless when it fails."""

from __future__ import annotations

import contextlib
import sys
import threading
import time

import pytest

import pipeline.sample_task as sample_task
from pipeline.executors import LocalExecutor
from pipeline.progress import Progress
from pipeline.run import run_pipeline
from stages.tokenizer import load_tokenizer
from stages.tokenizer.ahead import EncodeAhead
from stages.tokenizer.segments import segment_tokenizer
from tests.helpers import assert_same_outputs, corpus_config, demo_inputs, write_corpus


def _seg():
    return segment_tokenizer(load_tokenizer(None, None))


class CountingTokenizer:
    """The default tokenizer, counting the long texts each thread encodes."""

    def __init__(self) -> None:
        self._tok = load_tokenizer(None, None)
        self.by_thread: dict[str, int] = {}

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def _count(self, text: str) -> None:
        if len(text) > 48:
            name = threading.current_thread().name
            self.by_thread[name] = self.by_thread.get(name, 0) + 1

    def encode(self, text: str) -> list[int]:
        self._count(text)
        return self._tok.encode(text)

    def encode_array(self, text: str):
        self._count(text)
        return self._tok.encode_array(text)


def _rows(n: int = 12, per: int = 5) -> list[list[str]]:
    """Texts of `n` rows: long ones (ahead's), a repeat within a row, one repeated from an earlier row, short ones."""
    rows = []
    for r in range(n):
        texts = [f"row {r} text {i}: " + " ".join(f"word{(r * 31 + i * 7 + k) % 97}" for k in range(40))
                 for i in range(per)]
        rows.append(texts + [texts[0], "short", rows[-1][1] if rows else "x" * 60])
    return rows


def _wait_until(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def _encode_all(seg, rows, ahead: EncodeAhead | None = None, wait: bool = False) -> list[list[int]]:
    out = []
    for i, texts in enumerate(rows):
        if ahead is not None:
            if wait:  # the thread has this row (or ended): the ids must come from it
                _wait_until(lambda i=i: i in ahead._ready or not ahead._thread.is_alive())
            ahead.at(i)
        out += [seg.encode(t) for t in texts]
    return out


def test_ids_counters_and_memo_are_those_of_encoding_here():
    rows = _rows()
    plain = _seg()
    want = _encode_all(plain, rows)
    tok = CountingTokenizer()
    seg = segment_tokenizer(tok)
    interval = sys.getswitchinterval()
    with EncodeAhead(seg, rows) as ahead:
        assert sys.getswitchinterval() != interval  # handed over quickly while the thread runs
        got = _encode_all(seg, rows, ahead, wait=True)
    assert sys.getswitchinterval() == interval and not ahead._thread.is_alive()
    assert got == want
    assert ahead.offered > 0 and ahead.error is None
    # every long text was encoded on the other thread and taken from it, none here
    assert tok.by_thread.get(threading.current_thread().name, 0) == 0 and tok.by_thread["lwm-encode-ahead"] > 0
    assert (seg.counter.chars, seg.counter.calls) == (plain.counter.chars, plain.counter.calls)
    assert seg.kept_texts().keys() == plain.kept_texts().keys()
    assert seg.given == {}


def test_the_thread_stays_within_its_window_of_rows_and_characters():
    drawn = []

    def rows(texts_per_row):
        for i, texts in enumerate(texts_per_row):
            drawn.append(i)
            yield texts

    seg = _seg()
    with EncodeAhead(seg, rows(_rows(20)), window_rows=3) as ahead:
        _wait_until(lambda: len(ahead._ready) == 3)
        time.sleep(0.05)
        assert sorted(ahead._ready) == [0, 1, 2] and max(drawn) == 3  # row 3 waits for the task to move
        ahead.at(1)
        _wait_until(lambda: 4 in ahead._ready)
        time.sleep(0.05)
        assert sorted(ahead._ready) == [2, 3, 4]
    drawn.clear()
    seg = _seg()
    with EncodeAhead(seg, rows(_rows(20)), window_rows=50, window_chars=1) as ahead:
        _wait_until(lambda: 0 in ahead._ready)
        time.sleep(0.05)
        assert sorted(ahead._ready) == [0] and max(drawn) == 1  # over its characters after one row


def test_a_failing_thread_leaves_the_work_to_the_task():
    def rows():
        yield ["a first row of text that is long enough to be encoded ahead of the task"]
        raise RuntimeError("unreadable row")

    seg, plain = _seg(), _seg()
    texts = [["a first row of text that is long enough to be encoded ahead of the task"], ["another long text " * 4]]
    with EncodeAhead(seg, rows()) as ahead:
        got = _encode_all(seg, texts, ahead, wait=True)
    assert isinstance(ahead.error, RuntimeError)
    assert got == _encode_all(plain, texts)


class HeldTokenizer(CountingTokenizer):
    """Counts like `CountingTokenizer`; on the other thread, holds the encoding of `held` until `release` is set
    (or raises there, with `fail`)."""

    def __init__(self, held: str, fail: bool = False) -> None:
        super().__init__()
        self.held, self.fail = held, fail
        self.started, self.release = threading.Event(), threading.Event()
        self.here: list[str] = []  # the long texts encoded on the test's thread

    def encode_array(self, text: str):
        if threading.current_thread() is threading.main_thread():
            self.here.append(text)
        elif text == self.held:
            self.started.set()
            if self.fail:
                raise RuntimeError("tokenizer failed")
            assert self.release.wait(10)
        return super().encode_array(text)


def test_a_row_the_thread_is_encoding_is_waited_for_not_encoded_twice():
    rows = _rows(4)
    want = _encode_all(_seg(), rows)
    tok = HeldTokenizer(rows[0][2])
    seg = segment_tokenizer(tok)
    with EncodeAhead(seg, rows) as ahead:
        assert tok.started.wait(10)  # the thread is in the middle of row 0
        threading.Timer(0.2, tok.release.set).start()
        began = time.monotonic()
        ahead.at(0)
        assert time.monotonic() - began >= 0.15  # it waited for the row
        assert set(rows[0][:5]) <= set(seg.given)
        got = [seg.encode(t) for t in rows[0]]
    assert got == want[:len(rows[0])]
    assert not set(rows[0]) & set(tok.here)  # none of the row's long texts was encoded a second time here


def test_a_thread_that_fails_in_the_middle_of_a_row_leaves_it_to_the_task():
    rows = _rows(3)
    plain = _seg()
    tok = HeldTokenizer(rows[0][2], fail=True)
    seg = segment_tokenizer(tok)
    with EncodeAhead(seg, rows) as ahead:
        assert tok.started.wait(10)
        _wait_until(lambda: not ahead._thread.is_alive())
        got = _encode_all(seg, rows, ahead)  # returns: no wait for the row the thread was on
    assert isinstance(ahead.error, RuntimeError) and ahead.offered == 0
    assert got == _encode_all(plain, rows)


def test_the_in_process_runner_lends_its_other_cpus_to_a_task_it_runs_alone(monkeypatch):
    import pipeline.executors as executors
    from pipeline.engine import spare_cpus

    monkeypatch.setattr(executors, "_cpus", lambda: 4)
    seen = []
    progress = Progress("t", 2, mode="off")
    LocalExecutor().map(lambda task: seen.append(spare_cpus()) or {}, [{"task_id": "a"}, {"task_id": "b"}], progress)
    LocalExecutor().map(lambda task: seen.append(spare_cpus()) or {}, [{"task_id": "a"}, {"task_id": "b"}], progress,
                        threads=2)
    assert seen == [3, 3, 0, 0] and spare_cpus() == 0


def test_a_task_without_a_spare_cpu_or_with_a_gil_bound_tokenizer_reads_its_part_alone(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.outputs import out_fs

    path = tmp_path / "part.parquet"
    pq.write_table(pa.table({"turns": [[{"observation": "o"}]], "traj_id": ["t"]}), path)
    fs, _ = out_fs(str(tmp_path))
    seg = _seg()
    for spare, tok in ((0, seg.tok), (1, object())):
        monkeypatch.setattr(sample_task, "spare_cpus", lambda spare=spare: spare)
        with contextlib.ExitStack() as stack:
            rows, ahead = sample_task._part_rows(fs, str(path), seg, tok, stack)
            assert ahead is None and [r["traj_id"] for r in rows] == ["t"]
    monkeypatch.setattr(sample_task, "spare_cpus", lambda: 1)
    with contextlib.ExitStack() as stack:
        rows, ahead = sample_task._part_rows(fs, str(path), seg, seg.tok, stack)
        assert isinstance(ahead, EncodeAhead) and [r["traj_id"] for r in rows] == ["t"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("corpus")
    return [str(write_corpus(root / "gen", files=3, per_file=20)), *demo_inputs(root / "demo", n=4)]


def test_a_run_with_the_thread_writes_the_bytes_of_a_run_without_it(corpus, tmp_path, monkeypatch):
    import pipeline.executors as executors

    monkeypatch.setattr(executors, "_cpus", lambda: 2)  # a CPU to spare, on any machine
    used: list[EncodeAhead] = []

    class Waiting(EncodeAhead):
        """Takes every row from the thread (waits for it), so the run's ids all come from the other thread."""

        def __enter__(self):
            used.append(self)
            return super().__enter__()

        def at(self, index: int) -> None:
            _wait_until(lambda: index in self._ready or not self._thread.is_alive())
            super().at(index)

    monkeypatch.setattr(sample_task, "EncodeAhead", Waiting)
    run_pipeline(corpus_config(corpus, tmp_path / "ahead"), echo=lambda m: None)
    assert used and sum(a.offered for a in used) > 0 and all(a.error is None for a in used)
    assert not any(a._thread.is_alive() for a in used)
    monkeypatch.setattr(sample_task, "spare_cpus", lambda: 0)
    run_pipeline(corpus_config(corpus, tmp_path / "alone"), echo=lambda m: None)
    assert_same_outputs(tmp_path / "ahead", tmp_path / "alone")


def test_the_threads_observations_are_the_rows_observations_normalized():
    import pyarrow as pa

    turn = pa.struct([("action", pa.string()), ("observation", pa.string())])
    rows = [[{"action": "a", "observation": "Cafe\u0301"}, {"action": "b", "observation": None}], None, [],
            *([[{"action": "c", "observation": f"o{i}"}] for i in range(70)])]
    turns = pa.chunked_array([pa.array(rows[:2], pa.list_(turn)), pa.array(rows[2:], pa.list_(turn))])
    seg = _seg()
    seg.normalization = "NFC"
    got = list(sample_task._observations(seg, turns))
    assert got[:3] == [["Caf\u00e9", ""], [], []] and got[3:] == [[f"o{i}"] for i in range(70)]
