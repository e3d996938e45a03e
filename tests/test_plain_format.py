"""The plain chat format (no special tokens, for base-model CPT) follows the rules of ChatML where SPEC §5 and
§7 set them: a sample over the context limit loses whole oldest history turns, and ``keep_mode = "turn"``
keeps or drops each observation whole."""

from __future__ import annotations

import pytest

from masking import score_turn
from schemas.trajectory import Trajectory
from stages.samples import TrajectorySamples
from stages.tokenizer import load_tokenizer
from stages.tokenizer.segments import segment_tokenizer


@pytest.fixture(scope="module")
def seg():
    return segment_tokenizer(load_tokenizer())


def trajectory(turns: int = 8) -> Trajectory:
    return Trajectory.from_dict({
        "traj_id": "plain-1", "domain": "terminal", "split_key": "plain-1",
        "system": {"task_description": "Count the files", "action_space": "shell"},
        "turns": [{"action": f"ls dir{t}", "observation": f"turn{t} " + " ".join(f"file{t}_{k}.txt" for k in range(30))}
                  for t in range(1, turns + 1)],
    })


def half_kept(traj: Trajectory):
    return [score_turn(t.action, t.observation)._replace(keep=0.5) for t in traj.turns]


def make(traj, seg, fmt, keep_mode="weight", scores=None):
    scores = scores or [score_turn(t.action, t.observation) for t in traj.turns]
    return TrajectorySamples(traj, "You simulate a shell.", scores, seg, fmt, keep_mode=keep_mode, seed=7)


def text_of(parts, seg) -> str:
    return seg.tok.decode(parts.id_array.tolist())


@pytest.mark.parametrize("kind", ["cpt", "turn"])
def test_a_plain_sample_over_the_limit_drops_its_oldest_turns(seg, kind):
    traj = trajectory()
    s = make(traj, seg, "plain")
    whole = s.cpt(10**9) if kind == "cpt" else s.turn_sample(8, 10**9)
    limit = len(whole.id_array) * 2 // 3
    fitted = s.cpt(limit) if kind == "cpt" else s.turn_sample(8, limit)
    assert fitted is not None and len(fitted.id_array) <= limit
    assert fitted.dropped_turns > 0
    text = text_of(fitted, seg)
    assert text.startswith("You simulate a shell.\n") and text_of(whole, seg).startswith("You simulate a shell.\n")
    kept = [t for t in range(1, 9) if f"turn{t} " in text]
    assert kept == list(range(fitted.dropped_turns + 1, 9))  # the oldest turns went, the rest stayed in order
    # the fewest whole turns were dropped: one turn fewer does not fit
    fewer = trajectory()
    fewer.turns[:] = traj.turns[fitted.dropped_turns - 1:]
    s_fewer = make(fewer, seg, "plain")
    longer = s_fewer.cpt(10**9) if kind == "cpt" else s_fewer.turn_sample(len(fewer.turns), 10**9)
    assert len(longer.id_array) > limit


def test_a_plain_sample_that_cannot_fit_is_none(seg):
    s = make(trajectory(), seg, "plain")
    assert s.cpt(20) is None and s.turn_sample(8, 20) is None


def test_plain_turn_mode_keeps_each_observation_whole_as_chatml_does(seg):
    traj = trajectory()
    scores = half_kept(traj)
    plain = make(traj, seg, "plain", "turn", scores).cpt(10**9)
    chatml = make(traj, seg, "chatml", "turn", scores).cpt(10**9)

    def per_turn(parts) -> dict[int, set[float]]:
        weights = parts.weight_array
        out: dict[int, set[float]] = {}
        for (a, b), t in zip(parts.spans, parts.span_turns):
            out.setdefault(t, set()).update(weights[a:b].tolist())
        return out

    plain_turns, chatml_turns = per_turn(plain), per_turn(chatml)
    assert all(len(ws) == 1 for ws in plain_turns.values()), plain_turns  # one draw per turn
    assert {w for ws in plain_turns.values() for w in ws} == {0.0, 1.0}  # keep 0.5: some turns of each
    assert plain_turns == chatml_turns  # the same turns kept in both formats (one key per turn)


def test_plain_token_mode_still_draws_each_token(seg):
    traj = trajectory()
    parts = make(traj, seg, "plain", "token", half_kept(traj)).cpt(10**9)
    (a, b), _ = parts.spans[0], parts.span_turns[0]
    assert set(parts.weight_array[a:b].tolist()) == {0.0, 1.0}
