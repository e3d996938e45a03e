"""The README's recipes 1–3, run as they stand in README.md on a tiny Qwen3 and synthetic shards.

Each recipe is the first ``python`` block after its heading. Only the one settings line of a
recipe (``MODEL, … = …``) is replaced with test values; every other line runs verbatim, so the
README cannot drift from what is tested.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("datasets")

from tests.helpers import write_synthetic_shards, write_tiny_qwen  # noqa: E402
from training.collate import pack_samples, pad_samples  # noqa: E402
from training.dataset import ShardDataset  # noqa: E402
from training.loss import weighted_loss_sum  # noqa: E402
from training.models import load_hf_causal_lm  # noqa: E402
from training.shards import resolve_shard_files  # noqa: E402
from training.step import accumulate_gradients  # noqa: E402

README = Path(__file__).resolve().parent.parent / "README.md"


def recipe(number: int) -> str:
    """The code of README Recipe `number`."""
    text = README.read_text(encoding="utf-8")
    heading = re.search(rf"^### Recipe {number}:.*$", text, flags=re.MULTILINE)
    assert heading, f"README has no Recipe {number}"
    block = re.search(r"^```python\n(.*?)^```", text[heading.end() :], flags=re.MULTILINE | re.DOTALL)
    assert block, f"Recipe {number} has no python block"
    return block.group(1)


def with_settings(code: str, names: str, values: str) -> str:
    """`code` with its one ``names = …`` settings line replaced by ``names = values``."""
    lines = code.splitlines()
    matches = [i for i, line in enumerate(lines) if line.startswith(f"{names} = ")]
    assert len(matches) == 1, f"expected one settings line '{names} = …'"
    lines[matches[0]] = f"{names} = {values}"
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder laid out as the recipes expect: ``out/shards/cpt``, ``out/shards/sft`` and a model."""
    root = tmp_path_factory.mktemp("recipes")
    # every fifth cpt sample is long (~370 tokens), over Recipe 1's test row of 256
    write_synthetic_shards(str(root / "out"), pool="cpt", rows_per_file=(24, 24), long_every=5, long_turns=30)
    write_synthetic_shards(str(root / "out"), pool="sft", rows_per_file=(20, 20), seed=1)
    write_tiny_qwen(str(root / "qwen"))
    return root


@pytest.fixture
def in_workspace(workspace, monkeypatch):
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(workspace / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return workspace


def _fixed_batch_loss(model, shards):
    samples = [s for _, s in zip(range(8), ShardDataset(shards, shuffle=False)) if len(s["input_ids"]) <= 256]
    batch = pack_samples(samples, 512)
    with torch.no_grad():
        logits = model(batch.input_ids, position_ids=batch.position_ids, document_ids=batch.document_ids)
        return float(weighted_loss_sum(logits, batch.labels, batch.label_weights) / (batch.label_weights > 0).sum())


def test_recipe_1_plain_loop_trains_the_hf_model(in_workspace):
    model_dir = str(in_workspace / "qwen")
    code = with_settings(recipe(1), "MODEL, SHARDS, ROW, STEPS, LR", f'{model_dir!r}, "out/shards/cpt", 256, 30, 1e-2')
    namespace: dict = {}
    exec(compile(code, "README.md Recipe 1", "exec"), namespace)
    assert namespace["step"] == 29
    assert namespace["fit"].counts.truncated_left >= 1  # long samples passed through the policy
    state = namespace["dataset"].state_dict()
    assert (state["epoch"], state["index"]) != (0, 0), "record_consumed moved the dataset state"
    before = _fixed_batch_loss(load_hf_causal_lm(model_dir), "out/shards/cpt")
    after = _fixed_batch_loss(namespace["model"].eval(), "out/shards/cpt")
    assert after < 0.8 * before, (before, after)


def test_recipe_3_loads_the_sft_shards(in_workspace):
    namespace: dict = {}
    exec(compile(recipe(3), "README.md Recipe 3", "exec"), namespace)
    train = namespace["train"]
    files = resolve_shard_files(["out/shards/sft"])
    assert len(train) == sum(pq.read_metadata(f).num_rows == 20 and 20 for f in files) == 40
    assert train.column_names == ["input_ids", "loss_weight"]
    first = pq.read_table(files[0], columns=["input_ids", "loss_weight"]).slice(0, 1).to_pylist()[0]
    assert train[0]["input_ids"] == first["input_ids"]
    assert train[0]["loss_weight"] == pytest.approx(first["loss_weight"])


def test_recipe_2_trainer_loss_equals_lwm_train_on_the_same_micro_batches(in_workspace):
    model_dir = str(in_workspace / "qwen")
    namespace: dict = {}
    exec(compile(recipe(3), "README.md Recipe 3", "exec"), namespace)
    code = with_settings(recipe(2), "MODEL, STEPS", f"{model_dir!r}, 1")
    body, last = code.rstrip().rsplit("\n", 1)
    assert last == "trainer.train()"
    exec(compile(body, "README.md Recipe 2", "exec"), namespace)

    trainer, model = namespace["trainer"], namespace["model"]
    seen: list[dict] = []
    original = trainer.compute_loss

    def recording(model, inputs, return_outputs=False, num_items_in_batch=None):
        copy = {k: v.detach().clone() for k, v in inputs.items()}
        loss = original(model, inputs, return_outputs, num_items_in_batch)
        seen.append({**copy, "loss": float(loss.detach()), "count": int(num_items_in_batch)})
        return loss

    trainer.compute_loss = recording
    grads: dict[str, torch.Tensor] = {}
    for name, parameter in model.named_parameters():
        parameter.register_post_accumulate_grad_hook(lambda p, name=name: grads.__setitem__(name, p.grad.clone()))
    exec(compile(last, "README.md Recipe 2", "exec"), namespace)

    assert len(seen) == 4  # gradient_accumulation_steps micro-batches of one optimizer step
    batches = []
    for micro in seen:
        samples = []
        for row in range(micro["input_ids"].shape[0]):
            n = int(micro["attention_mask"][row].sum())
            samples.append({"input_ids": micro["input_ids"][row, :n], "loss_weight": micro["loss_weight"][row, :n]})
        batches.append(pad_samples(samples))
    lwm_model = load_hf_causal_lm(model_dir)
    result = accumulate_gradients(lwm_model, batches, "tokens")
    assert result.denominator == seen[0]["count"] == sum(int((b.label_weights > 0).sum()) for b in batches)
    trainer_loss = sum(m["loss"] for m in seen)
    assert trainer_loss > 0
    assert trainer_loss == pytest.approx(result.loss, rel=1e-5)
    for name, parameter in lwm_model.model.named_parameters():
        torch.testing.assert_close(grads[name], parameter.grad, rtol=1e-4, atol=1e-7, msg=name)
