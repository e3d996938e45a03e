"""The batched near-dup signature path the dedup map and the signatures benchmark use equals the per-text one
(word hashes of `words_of`, shingles per text, normalization), and its signatures equal datasketch's."""

import re

import numpy as np
from datasketch import MinHash
from hypothesis import given, settings
from hypothesis import strategies as st

from stages import dedup

# letters with case rules (final sigma, dotted I), digits of other scripts, non-ASCII and ASCII whitespace,
# a lone surrogate, and the pieces the normalization patterns look for
PIECES = ["a", "Σ", "σ", "İ", "É", "٣", "\u00a0", "\t", "\n", " ", "  ", "\x1c", "\ud800", "😀", "12:00",
          "2024-05-01T10:00:00Z", "pid=42", "PId: 7", "May  1", "sshd[123]", "/tmp/tmpab12cd", "0x7f3a2b1c",
          "1714567890", "0.5s", "w123", "x" * 60]
TEXTS = st.lists(st.lists(st.sampled_from(PIECES), max_size=30).map("".join), max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXTS, max_size=5), st.booleans())
def test_text_word_hashes_many_equal_word_hashes_of_words_of(groups, normalized):
    if normalized:
        groups = [[dedup.normalize_text(t) for t in texts] for texts in groups]
    got = dedup.text_word_hashes_many(groups, normalized=normalized)
    assert len(got) == len(groups)
    for texts, hashes in zip(groups, got, strict=True):
        want = dedup.word_hashes(dedup.words_of(texts, normalized=normalized))
        assert hashes.dtype == np.uint64 and np.array_equal(hashes, want)
    assert dedup.text_word_hashes_many([]) == []


def test_word_hashes_are_crc32_and_adler32_of_each_word():
    import zlib

    words = [b"a", b"hello", "été".encode(), b"x" * 100]
    got = dedup.text_word_hashes(["A Hello", "ÉTÉ", "x" * 100])
    assert got.tolist() == [(zlib.crc32(w) << 32) | zlib.adler32(w) for w in words]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=8), st.integers(1, 6), st.integers(0, 1000))
def test_shingles_many_equal_shingles_of_each_text(lengths, k, seed):
    rng = np.random.default_rng(seed)
    texts = [rng.integers(0, 2**63, n, dtype=np.uint64) for n in lengths]
    values, offsets = dedup.shingles_many(texts, k)
    want = [dedup.shingle_hashes(h, k) for h in texts]
    assert np.diff(offsets).tolist() == [len(x) for x in want]
    assert np.array_equal(values, np.concatenate(want) if want else np.zeros(0, np.uint32))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES + ["-", ":", ".", "/", "0", "1", "9", "T", "Z", "[", "]"]), max_size=40).map("".join))
def test_ascii_patterns_normalize_like_the_unicode_ones(text):
    got = dedup.normalize_text(text)
    saved = dedup._DIGIT_VOLATILE_ASCII, dedup._TMP_ASCII
    dedup._DIGIT_VOLATILE_ASCII, dedup._TMP_ASCII = dedup._DIGIT_VOLATILE, dedup._TMP  # Unicode patterns only
    try:
        want = dedup.normalize_text(text)
    finally:
        dedup._DIGIT_VOLATILE_ASCII, dedup._TMP_ASCII = saved
    assert got == want
    assert dedup._DIGIT_VOLATILE_ASCII.flags & re.ASCII and not dedup._DIGIT_VOLATILE.flags & re.ASCII


# Numbers next to every character the volatile-digit alternatives continue with, and ones that end them.
DIGIT_PIECES = ["0", "1", "7", "12", "2024", "170000000", "1700000000", "170000000000", "1700000000000", "-", "/",
                ":", "x", "m", ".", "µ", "u", "n", "s", " ", "ms", "sec", "T", "Z", "+", ",", "a", "_", "٣", "e",
                "5/1/24", "2024-05-01", "2024/05/01", "12:00", "0x7f3a2b1c", "1m2.5s", "0.5 seconds", "3µs", "7ns"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(DIGIT_PIECES), max_size=24).map("".join))
def test_the_digit_patterns_lookahead_changes_no_match(text):
    # The lookahead after the leading digit only rejects numbers early; without it the same text comes out.
    gate = r"(?=\d*+[\-/:xm.µun ]|\d{9}(?:\d{3})?(?![\d.]))"
    assert gate in dedup._DIGIT_VOLATILE.pattern
    for pattern in (dedup._DIGIT_VOLATILE, dedup._DIGIT_VOLATILE_ASCII):
        plain = re.compile(pattern.pattern.replace(gate, ""), pattern.flags)
        assert pattern.sub(dedup._digit_token, text) == plain.sub(dedup._digit_token, text)


def test_signatures_of_the_batched_path_equal_datasketch():
    trajs = [[{"action": f"ls dir{i}", "observation": f"2024-05-01T12:00:0{i}Z file{i} ok " * (i + 1)}] for i in range(9)]
    trajs.append([{"action": "", "observation": ""}])  # no words: the all-max signature
    signer = dedup.Signer()
    hashes = dedup.text_word_hashes_many([dedup.turn_texts(t) for t in trajs])
    sigs = signer.signatures(hashes)
    for turns, row in zip(trajs, sigs, strict=True):
        words = dedup.words_of(dedup.turn_texts(turns))
        expected = MinHash(num_perm=128, seed=1, scheme="affine32", hashfunc=lambda x: x)
        if words:
            expected.update_batch(dedup.shingle_hashes(dedup.word_hashes(words), signer.shingle).tolist())
        assert np.array_equal(row, expected.hashvalues)
