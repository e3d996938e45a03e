"""Tokenization: tokenizers behind one interface, and weights projected from text onto tokens.

- `stages.tokenizer.engines`: the `Tokenizer` interface, its two engines and `load_tokenizer`;
- `stages.tokenizer.vocab`: rank vocabularies and the built-in default;
- `stages.tokenizer.convert`: a rank vocabulary as a Hugging Face ``tokenizer.json`` (disk-cached);
- `stages.tokenizer.segments`: segment-wise tokenization with per-span weights (SPEC §7–8).
"""

from stages.tokenizer.engines import ENGINES, Tokenizer, load_tokenizer
from stages.tokenizer.vocab import DEFAULT_NAME, RankVocabulary, default_vocabulary

__all__ = ["DEFAULT_NAME", "ENGINES", "RankVocabulary", "Tokenizer", "default_vocabulary", "load_tokenizer"]
