"""Figure 8: datatrove's tokenizer step against lwmkit's sample stage on the same trajectories.

datatrove (``DocumentTokenizer``, the `tokenizers` engine with the converted default vocabulary
from a local tokenizer.json) tokenizes the rendered ChatML text of every cpt sample into its token
files; lwmkit's sample stage renders, classifies, tokenizes and writes the weighted samples of the
same trajectories. The figure is datatrove seconds / lwmkit seconds (above 1: lwmkit is faster).
``make bench`` installs datatrove into the environment for this figure only.
"""

from __future__ import annotations

import contextlib
import glob
import io
import logging
import os
import shutil

from bench.common import Figure, not_measured, timed
from bench.tokenizer_floor import chatml_texts, read_trajectories


def _datatrove_step(tokenizer_json: str, out: str):
    """One DocumentTokenizer, warmed up so its (cached) tokenizer load is not timed."""
    from datatrove.data import Document
    from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer

    step = DocumentTokenizer(output_folder=out, tokenizer_name_or_path=tokenizer_json, eos_token=None,
                             shuffle_documents=False, batch_size=1000)
    _drain(step, [Document(text="warm up", id="0")])
    return step


def _drain(step, docs) -> None:
    with contextlib.redirect_stderr(io.StringIO()):
        for _ in step.run(iter(docs)) or ():
            pass


def _datatrove_seconds(step, texts: list[str]) -> float:
    from datatrove.data import Document

    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
    seconds, _ = timed(lambda: _drain(step, docs))
    return seconds


def _lwmkit_seconds(run_dir: str, cfg: dict, out: str) -> float:
    """The sample stage over the run's trajectories parts, as the pipeline runs it, into a fresh folder."""
    from pipeline.sample_task import run_sample_task
    from pipeline.samples_stage import bucket_counts
    from schemas.stats import Stats

    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "trajectories"))
    parts = sorted(glob.glob(os.path.join(run_dir, "trajectories", "part-*.parquet")))
    for p in parts:
        shutil.copy(p, os.path.join(out, "trajectories", os.path.basename(p)))
    stats = Stats({"trajectories.kept": len(read_trajectories(run_dir)), "turns.kept": 1, "chars.kept": 1})
    buckets = bucket_counts(cfg, stats)
    tasks = [{"task_id": os.path.basename(p)[5:-8], "out": out, "cfg": cfg, "buckets": buckets, "drop": [],
              "spec_hash": "bench"} for p in parts]
    seconds, _ = timed(lambda: [run_sample_task(t) for t in tasks])
    return seconds


def run(run_dir: str, cfg: dict, work: str, runs: int) -> Figure:
    try:
        import datatrove
    except ImportError:
        return not_measured("8. peer: datatrove tokenizer step / lwmkit sample stage", None, True,
                            "datatrove is not installed (make bench installs it)")
    import datatrove.pipeline.tokens.tokenizer  # noqa: F401  (it installs its log handler on import)

    from stages.tokenizer import default_vocabulary
    from stages.tokenizer.convert import cached_tokenizer_path, convert_rank_vocabulary

    logging.getLogger("datatrove").setLevel(logging.ERROR)
    with contextlib.suppress(ImportError):
        from loguru import logger

        logger.remove()
    vocab = default_vocabulary()
    convert_rank_vocabulary(vocab)
    tokenizer_json = str(cached_tokenizer_path(vocab))
    texts = chatml_texts(read_trajectories(run_dir))
    cfg = {**cfg, "pools": {**cfg["pools"], "ratios": {"cpt": 1.0, "sft": 0.0, "rl": 0.0, "eval": 0.0}}}
    step = _datatrove_step(tokenizer_json, os.path.join(work, "peer_datatrove"))
    _lwmkit_seconds(run_dir, cfg, os.path.join(work, "peer_lwmkit"))  # warm this process's caches too
    ratios = []
    for _ in range(runs):
        peer = _datatrove_seconds(step, texts)
        ours = _lwmkit_seconds(run_dir, cfg, os.path.join(work, "peer_lwmkit"))
        ratios.append(peer / ours)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    return Figure("8. peer: datatrove tokenizer step / lwmkit sample stage (time)", ratios, None, True,
                  detail=f"{len(texts)} cpt texts, {mb:.2f} MB; datatrove on the tokenizers engine (its only "
                         "engine), lwmkit on tiktoken; lwmkit also classifies, weights and writes Parquet")
