"""Samples: segment-wise tokenization equals whole-text tokenization; weights sit where SPEC says."""

from __future__ import annotations

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from masking import score_turn
from schemas.trajectory import Trajectory
from stages.ingest.reading import expand_inputs
from stages.ingest.registry import claims_dir, get_adapter, resolve_opts, sniff
from stages.render import chatml, history_reply, target_reply, user_prompt
from stages.samples import TrajectorySamples
from stages.tokenizer import load_tokenizer
from stages.tokenizer.segments import (
    _ends_alnum,
    _trailing_run_start,
    check_segmentwise,
    encode_rendered,
    segment_tokenizer,
)
from tests.helpers import make_traj

BIG = 10**9


@pytest.fixture(scope="module")
def seg():
    return segment_tokenizer(load_tokenizer())


def samples_for(traj: Trajectory, seg, fmt: str = "chatml") -> TrajectorySamples:
    """The samples of `traj`, each turn's ``reasoning`` standing in for a world model's reasoning before its
    target (what the sft_reasoning stage supplies), so that the targets' tokenization is tested with it."""
    scores = [score_turn(t.action, t.observation) for t in traj.turns]
    reasoning = {i: t.reasoning for i, t in enumerate(traj.turns, 1) if t.reasoning}
    return TrajectorySamples(traj, "You simulate a shell.\n" + traj.system.action_space, scores, seg, fmt,
                             target_reasoning=reasoning)


def test_the_agents_own_reasoning_is_not_the_world_models_target(seg):
    """A log's reasoning before an action is the agent's plan; the world model's target is the observation
    alone unless a world model's reasoning is given for that turn."""
    traj = make_traj(3, 1)
    traj.turns[1].reasoning = "I will list the files to find the config."
    scores = [score_turn(t.action, t.observation) for t in traj.turns]
    for fmt in ("chatml", "plain"):
        s = TrajectorySamples(traj, "You simulate a shell.", scores, seg, fmt).turn_sample(2, BIG)
        a, b = s.spans[-1]
        target = seg.tok.decode(s.ids[a:b])
        assert "I will list the files" not in seg.tok.decode(s.ids), fmt
        assert target.startswith("<predicted_observation>\n" + traj.turns[1].observation[:20]), (fmt, target[:80])
        given = TrajectorySamples(traj, "You simulate a shell.", scores, seg, fmt,
                                  target_reasoning={2: "The listing shows two files."}).turn_sample(2, BIG)
        a, b = given.spans[-1]
        assert seg.tok.decode(given.ids[a:b]).startswith("The listing shows two files.<predicted_observation>\n")


def assert_all_samples_exact(traj: Trajectory, seg) -> None:
    ts = samples_for(traj, seg)
    n = len(traj.turns)
    cpt = ts.cpt(BIG)
    check_segmentwise(seg, cpt.ids, ts.rendered_parts(list(range(1, n + 1)), None))
    for t in range(1, n + 1):
        s = ts.turn_sample(t, BIG)
        check_segmentwise(seg, s.ids, ts.rendered_parts(list(range(1, t)), t))


def test_segmentwise_equals_whole_text_on_generated(seg):
    for seed in range(12):
        assert_all_samples_exact(make_traj(6, seed), seg)


def _shared_trajectories(root) -> list[Trajectory]:
    out = []
    units = expand_inputs([str(root)], claims_dir=claims_dir)
    for unit in units:
        fmt = sniff(unit)[0]
        if not fmt:
            continue
        adapter = get_adapter(fmt)
        opts = resolve_opts(adapter, {})
        for rec in adapter.read(unit, opts):
            if hasattr(rec, "payload"):
                try:
                    out.extend(adapter.normalize(rec, opts))
                except Exception:  # adapters are tested elsewhere; here only their text matters
                    continue
    return out


def test_segmentwise_equals_whole_text_on_real_data(seg, shared_data):
    trajs = _shared_trajectories(shared_data)
    assert len(trajs) >= 10
    for traj in trajs:
        assert_all_samples_exact(traj, seg)


def test_weights_sit_on_observations_and_never_on_actions(seg):
    traj = make_traj(5, 3)
    ts = samples_for(traj, seg)
    tok = seg.tok
    cpt = ts.cpt(BIG)
    assert len(cpt.spans) == 5
    for (a, b), t in zip(cpt.spans, cpt.span_turns):
        obs = traj.turns[t - 1].observation
        text = tok.decode(cpt.ids[a:b])
        # a token straddling the header/observation junction belongs to the observation
        assert text.endswith(obs + "<|im_end|>") and not text[: len(text) - len(obs) - 10].strip()
        keep = ts.scores[t - 1].keep
        assert all(abs(w - keep) < 1e-9 for w in cpt.weights[a:b])
    weighted = {i for a, b in cpt.spans for i in range(a, b)}
    assert all(w == 0 for i, w in enumerate(cpt.weights) if i not in weighted)
    # every action and the system prompt lie in weight-0 tokens
    zero_text = tok.decode([i for i, w in zip(cpt.ids, cpt.weights) if w == 0])
    for turn in traj.turns:
        assert turn.action in zero_text
    s = ts.turn_sample(4, BIG)
    a, b = s.spans[-1]
    turn = traj.turns[3]
    assert tok.decode(s.ids[a:b]) == target_reply(turn.observation, turn.reasoning) + "<|im_end|>"
    assert all(w == 1.0 for w in s.weights[a:b])
    assert sum(1 for w in s.weights if w > 0) == b - a  # history observations carry no loss


def test_context_limit_drops_whole_oldest_turns(seg):
    traj = make_traj(8, 5)
    ts = samples_for(traj, seg)
    full = ts.turn_sample(8, BIG)
    limit = len(full.ids) - 1
    cut = ts.turn_sample(8, limit)
    assert cut.dropped_turns >= 1 and len(cut.ids) <= limit
    assert cut.span_turns[0] == 1 + cut.dropped_turns and cut.span_turns[-1] == 8
    check_segmentwise(seg, cut.ids, ts.rendered_parts(list(range(1 + cut.dropped_turns, 8)), 8))
    assert ts.turn_sample(8, 10) is None  # even system + target do not fit


def test_all_turn_expansion_costs_about_one_tokenization(seg):
    traj = make_traj(40, 11)
    whole = samples_for(traj, seg)
    cpt_chars = len(whole.rendered_text(list(range(1, 41)), None))
    fast = samples_for(traj, segment_tokenizer(seg.tok))
    fast.seg.counter.chars = 0
    samples = [fast.turn_sample(t, BIG) for t in range(1, 41)]
    passed = fast.seg.counter.chars
    naive = sum(len(fast.rendered_text(list(range(1, t)), t)) for t in range(1, 41))
    assert passed <= 1.3 * cpt_chars, (passed, cpt_chars)
    assert naive > 15 * cpt_chars  # re-rendering every prefix would pass ~20x
    for t, s in zip(range(1, 41), samples):  # token for token equal to the slow way
        assert s.ids == encode_rendered(seg.tok, fast.rendered_parts(list(range(1, t)), t))


def test_plain_format_has_no_special_tokens(seg):
    traj = make_traj(3, 2)
    ts = samples_for(traj, seg, "plain")
    s = ts.cpt(BIG)
    text = seg.tok.decode(s.ids)
    assert "<|im_start|>" not in text and traj.turns[0].action in text
    assert len(s.spans) == 3


def test_rendering_follows_agentworldbench_conventions():
    traj = make_traj(2, 1)
    first = user_prompt(traj, 1)
    assert first.startswith("### Turn 1\n**Current State:**\nroot@box:/app# \n\n**Action:**\n```json\n")
    assert user_prompt(traj, 2).startswith("### Turn 2\n**Action:**\n```json\n")
    assert history_reply("x") == "**Environment Observation:**\nx"
    assert target_reply("obs", "why. ") == "why. <predicted_observation>\nobs\n</predicted_observation>"
    assert chatml("user", "hi") == "<|im_start|>user\nhi<|im_end|>\n"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.text(max_size=30))
def test_extend_is_exact(a, b):
    seg = segment_tokenizer(load_tokenizer())
    a, b = seg.norm(a), seg.norm(b)
    ids = seg.extend(seg.tok.encode(a), a, b)
    assert ids == seg.tok.encode(a + b)
    # from an array (an observation's ids) the same ids come back as a read-only int32 array
    as_array = seg.extend(seg.encode_array(a), a, b)
    assert isinstance(as_array, np.ndarray) and as_array.dtype == np.int32 and not as_array.flags.writeable
    assert as_array.tolist() == ids
    if seg.can_prepend(a, b):
        assert seg.tok.encode(a) + seg.tok.encode(b) == seg.tok.encode(a + b)


_JUNCTION_CHARS = st.sampled_from(list("ab1 \n\t}{\"_-.é中٣") + ["\u0301", "\u200d", "\U0001f600", "\u0663"])


@settings(max_examples=300, deadline=None)
@given(st.text(_JUNCTION_CHARS, max_size=12) | st.text(max_size=12))
def test_junction_scans_from_the_end_match_the_whole_text_patterns(text):
    # The definitions: the last character is a letter/mark/digit; the trailing run of other
    # characters starts at the leftmost position from which only such characters follow.
    assert _ends_alnum(text) == bool(regex.search(r"[\p{L}\p{M}\p{N}]\Z", text))
    assert _trailing_run_start(text) == regex.search(r"[^\p{L}\p{M}\p{N}]*\Z", text).start()


def test_turn_samples_share_history_pieces_without_changing_them(seg):
    traj = make_traj(6, seed=3)
    ts = samples_for(traj, seg)
    first = [ts.turn_sample(t, BIG) for t in range(1, 7)]
    again = [samples_for(traj, seg).turn_sample(t, BIG) for t in range(1, 7)]
    for a, b in zip(first, again):
        assert a.ids == b.ids and a.weights == b.weights and a.spans == b.spans
        assert a.id_array.dtype == np.int32 and a.weight_array.dtype == np.float64
    assert ts.history_piece(2, False) is ts.history_piece(2, False)
    # the weighted (cpt) pieces of the same turns do not touch the shared unweighted ones
    cpt, fresh = ts.cpt(BIG), samples_for(traj, seg).cpt(BIG)
    assert cpt.ids == fresh.ids and cpt.weights == fresh.weights and any(cpt.weights[a:b] for a, b in cpt.spans)
    assert [s.weights for s in first] == [ts.turn_sample(t, BIG).weights for t in range(1, 7)]


@pytest.mark.parametrize("a", ["word", "word}", "x = {'a': 1}\n", "   ", "abc\n\n\n", "foo.bar())", "你好！",
                               "e\u0301!!", "ok ...   ", '{"k": [1, 2]}', "line\r\n", "a" * 300 + "}" * 70])
@pytest.mark.parametrize("b", ["\n</predicted_observation>", "x", "  y", "\n\n", ")", "1"])
def test_extend_reuses_the_head_at_token_boundaries(seg, a, b):
    assert seg.extend(seg.tok.encode(a), a, b) == seg.tok.encode(a + b)
    assert seg.extend(seg.encode_array(a), a, b).tolist() == seg.tok.encode(a + b)


_REASONING_STARTS = ["", "I check.", " I check.", "\nI check.", "\n\n- first", "\u0301accent first", "数据 first", "{\"x\": 1}",
                     "... then", "0x1F", "\t tab", "😀 smile"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_REASONING_STARTS), st.text(max_size=12), st.integers(0, 11))
def test_a_target_is_weighted_from_its_reasoning_on_whatever_the_reasoning_begins_with(seg, start, more, seed):
    """The target reply's ids are the whole text's, and a token of it carries the target's weight exactly
    when its last byte lies past the role header (the projection rule), whether the reasoning can be
    tokenized apart from the header or not (a reasoning that begins with a newline shares a token with it)."""
    traj = make_traj(3, seed)
    traj.turns[1].reasoning = (start + more) or None
    ts = samples_for(traj, seg)
    s = ts.turn_sample(2, BIG)
    check_segmentwise(seg, s.ids, ts.rendered_parts([1], 2))
    a, b = s.spans[-1]
    turn = traj.turns[1]
    # the text is tokenized normalized (NFC): a reasoning with a compatibility ideograph (U+2F800) decodes to its
    # canonical form
    assert seg.tok.decode(s.ids[a:b]).endswith(seg.norm(target_reply(turn.observation, turn.reasoning)) + "<|im_end|>")
    m = max(i for i in range(a) if s.ids[i] == seg.tok.token_id("<|im_start|>"))  # the target message's start
    ends = np.cumsum(seg.lengths[np.asarray(s.ids[m + 1 : b - 1])])  # its content's tokens, to the end token
    past = [bool(e > len(b"assistant\n")) for e in ends]
    assert [w == 1.0 for w in s.weights[m + 1 : b - 1]] == past and s.weights[b - 1] == 1.0
    assert a == m + 1 + past.index(True)


@pytest.mark.parametrize(("a", "b"), [("\U00018d80", "£o"), ("x\U00018d80", "!y"), ("ab!\U00018d80", "cd"),
                                      ("ok", "\U00018d80z"), ("é!", "\U00018d80")])
def test_a_junction_next_to_a_character_unicode_versions_disagree_on_is_exact(a, b):
    """U+18D80 is unassigned in Python's Unicode tables and a letter in newer ones: which side of the junction rule
    it falls on depends on whose tables ask, so the junction is tokenized whole."""
    seg = segment_tokenizer(load_tokenizer())
    assert seg.extend(seg.tok.encode(a), a, b) == seg.tok.encode(a + b)
    assert seg.extend(seg.encode_array(a), a, b).tolist() == seg.tok.encode(a + b)
    if seg.can_prepend(a, b):
        assert seg.tok.encode(a) + seg.tok.encode(b) == seg.tok.encode(a + b)
