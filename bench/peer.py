"""datatrove's tokenizer step on the same corpus: its seconds against `lwm run`'s.

datatrove's ``DocumentTokenizer`` (the `tokenizers` engine, its only one, with lwmkit's default
vocabulary converted to a local tokenizer.json) tokenizes the rendered ChatML text of every
trajectory of the corpus (one document each, already in memory) and writes its token files;
`lwm run` reads, validates, filters, redacts, renders every all-turn sample, classifies, weights and
writes shards of the same trajectories. The step is built and warmed up once, so its tokenizer
load is not timed. ``make bench`` installs datatrove for this figure only.
"""

from __future__ import annotations

import contextlib
import io
import logging

from bench.common import timed


def available() -> bool:
    try:
        import datatrove  # noqa: F401
    except ImportError:
        return False
    return True


def _quiet() -> None:
    import datatrove.pipeline.tokens.tokenizer  # noqa: F401  (it installs its log handler on import)

    logging.getLogger("datatrove").setLevel(logging.ERROR)
    with contextlib.suppress(ImportError):
        from loguru import logger

        logger.remove()


def _drain(step, docs) -> None:
    with contextlib.redirect_stderr(io.StringIO()):
        for _ in step.run(iter(docs)) or ():
            pass


def datatrove_step(work: str):
    """A warmed-up DocumentTokenizer writing under `work`."""
    from datatrove.data import Document
    from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer

    from stages.tokenizer import default_vocabulary
    from stages.tokenizer.convert import cached_tokenizer_path, convert_rank_vocabulary

    _quiet()
    vocab = default_vocabulary()
    convert_rank_vocabulary(vocab)
    step = DocumentTokenizer(output_folder=work, tokenizer_name_or_path=str(cached_tokenizer_path(vocab)),
                             eos_token=None, shuffle_documents=False, batch_size=1000)
    _drain(step, [Document(text="warm up", id="0")])
    return step


def datatrove_seconds(step, texts: list[str]) -> float:
    """Seconds of one pass of the step over `texts` (documents built before the clock starts)."""
    from datatrove.data import Document

    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    seconds, _ = timed(lambda: _drain(step, docs))
    return seconds
