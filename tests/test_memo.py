"""The per-task memos of per-text work: the function's own results, bounded, and freed with their task."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from masking import word_set
from masking.table import default_table
from pipeline.config import resolve
from schemas.stats import Stats
from stages.memo import TextMemo
from stages.sample_rows import build_rows, word_set_memo
from stages.tokenizer import load_tokenizer
from stages.tokenizer.segments import segment_tokenizer
from tests.helpers import make_traj


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="ab\n", max_size=12), max_size=30), st.integers(0, 60), st.integers(0, 12))
def test_a_text_memo_returns_its_functions_results_within_its_budget(texts, budget, longest):
    calls = []

    def fn(text: str):
        calls.append(text)
        return None if text == "b" else text.upper() * 2

    memo = TextMemo(fn, budget, longest)
    for text in texts + texts[::-1]:
        assert memo(text) == fn(text)
        assert memo.held == sum(len(k) + len(v) for k, v in memo.known.items())
        assert memo.held <= budget or len(memo.known) == 1  # over it only as one single text larger than that
        assert all(len(k) <= longest for k in memo.known) and "b" not in memo.known


def test_a_kept_text_is_served_from_the_memo_until_the_budget_is_spent():
    calls = []
    memo = TextMemo(lambda t: calls.append(t) or frozenset(t), budget=20, longest=8, cost=lambda r: 2 * len(r))
    first = memo("abab")  # 4 characters + 2 × 2 = 8
    assert memo("abab") is first and calls == ["abab"]
    memo("c" * 9)  # longer than `longest`: computed, not kept
    memo("c" * 9)
    assert calls == ["abab", "c" * 9, "c" * 9] and memo.held == 8
    memo("xyxy")  # 8 more: 16 in all, still within 20
    memo("pqpq")  # 24 would pass the budget: everything kept so far is dropped first
    assert list(memo.known) == ["pqpq"] and memo.held == 8
    memo("abab")
    assert calls[-1] == "abab"


def test_a_segment_tokenizer_tokenizes_a_recurring_text_once(tok):
    seg = segment_tokenizer(tok)
    text = "drwxr-xr-x 2 root root 4096 Jan  1 00:00 src\n" * 30
    first = seg.encode(text)
    chars = seg.counter.chars
    again = seg.encode(text)
    assert first == again == tok.encode(text)
    assert seg.counter.chars == chars  # the second call did not reach the tokenizer
    again.append(-1)  # each caller gets its own list
    assert seg.encode(text) == first
    seg._kept.longest = len(text) - 1  # a text over the longest kept is tokenized every time
    other = text.replace("src", "lib")
    seg.encode(other)
    seg.encode(other)
    assert seg.counter.chars == chars + 2 * len(other)


def test_a_finished_tasks_memo_is_freed_without_the_garbage_collector(tok):
    """The memo must not sit in a reference cycle with its tokenizer: tasks run one after another in one
    process, and a cycle kept each finished task's memo (tens of MB) until a full collection."""
    gc.disable()
    try:
        seg = segment_tokenizer(tok)
        seg.encode("a text long enough to be kept by the tokenizer's memo: " * 3)
        kept = weakref.ref(seg._kept)
        del seg
        assert kept() is None
    finally:
        gc.enable()


def _rows(rows: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    return [(pool, {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in row.items()})
            for pool, row in rows]


def test_rows_built_with_the_word_set_memo_equal_rows_without_it(tok):
    """Trajectories that share texts (copies of one, as agent logs repeat screens and commands), scored and
    tokenized through one task's memos, the word sets' small enough to be dropped several times, give the
    rows of a run that keeps nothing."""
    cfg = resolve({"pools": {"sft_turns": "all", "ratios": {"cpt": 0.5, "sft": 0.5, "rl": 0.0, "eval": 0.0}}})
    trajs = []
    for i in range(12):
        traj = make_traj(3 + i % 4, seed=i % 5)
        traj.traj_id, traj.split_key = f"t{i}", f"k{i}"
        trajs.append(traj)
    words = word_set_memo(budget=4000, longest=600)
    seg_plain, seg_memo = segment_tokenizer(tok), segment_tokenizer(tok)
    seg_plain._kept.longest = -1  # keeps nothing: every text is tokenized
    for traj in trajs:
        plain = list(build_rows(traj, cfg, seg_plain, default_table(), Stats()))
        memo = list(build_rows(traj, cfg, seg_memo, default_table(), Stats(), words=words))
        assert _rows(memo) == _rows(plain)
    assert words.known and all(words(t) == word_set(t) for t in list(words.known))
    assert seg_memo.counter.chars < seg_plain.counter.chars  # the tokenizer's memo served repeats


_PARAGRAPH_PIECES = ["Intro line.", "## Task", "x = 1", " lead", "\tTab", "é", "\u0301", "数据", "😀", "{", "}", "[1]",
                     "\n", "\n\n", "\n\n\n", " \n\n", ".\n\n", "\r\n\r\n", "end", "'s", "123"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PARAGRAPH_PIECES), max_size=24))
def test_paragraph_by_paragraph_ids_are_the_whole_texts(tok, pieces):
    text = "".join(pieces)
    seg = segment_tokenizer(tok)
    assert seg.encode_paragraphs(text) == tok.encode(text)
    assert seg.encode_paragraphs(text) == tok.encode(text)  # again, now from the memo


def test_a_recurring_paragraph_of_a_system_prompt_is_tokenized_once(tok):
    seg = segment_tokenizer(tok)
    intro = "You simulate the environment an agent acts in; answer each action with what it would print."
    examples = "Example 1\nAction:\nls\nObservation:\nREADME.md  src  tests\n" * 3
    first = seg.encode_recurring(f"{intro}\n\nThe agent's task:\nfix the build\n\n{examples}")
    chars = seg.counter.chars
    text = f"{intro}\n\nThe agent's task:\nwrite the docs\n\n{examples}"
    assert seg.encode_recurring(text) == tok.encode(text) and first
    assert seg.counter.chars - chars == len("The agent's task:\nwrite the docs\n\n")  # only the new paragraph
