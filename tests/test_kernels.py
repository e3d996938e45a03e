"""The compiled dedup hashes (`stages.kernels`) give the bits of zlib's crc32/adler32 and of datasketch's MinHash,
and a process that switches to them mid-run writes the same dedup outputs as one that never does."""

from __future__ import annotations

import contextlib
import copy
import filecmp
import json
import os
import random
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from datasketch import MinHash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config import resolve
from pipeline.run import run_pipeline
from stages import dedup, kernels
from stages.gram_filter import GramFilter

# words of every byte but the space, runs of spaces at either end and between, and words long enough that
# adler32's sums are reduced inside the word (every 4,096 bytes) and that the NumPy path hashes them apart
WORD = st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b" ", b"x")) | st.sampled_from(
    [b"\xff" * 5000, bytes(range(33, 256)) * 40, b"a" * 4096, b"z" * 70_001])
BUFFER = st.lists(st.tuples(st.integers(0, 3), WORD), max_size=30).map(
    lambda parts: b"".join(b" " * gap + word for gap, word in parts)) | st.sampled_from([b"", b"   ", b"a", b" a "])


@pytest.fixture
def compiled(monkeypatch):
    """The compiled paths from the first byte in this process (as in a process past the threshold)."""
    monkeypatch.setattr(dedup, "KERNELS_AFTER_BYTES", 0)
    monkeypatch.setattr(dedup, "_compiled", None)
    monkeypatch.setattr(dedup, "_hashed_bytes", 0)
    monkeypatch.setattr(dedup, "_announced", 0)
    dedup.expect_text(0)
    assert dedup._compiled is kernels


@pytest.fixture
def numpy_only(monkeypatch):
    monkeypatch.setattr(dedup, "KERNELS_AFTER_BYTES", 1 << 62)
    monkeypatch.setattr(dedup, "_compiled", None)
    monkeypatch.setattr(dedup, "_hashed_bytes", 0)
    monkeypatch.setattr(dedup, "_announced", 0)


@settings(max_examples=300, deadline=None)
@given(BUFFER, st.integers(0, 2))
def test_compiled_word_hashes_are_crc32_and_adler32_of_each_word(raw, lead):
    raw = b" " * lead + raw
    buf = np.frombuffer(raw, dtype=np.uint8)
    starts, hashes = kernels.word_hashes(buf, dedup._CRC)
    words = [w for w in raw.split(b" ") if w]
    assert hashes.dtype == np.uint64 and hashes.tolist() == [(zlib.crc32(w) << 32) | zlib.adler32(w) for w in words]
    assert [raw[s : s + len(w)] for s, w in zip(starts.tolist(), words)] == words
    want_starts, want_hashes = dedup._buffer_word_hashes(buf)  # the NumPy path: the same starts and values
    assert np.array_equal(starts, want_starts) and np.array_equal(hashes, want_hashes)


SETS = st.lists(st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 6), max_size=60), max_size=12)


@settings(max_examples=200, deadline=None)
@given(SETS, st.sampled_from([1, 16, 128]), st.integers(0, 2**31))
def test_compiled_minhash_equals_the_numpy_signature_of_each_set(sets, num_perm, seed):
    values = np.array([v for s in sets for v in s], dtype=np.uint32)
    offsets = np.cumsum([0] + [len(s) for s in sets])
    a, b = dedup.permutations(num_perm, seed)
    got = kernels.minhash_sets(values, offsets.astype(np.int64), a, b)
    assert got.shape == (len(sets), num_perm) and got.dtype == np.uint32
    for row, s in zip(got, sets):
        assert np.array_equal(row, dedup.minhash(np.array(s, dtype=np.uint32), num_perm, seed))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.lists(st.integers(0, 4), max_size=30), st.booleans()), max_size=8),
       st.integers(1, 14), st.integers(0, 4), st.booleans())
def test_compiled_ngram_keys_are_each_texts_own(compiled, texts, n, share, wide):
    # few distinct words make repeated n-grams within and across texts; the marked texts keep only the keys a
    # filter holds (every fourth of all first halves from `share` on; none at 4)
    hashes = [np.array([(w * 0x9E3779B97F4A7C15 if wide else w) % 2**64 for w in ids], dtype=np.uint64)
              for ids, _ in texts]
    marked = [m for _, m in texts]
    firsts = np.array([k for text in hashes for k in dedup.ngram_keys(text, n)[:, 0]], dtype=np.uint64)
    grams = GramFilter(16, [firsts[share::4]])
    for grams_, marked_ in ((None, ()), (grams, marked)):
        got = dedup.ngram_keys_many(hashes, n, grams_, marked_)
        assert len(got) == len(texts)
        for text, is_marked, keys in zip(hashes, marked_ or [False] * len(texts), got, strict=True):
            want = dedup.ngram_keys(text, n)  # one text, NumPy's sort and windows
            if is_marked:
                want = want[grams.holds(want[:, 0])]
            assert keys.dtype == np.uint64 and keys.shape == want.shape and np.array_equal(keys, want)
            assert keys.base is None


def test_compiled_signatures_of_texts_equal_datasketch(compiled):
    rng = np.random.default_rng(11)
    vocab = [f"w{i}" for i in range(300)]
    lengths = [0, 1, 4, 5, 6, 40, 5000, 3, 0] + rng.integers(0, 700, 40).tolist()
    texts = [" ".join(vocab[i] for i in rng.integers(0, len(vocab), n)) for n in lengths]
    signer = dedup.Signer(shingle=5, num_perm=128, seed=1)
    hashes = dedup.text_word_hashes_many([[t] for t in texts])
    for row, text, h in zip(signer.signatures(hashes), texts, hashes):
        assert np.array_equal(h, dedup.word_hashes(dedup.words_of([text])))
        expected = MinHash(num_perm=128, seed=1, scheme="affine32", hashfunc=lambda x: x)
        if len(h):
            expected.update_batch(dedup.shingle_hashes(h, 5).tolist())
        assert np.array_equal(row, expected.hashvalues)


def test_a_process_loads_the_compiled_loops_once_it_has_hashed_enough_text(monkeypatch, numpy_only):
    monkeypatch.setattr(dedup, "KERNELS_AFTER_BYTES", 2000)
    texts = [["Error: file not found 12 times", "ok"] * 40]  # 1,359 bytes a call
    first = dedup.text_word_hashes_many(texts)
    assert dedup._compiled is None and dedup._hashed_bytes < 2000
    second = dedup.text_word_hashes_many(texts)  # past 2,000 bytes: this call is compiled already
    assert dedup._compiled is kernels
    assert all(np.array_equal(x, y) for x, y in zip(first, second, strict=True))


def test_a_part_announces_the_bytes_of_its_action_and_observation_columns(tmp_path, numpy_only):
    import pyarrow as pa

    from pipeline.dedup_map import _text_bytes

    def part(size: int) -> pq.FileMetaData:
        turns = [[{"action": "ls", "observation": c * size, "reasoning": c * 50_000}] for c in "xyz"]
        pq.write_table(pa.table({"traj_id": ["t" * 20_000] * 3, "turns": turns}), tmp_path / "p.parquet")
        return pq.ParquetFile(tmp_path / "p.parquet").metadata

    short, long = _text_bytes(part(1)), _text_bytes(part(100_000))
    assert 0 < short < 1_000 and 299_000 <= long - short < 310_000  # neither the ids nor the reasoning count
    dedup.expect_text(dedup.KERNELS_AFTER_BYTES - 1)
    assert dedup._compiled is None
    dedup.expect_text(1)
    assert dedup._compiled is kernels


def test_announced_text_is_counted_once_when_it_is_hashed(numpy_only, monkeypatch):
    monkeypatch.setattr(dedup, "KERNELS_AFTER_BYTES", 3000)
    texts = [["Error: file not found 12 times", "ok"] * 40]  # 1,359 bytes a call
    dedup.expect_text(1359)
    dedup.text_word_hashes_many(texts)  # the announced bytes: 1,359 counted, not 2,718
    assert dedup._hashed_bytes == 1359 and dedup._compiled is None
    dedup.text_word_hashes_many(texts)
    assert dedup._hashed_bytes == 2718 and dedup._compiled is None
    dedup.text_word_hashes_many(texts)
    assert dedup._compiled is kernels


def _corpus() -> list[dict]:
    """Terminal trajectories with exact copies (only their timestamps differ, which normalization removes) and
    near copies (one word changed per turn)."""
    rnd = random.Random(3)
    vocab = [f"{rnd.choice('bdgklmnprst')}{rnd.choice('aeiou')}{rnd.randrange(10**4):04d}" for _ in range(4000)]
    trajs = []
    for i in range(48):
        turns = [{"action": json.dumps([{"keystrokes": f"run {rnd.choice(vocab)}\n"}]),
                  "observation": f"[2024-05-01T10:0{t}:00Z] " + " ".join(rnd.choice(vocab) for _ in range(80))}
                 for t in range(3 + i % 3)]
        trajs.append({"traj_id": f"t{i:03d}", "domain": "terminal", "split_key": f"task-{i:03d}",
                      "system": {"task_description": "You operate a shell in a sandbox. " * 20,
                                 "action_space": "keystrokes"}, "turns": turns})
    for i in range(0, 12, 3):
        exact, near = copy.deepcopy(trajs[i]), copy.deepcopy(trajs[i + 1])
        exact.update(traj_id=f"x{i:03d}", split_key=f"task-x{i:03d}")
        near.update(traj_id=f"n{i:03d}", split_key=f"task-n{i:03d}")
        for t in exact["turns"]:
            t["observation"] = t["observation"].replace("2024-05-01T10", "2025-02-11T23")
        for t in near["turns"]:
            words = t["observation"].split(" ")
            words[30] = "x" * len(words[30])
            t["observation"] = " ".join(words)
        trajs += [exact, near]
    rnd.shuffle(trajs)
    return trajs


def _run(corpus: Path, out: Path) -> None:
    # an eval pool: the decontamination rounds hash too
    cfg = resolve({"pools": {"ratios": {"cpt": 0.6, "sft": 0.2, "rl": 0.1, "eval": 0.1}}},
                  {"run": {"input": [str(corpus)], "out": str(out)}, "executor": {"kind": "local", "progress": "off"}})
    run_pipeline(cfg)


def test_dedup_outputs_are_the_same_whichever_path_hashes(tmp_path, monkeypatch):
    corpus = tmp_path / "runs.jsonl"
    corpus.write_text("".join(json.dumps(t) + "\n" for t in _corpus()))
    numpy_calls = []
    numpy_path = dedup._buffer_word_hashes
    monkeypatch.setattr(dedup, "_buffer_word_hashes", lambda buf: numpy_calls.append(1) or numpy_path(buf))
    outs, counted = {}, 0
    for name in ("numpy", "compiled", "switching"):
        # switching: the compiled loops from the middle of what the run counts (numpy: the whole of it)
        after = {"numpy": 1 << 62, "compiled": 0, "switching": counted // 2}[name]
        monkeypatch.setattr(dedup, "KERNELS_AFTER_BYTES", after)
        monkeypatch.setattr(dedup, "_compiled", None)
        monkeypatch.setattr(dedup, "_hashed_bytes", 0)
        monkeypatch.setattr(dedup, "_announced", 0)
        numpy_calls.clear()
        outs[name] = tmp_path / name
        _run(corpus, outs[name])
        counted = counted or dedup._hashed_bytes
        assert (dedup._compiled is kernels) == (name != "numpy")
        assert bool(numpy_calls) == (name != "compiled")  # the switching run hashed on both paths
    removed = outs["numpy"] / "dedup" / "removed.parquet"
    assert pq.read_table(removed).num_rows >= 6  # the planted copies: as exact, near or decontaminated copies
    assert list((outs["numpy"] / "shards").rglob("*.parquet"))
    # the map's bucket files hold every key and signature; then the verdicts and the shards
    files = [p for p in sorted(outs["numpy"].rglob("*")) if p.is_file() and p.parent.name.startswith("b0")]
    assert files
    files += [removed, *sorted((outs["numpy"] / "shards").rglob("*.parquet"))]
    for name in ("compiled", "switching"):
        for path in files:
            assert filecmp.cmp(path, outs[name] / path.relative_to(outs["numpy"]), shallow=False), (name, path)


def test_the_filtered_and_unfiltered_calls_share_one_compiled_loop(compiled):
    # a filter read from its file has a read-only bitmap, a new one a writable one, and no filter neither: one
    # array type reaches the loop, so a process compiles or loads it once (numba compiles one per type)
    hashes = dedup.text_word_hashes_many([["a b c d e f g h i j k l m n o p"] * 2] * 3)
    dedup.ngram_keys_many(hashes, 13)
    known = set(kernels.ngram_keys.signatures)
    dedup.ngram_keys_many(hashes, 13, GramFilter.of_bitmap(16, bytes(1 << 13)), [True, False, True])
    dedup.ngram_keys_many(hashes, 13, GramFilter(16, [np.arange(5, dtype=np.uint64)]), [True, True, True])
    assert set(kernels.ngram_keys.signatures) == known


def test_a_process_can_be_held_to_either_path(numpy_only, monkeypatch):
    monkeypatch.setattr(dedup, "_forced", None)
    calls = []
    numpy_path = dedup._buffer_word_hashes
    monkeypatch.setattr(dedup, "_buffer_word_hashes", lambda buf: calls.append(1) or numpy_path(buf))
    texts = [["one two three"]]
    dedup.use_compiled(True)  # loads them at once, whatever the process has counted
    assert dedup._compiled is kernels
    want = dedup.text_word_hashes_many(texts)
    assert not calls
    dedup.use_compiled(False)  # loaded, but not used
    monkeypatch.setattr(dedup, "KERNELS_AFTER_BYTES", 0)
    assert all(np.array_equal(a, b) for a, b in zip(dedup.text_word_hashes_many(texts), want, strict=True))
    assert calls
    dedup.use_compiled(None)  # the rule again: past the (now zero) threshold, compiled
    calls.clear()
    dedup.text_word_hashes_many(texts)
    assert not calls


# Pieces of every field the normalization replaces, of what sits at their edges (digits, dots, colons, letters,
# "=", the unit letters, Unicode digits, words and spaces) and of what the later patterns look for (a month's or
# weekday's name, a process id, a temporary path), plus NULs (the separator of the compiled scan's texts).
FIELD_PIECES = [
    "2024-05-01T12:00:03.123Z", "2024-05-01 12:00:03+02:00", "1999-12-31T23:59:59-0530", "2024/05/01", "5/1/24",
    "12/31/2024", "12:00", "7:05:09.5", "12:00:03,25", "0x7f3a2b1c", "0x7F3A2B1C9D0E1F2A3B", "0.23s", "12ms",
    "3µs", "1m2.5s", "1.5 seconds", "2.5 secs", "4.0 sec", "17 ns", "5us", "1700000000", "1700000000123",
    "1700000000.25", "May  1", "Jan 5, 2024", "Dec. 25", "Feb.  3 1999", "Jul 4,", "Aug", "Jun", "may 5", "Mon, ",
    "Sunday ", "Tue ", "Wednesday, ", "Sat", "Thu", "Fri,", "<DATE>", "pid=1234", "PID: 7", "Pid 99",
    "sshd[4242]", "[12]", "/tmp/tmpab12cd", "/tmp/tmp.XyZ123", "/var/folders/ab/x_y-z/T/", "pytest-of-me/pytest-3",
    "0", "1", "12", "123", "1234", "12345", "123456789", ".", ":", "-", "/", ",", "x", "m", "s", "u", "n", "=", "_",
    "a", "Z", "T", "é", "٣", "٠١٢", "µ", " ", "  ", "\n", "\t", "\xa0", "\u3000", "\x1c", "\x00", "\u2028", "[", "]",
]
TEXTS = st.lists(st.lists(st.sampled_from(FIELD_PIECES), max_size=12).map("".join), max_size=30)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(TEXTS)
def test_compiled_normalization_equals_the_regular_expressions(compiled, texts):
    want = [dedup.normalize_text(t) for t in texts]
    assert dedup.normalize_many(texts) == want
    assert [dedup.normalize_many([t])[0] for t in texts] == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=20))
def test_compiled_normalization_of_any_text_equals_the_regular_expressions(texts):
    dedup.use_compiled(True)
    try:
        assert dedup.normalize_many(texts) == [dedup.normalize_text(t) for t in texts]
    finally:
        dedup.use_compiled(None)


def _strings(value, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


def test_compiled_normalization_of_real_logs_equals_the_regular_expressions(compiled, shared_data):
    """Every string of every JSON, JSONL and trajectory file in ../shared/data, and every text file whole."""
    texts: list[str] = []
    for path in sorted(p for p in shared_data.rglob("*") if p.is_file()):
        raw = path.read_text("utf-8", errors="surrogateescape")
        texts.append(raw)
        for line in raw.splitlines() if path.suffix == ".jsonl" else [raw]:
            with contextlib.suppress(ValueError):  # not JSON: the text whole is enough
                _strings(json.loads(line), texts)
    assert len(texts) > 1000 and sum(map(len, texts)) > 4_000_000
    want = [dedup.normalize_text(t) for t in texts]
    assert dedup.normalize_many(texts) == want
    assert sum(a != b for a, b in zip(texts, want, strict=True)) > 100  # the texts hold fields to replace



def test_compile_kernels_leaves_every_loop_in_numbas_cache_for_the_next_process(tmp_path):
    """``make`` compiles the loops once (`dedup.compile_kernels`); a later process that normalizes, hashes, signs
    and keys texts of both kinds loads every loop from the cache and compiles none."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    run = [sys.executable, "-c"]
    subprocess.run([*run, "from stages.dedup import compile_kernels; compile_kernels()"], env=env, check=True,
                   cwd=Path(__file__).resolve().parent.parent)
    probe = """
import json, numba
from stages import dedup, digit_fields, kernels, normalize_loops
dedup.use_compiled(True)
texts = ["ran 3 tests in 0.25s at 12:00:01", "Über 2024-05-01 ━━ ٣ pid=4 May  1", ""]
hashes = dedup.text_word_hashes_many([dedup.normalize_many(texts), texts[:1]], normalized=True)
dedup.Signer(5, 128, 1, 16, 8).signatures(hashes)
dedup.ngram_keys_many(hashes, 3)
dedup.ngram_keys_many(hashes, 3, dedup.GramFilter(16), [True, False])
loops = [v for m in (kernels, digit_fields, normalize_loops) for v in vars(m).values()
         if isinstance(v, numba.core.registry.CPUDispatcher)]
print(json.dumps({"misses": sum(sum(l.stats.cache_misses.values()) for l in loops),
                  "hits": sum(sum(l.stats.cache_hits.values()) for l in loops)}))
"""
    out = subprocess.run([*run, probe], env=env, check=True, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent)
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["misses"] == 0 and counts["hits"] >= 5, counts
