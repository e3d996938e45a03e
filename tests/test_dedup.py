"""Pure dedup functions: normalization, exact keys, MinHash equal to datasketch, LSH bands, clusters."""

from __future__ import annotations

import numpy as np
import pytest
from datasketch import MinHash
from hypothesis import given, settings
from hypothesis import strategies as st

from stages import dedup
from stages.gram_filter import GramFilter

NORMALIZED = [
    ("started 2024-05-01T12:00:03.123Z done", "started <TS> done"),
    ("at 2024-05-01 12:00:03+02:00 ok", "at <TS> ok"),
    ("on 2024-05-01 and 2024/05/02 and 5/1/24", "on <DATE> and <DATE> and <DATE>"),
    ("took 12:00 then 09:15:30.5", "took <TIME> then <TIME>"),
    ("-rw-r--r-- 1 root root 220 May  1 10:33 a.txt", "-rw-r--r-- 1 root root 220 <DATE> <TIME> a.txt"),
    ("Tue Jan 14 10:00:00 UTC 2025", "<DATE> <TIME> UTC 2025"),
    ("<obj at 0x7f3a2b1c9d40> and flag 0x1F", "<obj at 0x<ADDR>> and flag 0x1F"),
    ("5 passed in 0.23s; step 12ms; 3µs; real 1m2.5s; 1.5 seconds", "5 passed in <DUR>; step <DUR>; <DUR>; real <DUR>; <DUR>"),
    ("ts=1714567890 ms=1714567890123 id=2714567890", "ts=<EPOCH> ms=<EPOCH> id=2714567890"),
    ("server pid=4242 PID: 17", "server pid=<PID> pid=<PID>"),
    # the spellings programs print, whatever else the text holds
    ("Pid 12 and PId: 7", "pid=<PID> and PId: 7"), ("PId: 7", "PId: 7"),
    ("sshd[31337]: accepted; [12] button; [ 3] view", "sshd[<PID>]: accepted; [12] button; [ 3] view"),
    ("wrote /tmp/tmpab12cd_x/out and /tmp/tmp.XyZ123abc", "wrote <TMP>/out and <TMP>"),
    ("/var/folders/8x/abc_123/T/x and pytest-of-root/pytest-12/test_a0", "<TMP>/x and <TMP>/test_a0"),
    ("  many\t\tspaces \n\n and lines  ", "many spaces and lines"),
    ("numpy 1.26.4 and v2.0.1 and 3.11", "numpy 1.26.4 and v2.0.1 and 3.11"),
]


@pytest.mark.parametrize(("text", "expected"), NORMALIZED, ids=[e[:25] for _, e in NORMALIZED])
def test_normalize_text(text, expected):
    assert dedup.normalize_text(text) == expected


def _turns(*pairs: tuple[str, str]) -> list[dict]:
    return [{"action": a, "observation": o} for a, o in pairs]


SYSTEM = {"task_description": "fix the bug", "action_space": "bash", "demonstrations": []}


def test_exact_key_ignores_timestamps_pids_and_whitespace():
    a = _turns(("ls", "2024-05-01T10:00:00Z pid=10 a b"), ("cat a", "took 0.5s"))
    b = _turns(("ls", "2025-12-31T23:59:59Z  pid=99999\na  b"), ("cat  a", "took 1.25s"))
    key_a = dedup.exact_key(dedup.exact_content("terminal", SYSTEM, a))
    assert key_a == dedup.exact_key(dedup.exact_content("terminal", SYSTEM, b))
    assert key_a != dedup.exact_key(dedup.exact_content("swe", SYSTEM, a))
    assert key_a != dedup.exact_key(dedup.exact_content("terminal", {**SYSTEM, "task_description": "x"}, a))
    moved = _turns(("ls", "2024-05-01T10:00:00Z pid=10 a"), ("b cat a", "took 0.5s"))
    assert key_a != dedup.exact_key(dedup.exact_content("terminal", SYSTEM, moved))


def test_words_are_lowercased_normalized_bytes():
    assert dedup.words_of(["Hello  World 12:00", "", "ÉTÉ ok"]) == [b"hello", b"world", b"<time>", "été".encode(), b"ok"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=300), st.sampled_from([16, 128]), st.integers(0, 5))
def test_minhash_equals_datasketch_affine32(values, num_perm, seed):
    expected = MinHash(num_perm=num_perm, seed=seed, scheme="affine32", hashfunc=lambda x: x)
    expected.update_batch(values)
    got = dedup.minhash(np.array(values, dtype=np.uint32), num_perm, seed)
    assert np.array_equal(got, expected.hashvalues)


def test_minhash_over_chunks_matches_one_pass():
    values = np.arange(10_000, dtype=np.uint32) * np.uint32(2654435761)
    one = MinHash(num_perm=64, seed=3, scheme="affine32", hashfunc=lambda x: x)
    one.update_batch(values.tolist())
    assert np.array_equal(dedup.minhash(values, 64, 3), one.hashvalues)


def test_estimated_jaccard_tracks_the_true_one():
    a = np.arange(0, 1000, dtype=np.uint32)
    b = np.arange(100, 1100, dtype=np.uint32)  # true Jaccard 900 / 1100 = 0.818
    est = dedup.jaccard(dedup.minhash(a, 256, 1), dedup.minhash(b, 256, 1))
    assert abs(est - 900 / 1100) < 0.08
    assert dedup.jaccard(dedup.minhash(a, 128, 1), dedup.minhash(a[::-1], 128, 1)) == 1.0


def test_empty_set_signature_is_all_max():
    assert (dedup.minhash(np.zeros(0, np.uint32), 8, 1) == 0xFFFFFFFF).all()


def test_shingles_and_ngrams():
    words = [w.encode() for w in "abcdefg"]
    hashes = dedup.word_hashes(words)
    assert len(dedup.shingle_hashes(hashes, 5)) == 3
    assert len(dedup.shingle_hashes(hashes[:2], 5)) == 1  # shorter than k: the whole text is one shingle
    assert dedup.ngram_keys(hashes, 13).shape == (0, 2)
    keys = dedup.ngram_keys(dedup.word_hashes(words + words), 3)  # 12 windows, 7 distinct: a b c … g a b … repeats 5
    assert keys.shape == (7, 2)
    other = dedup.ngram_keys(dedup.word_hashes([b"x", *words[:3], b"y"]), 3)
    assert len({tuple(k) for k in keys} & {tuple(k) for k in other}) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), max_size=30), max_size=8), st.integers(1, 14), st.booleans())
def test_ngram_keys_of_many_texts_equal_each_texts_own(word_ids, n, wide):
    # few distinct words (0-4) make repeated n-grams inside a text and across texts; `wide` spreads the hashes
    texts = [np.array([(w * 0x9E3779B97F4A7C15 if wide else w) % 2**64 for w in ids], dtype=np.uint64)
             for ids in word_ids]
    got = dedup.ngram_keys_many(texts, n)
    assert len(got) == len(texts)
    for text, keys in zip(texts, got, strict=True):
        want = dedup.ngram_keys(text, n)
        assert keys.dtype == np.uint64 and keys.shape == want.shape and np.array_equal(keys, want)
        assert keys.base is None  # its own memory: holding one text's keys must not keep the batch's alive


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 4), max_size=30), st.booleans()), max_size=8),
       st.integers(1, 14), st.integers(0, 3))
def test_ngram_keys_of_filtered_texts_are_their_keys_the_filter_keeps(texts, n, share):
    # a filter that holds every fourth of the texts' first halves from `share` on (and, by its bitmap, maybe
    # others); the marked texts get only the keys it holds
    hashes = [np.array([w * 0x9E3779B97F4A7C15 % 2**64 for w in ids], dtype=np.uint64) for ids, _ in texts]
    marked = [m for _, m in texts]
    firsts = np.array([k for text in hashes for k in dedup.ngram_keys(text, n)[:, 0]], dtype=np.uint64)
    grams = GramFilter(16, [firsts[share::4]])
    got = dedup.ngram_keys_many(hashes, n, grams, marked)
    for text, is_marked, keys in zip(hashes, marked, got, strict=True):
        want = dedup.ngram_keys(text, n)
        if is_marked:
            want = want[grams.holds(want[:, 0])]
        assert keys.shape == want.shape and np.array_equal(keys, want)


MEMO_PIECES = ["a", "É", "12:00", "2024-05-01T10:00:00Z", "pid=42", "May  1", " ", "\n", "x" * 40, "0.5s", "sshd[123]"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(MEMO_PIECES), max_size=6).map("".join), max_size=40),
       st.integers(0, 200), st.integers(0, 80))
def test_the_normalize_memo_equals_normalize_text(texts, budget, longest):
    memo = dedup.NormalizeMemo(budget=budget, longest=longest)
    for text in texts + texts[::-1]:
        assert memo(text) == dedup.normalize_text(text)
        # what it holds is counted, and it holds more than its budget only as a single text larger than that
        assert memo.held == sum(len(k) + len(v) for k, v in memo.known.items())
        assert memo.held <= budget or len(memo.known) == 1
        assert all(len(k) <= longest for k in memo.known)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.lists(st.sampled_from(MEMO_PIECES), max_size=6).map("".join), max_size=12), max_size=8),
       st.integers(0, 200), st.integers(0, 80), st.booleans())
def test_the_normalize_memos_batches_equal_normalize_text(batches, budget, longest, compiled):
    dedup.use_compiled(compiled)
    try:
        memo = dedup.NormalizeMemo(budget=budget, longest=longest)
        for texts in batches + batches[::-1]:
            assert memo.many(texts) == [dedup.normalize_text(t) for t in texts]
            assert memo.held == sum(len(k) + len(v) for k, v in memo.known.items())
            assert memo.held <= budget or len(memo.known) == 1
            assert all(len(k) <= longest for k in memo.known)
    finally:
        dedup.use_compiled(None)


def test_the_normalize_memo_keeps_a_repeated_text_until_its_budget_is_spent():
    memo = dedup.NormalizeMemo(budget=100, longest=50)
    first = memo("at 12:00 pid=7")
    assert memo("at 12:00 pid=7") is first  # the kept result, not a new normalization
    memo("y" * 60)  # longer than `longest`: normalized, not kept
    assert "y" * 60 not in memo.known and memo("at 12:00 pid=7") is first
    memo("z" * 50)  # the kept texts would pass the budget: all dropped, then this one kept
    assert list(memo.known) == ["z" * 50] and memo.held == 100


def test_lsh_params():
    assert dedup.lsh_params(0.8, 128, 0) == (9, 13)
    assert dedup.lsh_params(0.5, 128, 0) == (25, 5)
    assert dedup.lsh_params(0.8, 128, 16) == (16, 8)
    with pytest.raises(ValueError):
        dedup.lsh_params(0.8, 128, 200)


def test_band_keys_change_only_in_the_touched_band():
    sig = dedup.minhash(np.arange(50, dtype=np.uint32), 128, 1)
    other = sig.copy()
    other[30] ^= 1  # row 30 lies in band 2 of 9 × 13
    ka, kb = dedup.band_keys(sig, 9, 13)[0], dedup.band_keys(other, 9, 13)[0]
    assert [i for i in range(9) if ka[i] != kb[i]] == [2]
    assert len(set(ka.tolist())) == 9  # the band index is mixed in


def _sig(values) -> np.ndarray:
    return dedup.minhash(np.array(values, dtype=np.uint32), 128, 1)


def test_band_group_edges_near_forest_and_decontamination():
    base = list(range(1000))
    near = base[:980] + list(range(5000, 5020))  # Jaccard 980 / 1020 ≈ 0.96
    far = list(range(9000, 10000))
    ids = ["t3", "t1", "t2", "e1", "r1", "t4"]
    roles = [0, 0, 0, 1, 2, 0]
    sigs = np.stack([_sig(base), _sig(base), _sig(near), _sig(near), _sig(far), _sig(far)])
    edges = dedup.band_group_edges(ids, roles, sigs, 0.8, near=True)
    kinds = sorted((k, a, b) for k, a, b, _ in edges)
    # t1, t3 (identical), t2 (near): a spanning forest of two edges; t4 and r1 are alike but r1 is a reference.
    assert [e for e in kinds if e[0] == "near"] == [("near", "t1", "t2"), ("near", "t1", "t3")]
    # Every training member close to the eval member e1 (or reference r1) names the smallest one.
    assert [e for e in kinds if e[0] == "decontam_near"] == [
        ("decontam_near", "t1", "e1"), ("decontam_near", "t2", "e1"), ("decontam_near", "t3", "e1"),
        ("decontam_near", "t4", "r1")]
    assert all(k == "decontam_near" for k, *_ in dedup.band_group_edges(ids, roles, sigs, 0.8, near=False))


def test_many_identical_copies_give_a_star_not_all_pairs():
    ids = [f"t{i:03d}" for i in range(300)]
    sigs = np.repeat(_sig(range(100))[None, :], 300, axis=0)
    edges = dedup.band_group_edges(ids, [0] * 300, sigs, 0.8, near=True)
    assert len(edges) == 299 and {a for _, a, _, _ in edges} == {"t000"}


def test_union_find_and_components():
    comps = dedup.connected_components([("b", "c"), ("x", "y"), ("a", "b"), ("y", "z"), ("q", "q")])
    assert comps == [["a", "b", "c"], ["x", "y", "z"]]


def test_survivor_rule_and_cluster_id():
    nodes = {"b": (3, 100), "a": (3, 100), "c": (5, 10), "d": (3, 200)}
    order = sorted(nodes, key=lambda n: dedup.survivor_rank(n, *nodes[n]))
    assert order == ["c", "d", "a", "b"]
    assert dedup.cluster_id(["b", "a"]) == dedup.cluster_id(["a", "b"]) != dedup.cluster_id(["a", "c"])


def test_signer_from_config_and_bench(capsys):
    signer = dedup.Signer.from_config({"threshold": 0.8, "num_perm": 64, "seed": 2, "shingle": 3, "bands": 0})
    assert (signer.num_perm, signer.shingle, signer.bands * signer.rows <= 64) == (64, 3, True)
    assert dedup.bench_signatures(20) > 0
    assert "trajectories/s per core" in capsys.readouterr().out


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(1, 6), st.integers(0, 2**31), st.sampled_from([2, 5, 2**32 - 1]))
def test_unique_rows_equals_numpy_unique_axis0(n, width, seed, high):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, high, size=(n, width), dtype=np.uint64, endpoint=True).astype(np.uint32)
    rows = np.concatenate([rows, rows[rng.integers(0, n, size=n)]])  # repeated rows, in any order
    classes, inverse = dedup.unique_rows(rows)
    want_classes, want_inverse = np.unique(rows, axis=0, return_inverse=True)
    assert np.array_equal(classes, want_classes) and classes.dtype == np.uint32
    assert np.array_equal(inverse, want_inverse.reshape(-1))


def test_signatures_of_many_texts_equal_datasketch_one_by_one():
    rng = np.random.default_rng(5)
    vocab = [f"w{i}" for i in range(400)]
    lengths = [0, 1, 4, 5, 6, 30, 3000, 20_000, 7, 0, 250] + rng.integers(0, 900, 60).tolist()
    texts = [[vocab[i] for i in rng.integers(0, len(vocab), n)] for n in lengths]
    signer = dedup.Signer(shingle=5, num_perm=128, seed=1)
    hashes = [dedup.word_hashes([w.encode() for w in t]) for t in texts]
    got = signer.signatures(hashes)
    assert got.shape == (len(texts), 128)
    for row, h in zip(got, hashes):
        expected = MinHash(num_perm=128, seed=1, scheme="affine32", hashfunc=lambda x: x)
        if len(h):
            expected.update_batch(dedup.shingle_hashes(h, 5).tolist())
        assert np.array_equal(row, expected.hashvalues)


@pytest.mark.parametrize("num_perm", [16, 64, 100, 128, 256])
def test_lsh_params_equal_datasketch_optimum(num_perm):
    from datasketch.lsh import _optimal_param

    for i in range(1, 20):
        threshold = i / 20
        expected = _optimal_param(threshold, num_perm, 0.5, 0.5)
        assert dedup.lsh_params.__wrapped__(threshold, num_perm) == tuple(expected), threshold


def _band_group_edges_by_all_pairs(ids, roles, sigs, threshold, near):
    """`band_group_edges` as its rule reads: every pair of classes in order, Jaccard as the mean of equal values."""
    order = sorted(range(len(ids)), key=ids.__getitem__)
    ids, roles, sigs = [ids[i] for i in order], [roles[i] for i in order], sigs[order]
    classes = sorted({tuple(r) for r in sigs.tolist()})
    member_class = [classes.index(tuple(r)) for r in sigs.tolist()]
    sim = np.array([[np.mean(np.array(a) == np.array(b)) for b in classes] for a in classes], dtype=np.float32)
    members = {c: [i for i, m in enumerate(member_class) if m == c] for c in range(len(classes))}
    edges = []
    if near:
        for side in (0, 1):
            firsts = {}
            for c in sorted(members):
                same = [i for i in members[c] if roles[i] == side]
                if same:
                    firsts[c] = same[0]
                    edges += [("near", ids[same[0]], ids[i], 1.0) for i in same[1:]]
            uf, cls = dedup.UnionFind(), sorted(firsts)
            for x, c1 in enumerate(cls):
                for c2 in cls[x + 1:]:
                    if sim[c1, c2] >= np.float32(threshold) and uf.union(c1, c2):
                        edges.append(("near", *sorted((ids[firsts[c1]], ids[firsts[c2]])), float(sim[c1, c2])))
    refs = {c: min(ids[i] for i in m if roles[i]) for c, m in members.items() if any(roles[i] for i in m)}
    for c, m in sorted(members.items()):
        trains = [i for i in m if roles[i] == 0]
        hits = [(refs[r], float(sim[c, r])) for r in refs if sim[c, r] >= np.float32(threshold)]
        if trains and hits:
            witness, jac = min(hits, key=lambda h: (-h[1], h[0]))
            edges += [("decontam_near", ids[i], witness, jac) for i in trains]
    return edges


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 40), st.integers(1, 6), st.integers(0, 10_000), st.sampled_from([0.5, 0.8, 0.9]), st.booleans())
def test_band_group_edges_equal_the_all_pairs_rule(n, variants, seed, threshold, near):
    # Members drawn from a few base signatures with a few values changed: identical copies, near copies (some
    # close to several others, so the forest has choices) and far ones; every role.
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**32, (variants, 16), dtype=np.uint32)
    sigs = base[rng.integers(0, variants, n)]
    changed = rng.random((n, 16)) < rng.choice([0.0, 0.1, 0.3], n)[:, None]
    sigs = np.where(changed, rng.integers(0, 2**32, (n, 16), dtype=np.uint32), sigs)
    ids = [f"x{i:03d}" for i in rng.permutation(n)]
    roles = rng.choice([0, 0, 0, 1, 2], n).tolist()
    got = dedup.band_group_edges(ids, roles, sigs, threshold, near)
    assert sorted(got) == sorted(_band_group_edges_by_all_pairs(ids, roles, sigs, threshold, near))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 6), max_size=40), max_size=12),
       st.sampled_from([1, 16, 128]))
def test_signatures_of_sets_with_repeats_are_those_of_each_set_alone(sets, num_perm):
    values = np.array([v for s in sets for v in s], dtype=np.uint32)
    offsets = np.cumsum([0] + [len(s) for s in sets])
    got = dedup.minhash_many(values, offsets, num_perm, 7)
    assert got.shape == (len(sets), num_perm)
    for row, s in zip(got, sets):
        assert np.array_equal(row, dedup.minhash(np.array(s, dtype=np.uint32), num_perm, 7))


def test_repeats_within_a_set_are_dropped_and_other_sets_keep_theirs():
    values = np.array([9, 3, 9, 9, 3, 4, 9, 3], dtype=np.uint32)
    distinct, offsets = dedup.distinct_per_set(values, np.array([0, 5, 5, 8]))
    assert offsets.tolist() == [0, 2, 2, 5]
    assert distinct.tolist() == [3, 9, 3, 4, 9]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40), st.integers(1, 20),
       st.sampled_from([dedup._M1, dedup._M2]))
def test_window_hashes_are_the_mixed_polynomial_of_each_window(words, k, multiplier):
    hashes = np.array(words, dtype=np.uint64)
    got = dedup.window_hashes(hashes, k, multiplier)
    k = min(k, len(words))
    for s, value in enumerate(got.tolist()):
        poly = 0
        for w in words[s : s + k]:
            poly = (poly * int(multiplier) + w) % 2**64
        assert value == int(dedup._fmix64(np.array([(poly + k) % 2**64], dtype=np.uint64))[0])
    assert len(got) == len(words) - k + 1


def test_a_window_of_no_words_is_refused():
    with pytest.raises(ValueError, match="at least one word"):
        dedup.window_hashes(np.arange(5, dtype=np.uint64), 0)
