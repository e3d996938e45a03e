"""Text a model writes (a simulation instruction, an sft reasoning) enters the trajectories and shards with secrets
replaced, as input text does: a model may repeat a key it saw or make one up."""

from __future__ import annotations

import pyarrow.parquet as pq

from pipeline.run import run_pipeline
from stages.llm.instructions import SYSTEM_PROMPT as INSTRUCTION_SYSTEM
from tests.helpers import Answer, JudgeServer, Script, llm_config, write_llm_corpus

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub token's shape
KEY = "AKIA" + "IOSFODNN7EXAMPLE"


def leaky(script: Script):
    """The scripted model, with a token in every instruction and a key in every candidate's reasoning."""

    def answer(body, n):
        reply = script(body, n)
        if not isinstance(reply, Answer):
            return reply
        system = body["messages"][0]["content"]
        if system == INSTRUCTION_SYSTEM:
            reply.text = reply.text.replace("</simulation_instruction>", f" Its token {TOKEN} is revoked.\n"
                                            "</simulation_instruction>")
        elif "<predicted_observation>" in reply.text:
            reply.text = reply.text.replace("one line.", f"one line, signed with {KEY}.")
        return reply

    return answer


def test_model_text_reaches_the_outputs_with_its_secrets_replaced(tmp_path):
    corpus = write_llm_corpus(tmp_path / "in.jsonl", ["ierr", "good"])
    out = tmp_path / "out"
    with JudgeServer(leaky(Script())) as server:
        cfg = llm_config([corpus], out, server.url, "sft", stages=["instructions", "sft_reasoning"])
        manifest = run_pipeline(cfg, echo=lambda m: None)
    written = [p for p in out.rglob("*.parquet") if "raw" not in p.relative_to(out).parts]
    text = "".join(str(pq.read_table(p).to_pylist()) for p in written)
    assert "<SECRET:github_token>" in text and "<SECRET:aws_access_key>" in text  # the model's text is there
    assert TOKEN not in text and KEY not in text
    shards = [r for p in (out / "shards" / "sft").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert shards  # the samples were made, from the redacted text
    stats = manifest["llm"]["stages"]
    assert stats["instructions"]["counts"]["redacted"] == {"github_token": 2}
    assert stats["sft_reasoning"]["counts"]["redacted"] == {"aws_access_key": 2}
