"""`validate`'s quick check of the text fields agrees with the named check it skips (schemas.trajectory).

The named check (`_text_fields`) is the reference: it walks every field with its name and reports the first
broken one. The quick check may only skip it for trajectories the named check passes.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import trajectory as tr
from schemas.errors import InvalidRecord


class Text(str):
    """A `str` subclass: valid text, which only the named check accepts."""


def _traj() -> tr.Trajectory:
    return tr.Trajectory.from_dict({
        "traj_id": "t-1", "domain": "terminal", "split_key": "k",
        "source": {"kind": "public", "format": "lwm-jsonl", "uri": "a.jsonl", "locator": "line 1"},
        "system": {"task_description": "list files", "action_space": "bash", "initial_state": "café",
                   "demonstrations": [{"action": "pwd", "observation": "/root"}], "simulation_instruction": None},
        "turns": [{"action": "ls", "observation": "a b", "reasoning": "look"}, {"action": "cat a", "observation": "ü"}],
        "meta": None,
    })


# Every place a text lives: (object path, attribute)
PLACES = [((), "traj_id"), ((), "domain"), ((), "split_key"), ((), "meta"), (("source",), "uri"),
          (("source",), "locator"), (("system",), "task_description"), (("system",), "action_space"),
          (("system",), "initial_state"), (("system",), "simulation_instruction"),
          (("system", "demonstrations", 0), "action"), (("system", "demonstrations", 0), "observation"),
          (("turns", 0), "action"), (("turns", 1), "observation"), (("turns", 0), "reasoning"), (("turns", 1), "meta")]
VALUES = [None, 3, b"ls", ["ls"], "lone \ud800 surrogate", Text("fine"), "plain", "ünïcode"]


def _outcome(traj: tr.Trajectory, quick: bool, monkeypatch) -> str:
    with monkeypatch.context() as mp:
        if not quick:
            mp.setattr(tr, "_texts_are_valid", lambda _t: False)
        try:
            tr.validate(traj, "line 1")
        except InvalidRecord as exc:
            return f"{exc.reason}: {exc}"
    return "ok"


def _set(traj: tr.Trajectory, path: tuple, attr: str, value) -> None:
    obj = traj
    for step in path:
        obj = obj[step] if isinstance(step, int) else getattr(obj, step)
    setattr(obj, attr, value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(PLACES), st.sampled_from(VALUES)), max_size=3))
def test_validate_answers_the_same_with_and_without_the_quick_check(monkeypatch, changes):
    traj = _traj()
    for (path, attr), value in changes:
        _set(traj, path, attr, copy.copy(value))
    assert _outcome(traj, True, monkeypatch) == _outcome(traj, False, monkeypatch)
    if tr._texts_are_valid(traj):  # then no text field is of a wrong type or badly encoded
        assert not _outcome(traj, False, monkeypatch).startswith(("wrong_type", "bad_encoding"))


@pytest.mark.parametrize("container", ["source", "system", "demonstration", "turn", "turns"])
def test_a_wrong_container_goes_to_the_named_check(monkeypatch, container):
    traj = _traj()
    if container == "source":
        traj.source = {"uri": "a"}
    elif container == "system":
        traj.system = ["bash"]
    elif container == "demonstration":
        traj.system.demonstrations = [{"action": "pwd"}]
    elif container == "turn":
        traj.turns = [traj.turns[0], ("ls", "a")]
    else:
        traj.turns = tuple(traj.turns)
    assert not tr._texts_are_valid(traj)
    assert _outcome(traj, True, monkeypatch) == _outcome(traj, False, monkeypatch) != "ok"


def test_a_valid_trajectory_takes_the_quick_check():
    assert tr._texts_are_valid(_traj())
