"""WMAT data: step choice, the block request, block validation, and rendering of the two pools."""

from __future__ import annotations

import pytest

from schemas.trajectory import Outcome, SystemPrompt, Trajectory, Turn
from stages.reward.wmat_format import check_output
from stages.tokenizer import load_tokenizer
from stages.tokenizer.segments import segment_tokenizer
from stages.wmat import (
    OBSERVATION,
    POLICY,
    WORLD_MODEL,
    block_messages,
    choose_steps,
    fesft_segments,
    future_text,
    known_text,
    midtrain_segments,
    tokenize_segments,
    validate_block,
)

TASK = "What does recent reporting say about wind turbine noise? Quote the key finding."


def _traj() -> Trajectory:
    turns = [
        Turn('{"action": "search", "query": "wind turbine noise"}',
             'Search results for "wind turbine noise"\n[1] Wind turbine noise: a review\n'
             "    https://research.example.net/wind-turbine-noise-798", reasoning="Start broad."),
        Turn('{"action": "click", "id": 1}',
             "Title: Wind turbine noise: a review\nBy Emeka Silva · Oct 2020\n"
             "A 2023 field study found the effect is strongest in Tallinn."),
        Turn('{"action": "answer", "text": "The effect is strongest in Tallinn."}', "Answer recorded."),
    ]
    system = SystemPrompt(task_description=TASK, action_space='{"action": "search", "query": str} | ...')
    return Trajectory(traj_id="t1", domain="search", split_key="k1", source=None, system=system, turns=turns,
                      outcome=Outcome(success=True, reward=1.0))


GOOD = ("<imaginary>Open [a promising result] and read until [the key finding] appears.</imaginary>\n"
        "<keyword>wind turbine noise, review</keyword>\n"
        "<analysis>Nothing read yet; next, open the review.</analysis>\n<confidence>70%</confidence>")


def test_steps_are_seeded_stable_sorted_and_bounded():
    steps = choose_steps("traj-a", 12, 3, seed=0)
    assert steps == sorted(steps) and len(set(steps)) == 3 and all(1 <= t <= 12 for t in steps)
    assert choose_steps("traj-a", 12, 3, seed=0) == steps
    assert choose_steps("traj-a", 4, 9) == [1, 2, 3, 4]
    assert choose_steps("traj-a", 4, 0) == []
    # the seed and the trajectory change the choice (over many trajectories, not always equal)
    assert any(choose_steps(f"t{i}", 12, 3, seed=0) != choose_steps(f"t{i}", 12, 3, seed=1) for i in range(20))
    assert len({tuple(choose_steps(f"t{i}", 12, 3)) for i in range(20)}) > 1
    # a larger count keeps the smaller count's steps (a ranking, not a fresh draw)
    assert set(choose_steps("traj-a", 12, 2)) <= set(choose_steps("traj-a", 12, 5))


def test_block_request_separates_known_from_ground_truth():
    traj = _traj()
    system, user = (m["content"] for m in block_messages(traj, 2))
    assert "No spoilers" in system
    known, truth = user.split("# Ground truth, do not reveal")
    assert TASK in known and "[1] Wind turbine noise: a review" in known  # step 1's observation is known
    assert '{"action": "click", "id": 1}' in known  # the action the block precedes
    assert "Tallinn" not in known and "Tallinn" in truth
    assert "## Outcome of the episode\nsuccess, reward 1" in truth
    assert "step 2 of 3" in known


def test_observations_in_the_request_are_cut():
    traj = _traj()
    traj.turns[0].observation = "x" * 5000
    user = block_messages(traj, 2, obs_chars=100)[1]["content"]
    assert "x" * 100 + "\n[... 4900 more characters]" in user and "x" * 101 not in user


def test_known_and_future_text_split_at_the_step():
    traj = _traj()
    assert "Tallinn" not in known_text(traj, 2) and "Tallinn" in future_text(traj, 2)
    assert traj.turns[1].action in known_text(traj, 2)
    assert traj.turns[0].observation not in future_text(traj, 2)


def test_a_valid_block_is_kept():
    check, reason, _detail, text = validate_block(GOOD, _traj(), 2)
    assert reason == "" and check is not None and check.output.confidence == pytest.approx(0.7)
    assert text == GOOD


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (GOOD.replace("Nothing read yet", "It names Tallinn"), "spoiler"),
        (GOOD.replace("Nothing read yet", "A 2023 study"), "spoiler"),
        (GOOD.replace("</analysis>", ""), "malformed"),
        (GOOD + "\n<think>x</think>", "malformed"),
        (GOOD.replace("\n<confidence>70%</confidence>", ""), "no_confidence"),
        (GOOD.replace("70%", "likely"), "no_confidence"),
        ("", "malformed"),
        (None, "malformed"),
    ],
)
def test_bad_blocks_are_rejected_with_their_reason(answer, reason):
    check, got, detail, _ = validate_block(answer, _traj(), 2)
    assert check is None and got == reason and detail


def test_the_confidence_number_is_not_a_spoiler():
    # 20 is a number only the future reveals; as the stated confidence it reveals nothing
    block = GOOD.replace("70%", "20%")
    traj = _traj()
    traj.turns[2].observation = "Answer recorded after 20 seconds."
    assert validate_block(block, traj, 2)[1] == ""
    assert validate_block(block.replace("next, open", "in 20 seconds, open"), traj, 2)[1] == "spoiler"


def test_a_reasoning_models_think_prefix_is_ignored():
    _check, reason, _, text = validate_block("<think>Let me plan.</think>\n" + GOOD, _traj(), 2)
    assert reason == "" and text == GOOD


def _join(segs):
    return "".join(t for t, _ in segs)


def test_midtrain_inserts_blocks_at_their_steps_only():
    traj = _traj()
    segs = midtrain_segments(traj, {2: GOOD})
    text = _join(segs)
    assert text.count("<imaginary>") == 1
    assert text.index(traj.turns[0].observation) < text.index("<imaginary>") < text.index('"id": 1}')
    assert text.count("<action>") == 3 and text.endswith("<|im_start|>user\nAnswer recorded.<|im_end|>\n")
    assert [c for _, c in segs if c == WORLD_MODEL] == [WORLD_MODEL]


def test_fesft_is_single_turn_with_history_in_the_prompt():
    traj = _traj()
    text = _join(fesft_segments(traj, 2, GOOD))
    assert text.count("<|im_start|>") == 3  # system, user, assistant
    prompt, reply = text.split("<|im_start|>assistant\n")
    assert "## Step 1\nAction: " in prompt and traj.turns[0].observation in prompt
    assert "Tallinn" not in prompt
    out = check_output(reply.removesuffix("<|im_end|>\n"))
    assert out.ok and out.output.action == traj.turns[1].action
    assert out.output.think == "" and out.output.confidence == pytest.approx(0.7)


@pytest.fixture(scope="module")
def seg():
    return segment_tokenizer(load_tokenizer("default"))


def test_tokenized_spans_cover_block_policy_and_observations(seg):
    traj = _traj()
    weights = {WORLD_MODEL: 0.5, POLICY: 1.0, OBSERVATION: 0.25}
    ids, loss, spans, cats = tokenize_segments(seg, midtrain_segments(traj, {2: GOOD}), weights)
    assert cats.count(WORLD_MODEL) == 1 and cats.count(POLICY) == 3
    assert cats.count(OBSERVATION) == 3  # the placeholder first state is not an observation
    assert seg.tok.decode(ids) == _join(midtrain_segments(traj, {2: GOOD}))
    (a, b), = [s for s, c in zip(spans, cats) if c == WORLD_MODEL]
    assert seg.tok.decode(ids[a:b]) == GOOD
    assert set(loss[a:b]) == {0.5}
    for (a, b), c in zip(spans, cats):
        assert set(loss[a:b]) == {weights[c]}
    inside = {i for a, b in spans for i in range(a, b)}
    assert all(w == 0.0 for i, w in enumerate(loss) if i not in inside)
    policy = [seg.tok.decode(ids[a:b]) for (a, b), c in zip(spans, cats) if c == POLICY]
    assert policy[1] == '<think></think>\n<action>{"action": "click", "id": 1}</action><|im_end|>'


def test_fesft_tokens_train_the_reply_only(seg):
    ids, loss, spans, cats = tokenize_segments(seg, fesft_segments(_traj(), 2, GOOD), {WORLD_MODEL: 1.0, POLICY: 1.0})
    assert cats == [WORLD_MODEL, POLICY]
    first = spans[0][0]
    assert seg.tok.decode(ids[:first]).endswith("<|im_start|>assistant\n")
    assert all(w == 0.0 for w in loss[:first]) and spans[1][1] == len(ids) - 1  # the final "\n" has no weight


# -- on a real search log (Who&When / Magentic-One, ../shared/data) ----------------------------------

ABSTRACT = ("<imaginary>Open [a directory of martial arts schools], scan the listings for [a school near the "
            "exchange] and check [its class hours].</imaginary>\n<keyword>martial arts, schools, New York</keyword>\n"
            "<analysis>Search results are listed; the next step opens the directory result to compare schools by "
            "distance and evening hours.</analysis>\n<confidence>40%</confidence>")


@pytest.fixture(scope="module")
def real_search(shared_data):
    from stages.ingest.magentic_one import ADAPTER
    from tests.helpers import ingest_unit

    trajs, bad = ingest_unit(ADAPTER, shared_data / "magentic-one" / "1.json")
    assert bad == [] and len(trajs) == 1
    return trajs[0]


def test_an_abstract_block_passes_at_every_step_of_a_real_log(real_search):
    # hand-read: the task names New York; the martial arts directory appears in step 1's results
    assert len(real_search.turns) == 7
    for t in range(1, 8):
        assert validate_block(ABSTRACT, real_search, t)[1] == "", t


def test_a_school_the_log_only_reaches_later_is_a_spoiler(real_search):
    # hand-read: "Kwon Jae-Hwa Tae Kwon-DO, 38 W 13th St" is first shown on the directory page
    # (step 4's observation); step 1's search results do not name it
    assert "Jae-Hwa" not in known_text(real_search, 2) and "Jae-Hwa" in future_text(real_search, 2)
    leak = ABSTRACT.replace("scan the listings for [a school near the exchange]", "find Kwon Jae-Hwa Tae Kwon-DO at 38 W 13th St")
    check, reason, detail, _ = validate_block(leak, real_search, 2)
    assert check is None and reason == "spoiler"
    assert "number '38'" in detail and "number '13'" in detail


# -- the stage's ask / check / re-ask loop, with a scripted context ----------------------------------


class _Ctx:
    """A stand-in for the machinery's context: config, counters and a scripted `send`."""

    def __init__(self, answers):
        from pipeline.llm_stage import LLM_DEFAULTS
        from schemas.stats import Stats

        self.cfg = {"pools": {"ratios": {"cpt": 1.0}, "seed": 0}, "llm": {**LLM_DEFAULTS, "wmat_steps": 1},
                    "redact": {"enabled": True, "emails": False}}
        self.stats, self.answers, self.sent = Stats(), list(answers), []

    def redacted(self, text, count=True):
        from stages.llm.stage import StageContext

        return StageContext.redacted(self, text, count)

    @property
    def llm(self):
        return self.cfg["llm"]

    def gen_params(self, **extra):
        return {"temperature": 0.8, **extra}

    def send(self, requests, judge=False):
        from stages.llm.client import ChatResult

        self.sent.append(requests)
        return [ChatResult(a, error="" if a is not None else "HTTP 500") for a in
                (self.answers.pop(0) for _ in requests)]


@pytest.mark.parametrize(
    ("answers", "status", "reason", "attempts", "sends"),
    [
        ([GOOD], "kept", "", 1, 1),
        ([GOOD.replace("Nothing read yet", "It names Tallinn"), GOOD], "kept", "", 2, 2),
        ([GOOD.replace("</analysis>", "")] * 2, "rejected", "malformed", 2, 2),
        ([None], "rejected", "request_failed", 1, 1),  # the client already retried; not re-asked
    ],
)
def test_the_stage_keeps_reasks_and_refuses_as_scripted(answers, status, reason, attempts, sends):
    from stages.llm.wmat_blocks import STAGE

    traj = _traj()
    ctx = _Ctx(answers)
    (row,) = STAGE.process([traj], ctx)
    assert (row["status"], row["reason"], row["attempts"]) == (status, reason, attempts)
    assert len(ctx.sent) == sends and ctx.answers == []
    if sends == 2:
        note = ctx.sent[1][0].messages[1]["content"]
        assert "Your previous answer" in note and ctx.sent[1][0].salt.startswith("wmat-reask-1-")
    assert (row["block"] == GOOD) == (status == "kept")
    counts = ctx.stats.to_dict()
    assert counts[status] == 1 and counts.get(f"dropped.{reason}", 0) == (status == "rejected")


def test_a_kept_block_holds_no_secret_the_model_wrote():
    from stages.llm.wmat_blocks import STAGE

    key = "AKIA" + "IOSFODNN7EXAMPLE"
    leaky = GOOD.replace("Nothing read yet;", f"Nothing read yet (key {key});").replace(
        "<keyword>wind turbine noise, review</keyword>", f"<keyword>wind turbine noise, review, {key}</keyword>")
    ctx = _Ctx([leaky])
    (row,) = STAGE.process([_traj()], ctx)
    assert row["status"] == "kept"
    assert row["block"] == GOOD.replace("Nothing read yet;", "Nothing read yet (key <SECRET:aws_access_key>);").replace(
        "review</keyword>", "review, <SECRET:aws_access_key></keyword>")
    assert row["keywords"] == ["wind turbine noise", "review", "<SECRET:aws_access_key>"]
    assert ctx.stats.to_dict()["redacted.aws_access_key"] == 2  # the block's two; the keyword list is drawn from it
