"""``lwm export verl`` / ``lwm export trl`` on a real-data run, read back by the frameworks' own loaders.

verl 0.9.1 and TRL 1.16.0 install on CPU here (the ``rl-test`` extra; verl without its GPU
dependencies). Their tests are skipped when the package is absent. What they establish:

- verl: ``verl.utils.dataset.rl_dataset.RLHFDataset`` reads ``train.parquet`` (its prompt-length
  filter included) and returns our chat messages as ``raw_prompt``; ``verl.trainer.ppo.reward.
  get_custom_reward_fn`` loads ``stages/reward/frameworks.py:compute_score`` by path, and the loaded
  function scores a real row through a loopback judge with verl's keyword call;
- TRL: ``datasets`` reads ``train.parquet``, TRL sees a conversational prompt and its chat-template
  path renders exactly the prompt tokens the rl shard stores; ``GRPOTrainer._calculate_rewards``
  calls `make_trl_reward` with the exported columns;
- verl again, end to end: its ``NaiveRewardManager`` decodes a rollout's token ids and scores them
  through the loaded ``compute_score``; the README's verl overrides compose with verl's own
  ``ppo_trainer`` config (Hydra) and load the reward.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages.render import target_reply
from stages.reward.core import split_prompt
from tests.helpers import Answer, JudgeServer, lwm_in_process, scores_answer

ROOT = Path(__file__).resolve().parent.parent
RL_ONLY = "[pools]\nratios = {cpt = 0.0, sft = 0.0, rl = 1.0, eval = 0.0}\n"
FOLDERS = ["mini-swe-agent", "aitw-aitz", "opencua-raw", "openai-messages", "swe-agent", "webvoyager"]
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def lwm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`lwm ARGS` in this process (the README example below runs the installed command as its own)."""
    proc = lwm_in_process(*args)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def run(shared_data, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("rl")
    (base / "rl.toml").write_text(RL_ONLY)
    args = ["run", "--executor", "local", "--progress", "off", "--config", str(base / "rl.toml"), "-o", str(base / "run")]
    for folder in FOLDERS:
        args += ["-i", str(shared_data / folder)]
    lwm(*args)
    return base / "run"


@pytest.fixture(scope="module")
def shard_rows(run) -> dict[str, dict]:
    rows = [r for p in sorted((run / "shards" / "rl").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["sample_id"]: r for r in rows}


@pytest.fixture(scope="module")
def verl_dir(run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("verl")
    lwm("export", "verl", str(run), str(out))
    return out


@pytest.fixture(scope="module")
def trl_dir(run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trl")
    lwm("export", "trl", str(run), str(out))
    return out


@pytest.fixture(scope="module")
def hf_tokenizer():
    """The built-in Qwen vocabulary as a transformers tokenizer with a ChatML template (no download)."""
    transformers = pytest.importorskip("transformers")
    from stages.tokenizer import default_vocabulary
    from stages.tokenizer.convert import convert_rank_vocabulary

    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=convert_rank_vocabulary(default_vocabulary()), chat_template=CHATML,
        eos_token="<|im_end|>", pad_token="<|endoftext|>",
    )


# ------------------------------------------------------------------------------- the rl shards

def test_rl_shards_record_each_samples_verifier_kind(shard_rows):
    kinds = {}
    for r in shard_rows.values():
        kinds.setdefault(r["domain"], set()).add(r["verifier"])
    # one rl sample per trajectory: 10 mcp, 4 swe, 1 each of terminal, android, os, web (see test_shared_data_run)
    assert sorted((d, sum(r["domain"] == d for r in shard_rows.values())) for d in kinds) == [
        ("android", 1), ("mcp", 10), ("os", 1), ("swe", 4), ("terminal", 1), ("web", 1)]
    assert kinds["android"] == kinds["os"] == kinds["web"] == {"ui_elements"}
    # which turn is the rl target depends on the trajectory id (and so on where the data lies); an empty
    # reference has nothing a rule can check
    for r in shard_rows.values():
        if r["domain"] in ("terminal", "swe"):
            assert r["verifier"] == ("terminal" if r["reference"].strip() else "none"), r["sample_id"]
    assert "terminal" in kinds["terminal"] | kinds["swe"]
    assert kinds["mcp"] == {"json_fields", "none"}


# ------------------------------------------------------------------------------------------ verl

def test_verl_columns_follow_the_documented_schema(verl_dir, shard_rows):
    table = pq.read_table(verl_dir / "train.parquet")
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    rows = table.to_pylist()
    assert len(rows) == len(shard_rows) == 18
    assert [r["extra_info"]["index"] for r in rows] == list(range(18))
    for r in rows:
        shard = shard_rows[r["extra_info"]["sample_id"]]
        assert r["data_source"] == f"lwmkit/{shard['domain']}" and r["ability"] == "world_model"
        assert r["prompt"] == shard["messages"] and r["prompt"][0]["role"] == "system"
        assert r["reward_model"] == {"style": "rule", "ground_truth": shard["reference"]}
        extra = r["extra_info"]
        assert extra["verifier"] == shard["verifier"] and extra["turn_idx"] == shard["turn_idx"]
        assert len(extra["history"]) == shard["turn_idx"] - 1
        assert extra["current_prompt"].startswith(f"### Turn {shard['turn_idx']}\n")


def test_val_fraction_writes_both_splits_by_task(run, tmp_path):
    lwm("export", "verl", str(run), str(tmp_path), "--val-fraction", "0.3")
    train = pq.read_table(tmp_path / "train.parquet").to_pylist()
    val = pq.read_table(tmp_path / "val.parquet").to_pylist()
    assert len(train) + len(val) == 18 and val and train
    assert {r["extra_info"]["split"] for r in val} == {"val"}
    ids = {r["extra_info"]["sample_id"] for r in train} | {r["extra_info"]["sample_id"] for r in val}
    assert len(ids) == 18
    tasks = {}
    for path in (run / "trajectories").glob("*.parquet"):
        tasks.update(zip(*pq.read_table(path, columns=["traj_id", "split_key"]).to_pydict().values()))
    train_tasks = {tasks[r["extra_info"]["traj_id"]] for r in train}
    val_tasks = {tasks[r["extra_info"]["traj_id"]] for r in val}
    assert train_tasks and val_tasks and not train_tasks & val_tasks


@pytest.mark.parametrize(("first", "second"), [("verl", "verl"), ("trl", "trl"), ("verl", "trl")])
def test_exporting_again_without_a_val_split_removes_the_old_val_file(run, tmp_path, first, second):
    """The old val.parquet's rows are in the new train.parquet: left there, it would validate on training data."""
    lwm("export", first, str(run), str(tmp_path), "--val-fraction", "0.3")
    assert pq.read_table(tmp_path / "val.parquet").num_rows > 0
    proc = lwm("export", second, str(run), str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.parquet"]
    assert pq.read_table(tmp_path / "train.parquet").num_rows == 18
    removed = [line for line in proc.stderr.splitlines() if line.startswith("removed ")]
    assert removed == [f"removed the val.parquet an earlier export left in {tmp_path}: its rows are in this "
                       "train.parquet (--val-fraction writes a new one)"]
    proc = lwm("export", second, str(run), str(tmp_path))  # nothing left to remove: nothing said
    assert "removed" not in proc.stderr and sorted(p.name for p in tmp_path.iterdir()) == ["train.parquet"]


def test_repeats_of_one_task_land_on_one_side_of_the_split(tmp_path):
    """Three trajectories of each of eight tasks (repeated attempts share a ``split_key``), one rl sample each:
    the split is by task, so no val prompt asks for a task that train teaches."""
    import json
    import random

    rng = random.Random(7)
    words = [f"w{i}" for i in range(5000)]
    lines = []
    for task in range(8):
        for attempt in range(3):
            turns = [{"action": json.dumps([{"keystrokes": f"{' '.join(rng.sample(words, 6))}\\n"}]),
                      "observation": " ".join(rng.sample(words, 40))} for _ in range(2)]
            lines.append(json.dumps({"traj_id": f"t{task}-{attempt}", "domain": "terminal", "split_key": f"task-{task}",
                                     "system": {"task_description": f"task {task}: " + " ".join(rng.sample(words, 12))},
                                     "turns": turns}))
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "rl.toml").write_text(RL_ONLY + "[dedup]\nexact = false\nnear = false\n")
    lwm("run", "--executor", "local", "--progress", "off", "--config", str(tmp_path / "rl.toml"),
        "-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "run"))
    lwm("export", "trl", str(tmp_path / "run"), str(tmp_path / "out"), "--val-fraction", "0.5")
    sides = {s: pq.read_table(tmp_path / "out" / f"{s}.parquet").column("traj_id").to_pylist() for s in ("train", "val")}
    assert sum(map(len, sides.values())) == 24
    tasks = {s: {t.split("-")[0] for t in ids} for s, ids in sides.items()}
    assert tasks["train"] and tasks["val"] and not tasks["train"] & tasks["val"], tasks


def test_a_split_left_without_rows_is_a_warning(run, tmp_path):
    """18 rl samples and --val-fraction 0.9999: the hash of every task may fall in val, leaving train.parquet
    empty; the export says so instead of only counting 0 rows."""
    proc = lwm("export", "verl", str(run), str(tmp_path), "--val-fraction", "0.9999")
    train = pq.read_table(tmp_path / "train.parquet").num_rows
    warned = [line for line in proc.stderr.splitlines() if line.startswith("warning: train.parquet has no rows")]
    assert (train == 0) == bool(warned), proc.stderr
    assert train == 0  # these tasks: every hash below 0.9999
    proc = lwm("export", "verl", str(run), str(tmp_path / "b"), "--val-fraction", "0.3")
    assert "warning" not in proc.stderr


def test_verl_rlhf_dataset_reads_the_export(verl_dir, shard_rows, hf_tokenizer, tmp_path):
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    limit = 4096
    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": limit, "filter_overlong_prompts": True,
                            "filter_overlong_prompts_workers": 1, "cache_dir": str(tmp_path / "cache")})
    ds = RLHFDataset([str(verl_dir / "train.parquet")], hf_tokenizer, cfg)
    # verl's own length filter agrees with the prompt token counts the shards store
    assert len(ds) == sum(len(r["prompt_ids"]) <= limit for r in shard_rows.values())
    assert 0 < len(ds) < len(shard_rows)
    for i in range(len(ds)):
        item = ds[i]
        shard = shard_rows[item["extra_info"]["sample_id"]]
        assert item["raw_prompt"] == shard["messages"]
        assert item["reward_model"]["ground_truth"] == shard["reference"]
        assert item["data_source"] == f"lwmkit/{shard['domain']}"
    batch = collate_fn([ds[0], ds[1]])
    assert len(batch["raw_prompt"]) == 2 and batch["dummy_tensor"].shape[0] == 2


def test_verl_loads_compute_score_by_path_and_scores_a_real_row(verl_dir):
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    rows = pq.read_table(verl_dir / "train.parquet").to_pylist()
    row = next(r for r in rows if r["extra_info"]["verifier"] == "ui_elements")
    ref = row["reward_model"]["ground_truth"]

    def judge(body, n):
        user = body["messages"][1]["content"]
        assert row["extra_info"]["current_prompt"] in user
        return Answer(scores_answer(4) if "<predicted_observation>" not in user else "no scores")

    with JudgeServer(judge) as server:
        cfg = OmegaConf.create({"reward": {"custom_reward_function": {
            "path": str(ROOT / "stages" / "reward" / "frameworks.py"), "name": "compute_score",
            "reward_kwargs": {"judge_url": server.url, "judge_model": "judge", "judge_backoff_s": 0.01}}}})
        fn = get_custom_reward_fn(cfg)
        # verl's reward manager adds num_turns and rollout_reward_scores to extra_info
        extra = {**row["extra_info"], "num_turns": 2, "rollout_reward_scores": {}}
        good = fn(data_source=row["data_source"], solution_str=target_reply(ref, "The menu opens.\n"),
                  ground_truth=ref, extra_info=extra)
        assert good == {"score": 0.9 * 20 + 0.1 * 25, "format_ok": 1.0, "rule": 1.0, "rubric": 20.0, "judge_failed": 0.0}
        untagged = fn(data_source=row["data_source"], solution_str=ref, ground_truth=ref, extra_info=extra)
        assert untagged["score"] == 0.0 and untagged["format_ok"] == 0.0
        wrong = fn(data_source=row["data_source"], solution_str=target_reply("[ 0] | Button | name=\"OK\"", ""),
                   ground_truth=ref, extra_info=extra)
        assert wrong["rule"] == 0.0 and wrong["score"] == pytest.approx(18.0)
        n_before = len(server.requests)
    # the judge down: a failed judge gives 0 (the client retries, then gives up)
    with JudgeServer(lambda body, n: Answer("I refuse to grade.")) as server:
        cfg.reward.custom_reward_function.reward_kwargs.judge_url = server.url
        fn = get_custom_reward_fn(cfg)
        failed = fn(data_source=row["data_source"], solution_str=target_reply(ref, ""), ground_truth=ref, extra_info=extra)
        assert failed["score"] == 0.0 and failed["judge_failed"] == 1.0 and failed["rule"] == 1.0
        assert len(server.requests) == 2  # the answer and one re-ask
    assert n_before == 2


# ------------------------------------------------------------------------------------------- TRL

def test_trl_columns(trl_dir, shard_rows):
    table = pq.read_table(trl_dir / "train.parquet")
    assert table.column_names == ["prompt", "reference", "domain", "verifier", "sample_id", "traj_id", "turn_idx",
                                  "total_turns"]
    for r in table.to_pylist():
        shard = shard_rows[r["sample_id"]]
        assert r["prompt"] == shard["messages"] and r["reference"] == shard["reference"]
        assert r["verifier"] == shard["verifier"] and r["domain"] == shard["domain"]


def test_trl_reads_a_conversational_prompt_that_renders_to_the_stored_prompt_ids(trl_dir, shard_rows, hf_tokenizer):
    pytest.importorskip("trl")
    import datasets
    from trl.data_utils import is_conversational, maybe_apply_chat_template

    ds = datasets.load_dataset("parquet", data_files=str(trl_dir / "train.parquet"))["train"]
    assert len(ds) == 18
    for row in ds.select(range(4)):
        assert is_conversational(row)
        text = maybe_apply_chat_template(row, hf_tokenizer)["prompt"]
        ids = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
        assert ids == shard_rows[row["sample_id"]]["prompt_ids"]


def test_trl_reward_through_grpo_trainers_own_call(trl_dir):
    pytest.importorskip("trl")
    import datasets
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    from stages.reward.frameworks import make_trl_reward

    ds = datasets.load_dataset("parquet", data_files=str(trl_dir / "train.parquet"))["train"]
    rows = [r for r in ds if r["verifier"] == "terminal"][:2] + [r for r in ds if r["verifier"] == "none"][:1]
    # a tiny word-level tokenizer and model: enough for the trainer to be built, nothing is generated
    vocab = {"[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2, "<pad>": 3}
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tiny_tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=CHATML, eos_token="<|im_end|>",
                                                    pad_token="<pad>", unk_token="[UNK]")
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=8, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1))
    graded = []

    def judge(body, n):
        graded.append(body["messages"][1]["content"])
        return Answer(scores_answer(3))

    with JudgeServer(judge) as server:
        reward = make_trl_reward(judge_url=server.url, judge_model="judge", judge_backoff_s=0.01)
        args = GRPOConfig(output_dir=str(trl_dir / "grpo"), per_device_train_batch_size=3, num_generations=3,
                          max_completion_length=4, report_to=[], use_cpu=True, max_steps=1, save_strategy="no")
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args,
                              train_dataset=datasets.Dataset.from_list(rows), processing_class=tiny_tok)
        completions = [[{"role": "assistant", "content": target_reply(r["reference"], "Thinking.\n")}] for r in rows]
        completions[1] = [{"role": "assistant", "content": "no tags at all"}]
        rewards = trainer._calculate_rewards(rows, [r["prompt"] for r in rows], completions, [[1, 2]] * 3)
        assert rewards.shape == (3, 1)
        # exact prediction with a verifier: 0.9·15 + 0.1·25; format failure: 0; no verifier: the rubric (15)
        assert rewards[:, 0].tolist() == pytest.approx([16.0, 0.0, 15.0])
        assert len(graded) == 2
        # the judge saw the history TRL's prompt carries, and the current action
        history, current = split_prompt(rows[0]["prompt"])
        assert any(current in g and all(p in g for p, _ in history) for g in graded)


def test_the_readme_training_with_rl_example_runs(tmp_path):
    """The README's shell block, as written (lwm → this interpreter; the in-process executor)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Training with RL"):]
    block = section[section.index("```bash\n") + len("```bash\n"):]
    block = block[: block.index("```")]
    lwm_cmd = f"{sys.executable} -m pipeline.cli"
    script = block.replace("lwm run ", f"{lwm_cmd} run --executor local --progress off ").replace("lwm ", f"{lwm_cmd} ")
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    verl_rows = pq.read_table(tmp_path / "data/verl/train.parquet").to_pylist()
    trl_rows = pq.read_table(tmp_path / "data/trl/train.parquet").to_pylist()
    assert len(verl_rows) == len(trl_rows) > 0
    assert {r["data_source"] for r in verl_rows} == {"lwmkit/terminal"}
    assert {r["verifier"] for r in trl_rows} <= {"terminal", "none"}


def test_export_of_an_unfinished_run_is_a_one_line_error(tmp_path):
    proc = lwm("export", "verl", str(tmp_path), str(tmp_path / "out"), check=False)
    assert proc.returncode == 2 and "not a finished run" in proc.stderr and "Traceback" not in proc.stderr
    proc = lwm("export", "trl", str(tmp_path), str(tmp_path / "out"), "--val-fraction", "1.5", check=False)
    assert proc.returncode == 2
    assert not (tmp_path / "out").exists()


def test_verls_naive_reward_manager_scores_a_decoded_rollout(verl_dir, hf_tokenizer):
    """The whole verl path: token ids → its reward manager → decode → our compute_score → the score."""
    pytest.importorskip("verl")
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    rows = pq.read_table(verl_dir / "train.parquet").to_pylist()
    row = next(r for r in rows if r["extra_info"]["verifier"] == "json_fields")
    ref = row["reward_model"]["ground_truth"]
    with JudgeServer(lambda body, n: Answer(scores_answer(3))) as server:
        cfg = OmegaConf.create({"reward": {"custom_reward_function": {
            "path": str(ROOT / "stages" / "reward" / "frameworks.py"), "name": "compute_score",
            "reward_kwargs": {"judge_url": server.url, "judge_model": "judge", "judge_backoff_s": 0.01}}}})
        manager = NaiveRewardManager(cfg, hf_tokenizer, get_custom_reward_fn(cfg))
        prompt = torch.tensor([[1, 2, 3]])
        response = hf_tokenizer(target_reply(ref, "The tool returns the article.\n"), add_special_tokens=False)["input_ids"]
        pad = hf_tokenizer.pad_token_id
        responses = torch.tensor([response + [pad] * 5])
        mask = torch.tensor([[1, 1, 1] + [1] * len(response) + [0] * 5])
        data = DataProto.from_dict(
            tensors={"prompts": prompt, "responses": responses, "attention_mask": mask},
            non_tensors={"data_source": np.array([row["data_source"]], dtype=object),
                         "reward_model": np.array([row["reward_model"]], dtype=object),
                         "extra_info": np.array([dict(row["extra_info"])], dtype=object)},
        )
        out = manager.loop.run_until_complete(manager.run_single(data))
        assert out["reward_score"] == pytest.approx(0.9 * 15 + 0.1 * 25)
        assert out["reward_extra_info"]["rule"] == 1.0 and out["reward_extra_info"]["rubric"] == 15.0
        assert len(server.requests) == 1


def test_the_readme_verl_command_composes_with_verls_own_config(verl_dir):
    """The README's verl overrides are valid keys of verl's trainer config, and load our reward."""
    pytest.importorskip("verl")
    pytest.importorskip("hydra")
    import os
    import shlex

    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.reward import get_custom_reward_fn

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Training with RL"):]
    start = section.index("python -m verl.trainer.main_ppo")
    command = section[start: section.index("```", start)].replace("\\\n", " ").replace("$(pwd)", str(ROOT))
    overrides = [t for t in shlex.split(command)[3:] if "=" in t and "<" not in t]
    assert any(o.startswith("reward.custom_reward_function.path=") for o in overrides)
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    row = pq.read_table(verl_dir / "train.parquet").to_pylist()[0]
    ref = row["reward_model"]["ground_truth"]
    with JudgeServer(lambda body, n: Answer(scores_answer(5))) as server:
        cfg.reward.custom_reward_function.reward_kwargs.judge_url = server.url  # the README's points at a real vLLM
        cfg.reward.custom_reward_function.reward_kwargs.judge_cache = None
        fn = get_custom_reward_fn(cfg)
        out = fn(data_source=row["data_source"], solution_str=target_reply(ref, ""), ground_truth=ref,
                 extra_info=row["extra_info"])
    assert out["score"] == 25.0 and server.requests[0]["model"] == "Qwen/Qwen3-32B"


def test_hist_of_an_rl_pool_says_why_its_tokens_are_0(run):
    """rl rows count their target turn's category, but the reference observation is no token of the prompt: the
    table's 0 tokens and 0 weighted read like lost data without a word on it."""
    proc = lwm("hist", str(run))
    assert "rl samples are prompts: their target turns are counted" in proc.stderr
    assert "0.0%" in proc.stdout
