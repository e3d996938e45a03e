"""Word sets: what counts as a word, case folding, marks, and the ASCII fast path."""

from __future__ import annotations

import regex
from hypothesis import given
from hypothesis import strategies as st

from masking import words
from masking.words import WORD_PATTERN, word_set


def test_words_are_lowercased_deduplicated_runs():
    assert word_set("Hello, hello HELLO world_1 x-y") == {"hello", "world_1", "x", "y"}


def test_json_and_paths_split_on_punctuation_but_not_underscore():
    text = '{"name": "send_email", "arguments": {"path": "/data/Top Movies.csv"}}'
    assert word_set(text) == {"name", "send_email", "arguments", "path", "data", "top", "movies", "csv"}


def test_punctuation_and_whitespace_only_have_no_words():
    assert word_set("") == frozenset()
    assert word_set('{}[](), ;:\n\t"') == frozenset()


def test_combining_mark_stays_inside_its_word():
    decomposed = "cafe\u0301 au lait"  # e + COMBINING ACUTE ACCENT
    assert word_set(decomposed) == {"cafe\u0301", "au", "lait"}


def test_mark_without_a_base_letter_is_not_a_word():
    assert word_set("a \u0301 b") == {"a", "b"}


def test_devanagari_vowel_signs_do_not_split_words():
    # हिन्दी contains the vowel signs ि and ी (marks) and the virama ्; without marks in words
    # it would fall apart into consonant fragments.
    assert word_set("हिन्दी भाषा") == {"हिन्दी", "भाषा"}


def test_dotted_capital_i_lowercases_to_one_word():
    # "İ".lower() is "i" + COMBINING DOT ABOVE: the mark must not cut the word.
    assert word_set("İstanbul") == {"i\u0307stanbul"}


def test_non_ascii_capital_that_lowers_to_ascii():
    assert word_set("\u212a") == {"k"}  # KELVIN SIGN


def test_unicode_digits_and_scripts_are_word_characters():
    assert word_set("٣٤ apples²") == {"٣٤", "apples²"}
    # CJK has no spaces: a run of ideographs is one word.
    assert word_set("日本語のテキスト。次") == {"日本語のテキスト", "次"}


def test_word_set_is_a_frozenset():
    assert isinstance(word_set("a b"), frozenset)


@given(st.text())
def test_matches_the_documented_pattern_on_any_text(text):
    assert word_set(text) == frozenset(regex.findall(WORD_PATTERN, text.lower()))


@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_fast_path_agrees_with_the_unicode_pattern(text):
    assert word_set(text) == frozenset(regex.findall(WORD_PATTERN, text.lower()))
    assert all(word and word in text.lower() for word in word_set(text))


@given(st.text(alphabet=st.sampled_from(["a", "Z", "_", "7", " ", "-", "\n", "━", "†", "×", "\u0301", "é", "İ",
                                        "\u212a", "٣", "²", "\ud800"])))
def test_mostly_ascii_texts_agree_with_the_unicode_pattern(text):
    # non-ASCII separators take the ASCII path; a non-ASCII letter, digit or mark (even after a separator) does not
    assert word_set(text) == frozenset(regex.findall(WORD_PATTERN, text.lower()))


def test_non_ascii_separators_split_words():
    assert word_set("━━ Build━passed † 3×4 ━") == {"build", "passed", "3", "4"}
    assert word_set("caf\u00e9 ━ x") == {"caf\u00e9", "x"}


# ASCII separators and whitespace of every kind next to non-ASCII letters, digits, marks, separators and a lone
# surrogate: the pieces a text with few non-ASCII characters is cut into before the pattern runs on them
_MIXED = st.sampled_from(["a", "Q", "_", "9", " ", "-", ".", "\t", "\n", "\x1c", "\x85", "\xa0", "\u3000", "\u2028",
                          "é", "\u0301", "İ", "\u212a", "٣", "²", "日本", "ж", "━", "†", "\ud800", "\U0001d7d8"])


@given(st.lists(_MIXED).map("".join), st.integers(0, 200))
def test_texts_with_few_non_ascii_characters_agree_with_the_unicode_pattern(text, filler):
    padded = "ab-c " * filler + text  # enough ASCII that the text is cut at its separators first
    assert word_set(padded) == frozenset(regex.findall(WORD_PATTERN, padded.lower()))


def test_which_texts_are_cut_at_ascii_separators_first(monkeypatch):
    cut = []
    original = words._piecewise
    monkeypatch.setattr(words, "_piecewise", lambda pieces: cut.append(pieces) or original(pieces))
    assert word_set("the café served 3 crêpes, " * 20) == {"the", "café", "served", "3", "crêpes"}
    assert len(cut) == 1
    assert word_set("привет мир, данные") == {"привет", "мир", "данные"}  # mostly non-ASCII: the pattern over all
    assert len(cut) == 1
