"""Training samples of one trajectory: render, tokenize once per segment, assemble by slices.

`TrajectorySamples` renders a trajectory under one template and caches the token ids of every
message the first time a sample needs it; samples of the same trajectory (all turns of an sft
expansion, say) are assembled from those cached slices, so expanding k turns costs about one
tokenization of the trajectory, not k (SPEC §7). Weights follow SPEC §5/§8: system, actions and
chat-format tokens 0; a history observation and its closing end-of-turn token get the turn's
weight (cpt) or 0 (turn samples); a target reply gets 1 throughout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from masking import TurnScore, masking_key, same_weight, token_weights
from schemas.trajectory import Trajectory
from stages.pieces import WEIGHTS, Piece, SampleParts, as_ids, zero_weights
from stages.render import (
    CHATML_END,
    CHATML_START,
    OBSERVATION_HEADER,
    PRED_CLOSE,
    PRED_OPEN,
    PREDICT_INSTRUCTION,
    history_reply,
    plain,
    target_prompt,
    target_reply,
    user_prompt,
)
from stages.tokenizer.segments import SegmentTokenizer, project_weights

_INSTRUCTION_LEAD = "\n\n"
assert PREDICT_INSTRUCTION.startswith(_INSTRUCTION_LEAD)
_INSTRUCTION_BODY = PREDICT_INSTRUCTION[len(_INSTRUCTION_LEAD) :]


class TrajectorySamples:
    """Renders one trajectory under one system prompt and assembles its samples."""

    def __init__(
        self,
        traj: Trajectory,
        system_text: str,
        scores: list[TurnScore],
        seg: SegmentTokenizer,
        chat_format: str = "chatml",
        keep_mode: str = "weight",
        seed: int | str = 0,
        reasoning_weight: float = 1.0,
        target_reasoning: dict[int, str] | None = None,
    ) -> None:
        self.traj, self.system_text, self.scores, self.seg = traj, system_text, scores, seg
        self.reasoning_weight = float(reasoning_weight)  # loss weight of a target's reasoning tokens
        # the world model's reasoning before a target's observation (turn -> text; `stages.llm.rejection`), never
        # the turn's own `reasoning`: that is the agent's thought before its action, not a prediction's
        self.target_reasoning = dict(target_reasoning or {})
        self.chat_format, self.keep_mode, self.seed = chat_format, keep_mode, seed
        self._cache: dict[tuple[str, int], Any] = {}
        if chat_format == "chatml":
            self._start = as_ids([seg.tok.token_id(CHATML_START)])
            self._end = as_ids([seg.tok.token_id(CHATML_END)])
            self._nl = as_ids(_cached_encode(seg, "\n"))

    # -- per-message pieces (ChatML), each computed once --------------------------------------

    def _memo(self, key: tuple[str, int], fn):
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    def _message(self, content_ids, content_w: np.ndarray | None = None, end_w: float = 0.0,
                 history: bool = False) -> Piece:
        """The message's ids: start token, content, end token, newline; weights: `content_w` on the content
        (None: zeros), `end_w` on the end token, 0 elsewhere."""
        content = as_ids(content_ids)
        ids = np.concatenate([self._start, content, self._end, self._nl])
        weights = zero_weights(len(ids))
        if content_w is not None:
            weights[1 : 1 + len(content_w)] = content_w
        weights[1 + (len(content) if content_w is None else len(content_w))] = end_w
        return Piece(ids, weights, history=history, zero=content_w is None and end_w == 0.0)

    def system_piece(self) -> Piece:
        def build():
            ids = self.seg.encode_recurring("system\n" + self.seg.norm(self.system_text))
            return self._message(ids)

        return self._memo(("system", 0), build)

    def _user_content(self, t: int) -> tuple[str, list[int]]:
        def build():
            text = "user\n" + self.seg.norm(user_prompt(self.traj, t))
            return text, self.seg.encode(text)

        return self._memo(("user_content", t), build)

    def user_piece(self, t: int) -> Piece:
        def build():
            _, ids = self._user_content(t)
            return self._message(ids, history=True)

        return self._memo(("user", t), build)

    def target_user_piece(self, t: int) -> Piece:
        text, ids = self._user_content(t)
        lead = self.seg.extend(ids, text, _INSTRUCTION_LEAD)
        body = _cached_encode(self.seg, _INSTRUCTION_BODY)
        if not self.seg.can_prepend(text + _INSTRUCTION_LEAD, _INSTRUCTION_BODY):
            lead, body = self.seg.encode(text + PREDICT_INSTRUCTION), []
        content = lead + body
        return self._message(content)

    def _obs(self, t: int) -> str:
        return self.seg.norm(self.traj.turns[t - 1].observation)

    def _obs_ids(self, t: int) -> np.ndarray:
        """The observation's ids, read-only (`SegmentTokenizer.encode_array`)."""
        return self._memo(("obs", t), lambda: self.seg.encode_array(self._obs(t)))

    def _turn_weights(self, t: int, n_obs: int) -> tuple[np.ndarray, float]:
        score = self.scores[t - 1]
        key = masking_key(self.seed, self.traj.traj_id, t)
        weight = same_weight(score.keep, self.keep_mode, key)
        if weight is not None:  # `token_weights` would give a list of n_obs + 1 of it
            return np.full(n_obs, weight, dtype=WEIGHTS), weight
        w = token_weights(score.keep, self.keep_mode, key, n_obs + 1)
        return np.array(w[:n_obs], dtype=WEIGHTS), w[n_obs]

    def history_piece(self, t: int, weighted: bool) -> Piece:
        """The assistant message of turn t: header (0), observation and end token (turn weight or 0)."""

        def build():
            head = "assistant\n" + OBSERVATION_HEADER
            obs = self._obs(t)
            if self.seg.can_prepend(head, obs):
                head_ids = _cached_encode(self.seg, head)
                return np.concatenate([as_ids(head_ids), self._obs_ids(t)]), len(head_ids)
            ids, idx = project_weights(self.seg, [(head, 0.0), (obs, 1.0)])
            return ids, next((i for i, w in enumerate(idx) if w), len(ids))

        def message():
            ids, obs_start = self._memo(("history", t), build)
            weights, w_end = None, 0.0
            if weighted:
                weights = zero_weights(len(ids))
                weights[obs_start:], w_end = self._turn_weights(t, len(ids) - obs_start)
            piece = self._message(ids, weights, w_end, history=True)
            piece.span = (1 + obs_start, 1 + len(ids) + 1)  # observation tokens and the end token
            return piece

        if weighted:
            return message()
        return self._memo(("history_piece", t), message)  # the same in every turn sample

    def target_piece(self, t: int) -> Piece:
        """The target reply of turn t: role header 0, reasoning + tagged observation + end token 1."""

        def build():
            reasoning = self.seg.norm(self.target_reasoning.get(t) or "")
            role, lead = "assistant\n", reasoning + PRED_OPEN
            obs = self._obs(t)
            if obs and self.seg.can_prepend(role + lead, obs):
                if self.seg.can_prepend(role, lead):  # the lead's tokens begin where the role's end
                    role_ids = _cached_encode(self.seg, role)
                    head_ids, start = role_ids + self.seg.encode(lead), len(role_ids)
                else:
                    head_ids, head_idx = project_weights(self.seg, [(role, 0.0), (lead, 1.0)])
                    start = next((i for i, w in enumerate(head_idx) if w), len(head_ids))
                tail = self.seg.extend(self._obs_ids(t), obs, PRED_CLOSE)
                return np.concatenate([as_ids(head_ids), tail]), start
            ids, head_idx = project_weights(self.seg, [(role, 0.0), (lead + obs + PRED_CLOSE, 1.0)])
            return ids, next((i for i, w in enumerate(head_idx) if w), len(ids))

        ids, start = self._memo(("target", t), build)
        weights = zero_weights(len(ids))
        weights[start:] = 1.0
        if self.reasoning_weight != 1.0:
            n = self._reasoning_tokens(t, ids, start)
            weights[start : start + n] = self.reasoning_weight
        piece = self._message(ids, weights, 1.0)
        piece.span = (1 + start, 1 + len(ids) + 1)
        return piece

    def _reasoning_tokens(self, t: int, ids: list[int], start: int) -> int:
        """Tokens from `start` whose last byte lies in the reasoning text (the weight projection rule)."""
        import numpy as np

        reasoning = self.seg.norm(self.target_reasoning.get(t) or "")
        limit = len(b"assistant\n") + len(reasoning.encode("utf-8"))
        ends = np.cumsum(self.seg.lengths[ids]) if len(ids) else np.zeros(0, dtype=np.int64)
        return int(sum(1 for i in range(start, len(ids)) if ends[i] - 1 < limit))

    # -- assembly ------------------------------------------------------------------------------

    def _assemble(self, pieces: list[tuple[Piece, int]]) -> SampleParts:
        spans: list[tuple[int, int]] = []
        span_turns: list[int] = []
        span_pieces: list[tuple[int, int, int]] = []
        at = 0
        for i, (piece, turn) in enumerate(pieces):
            if piece.span is not None:
                spans.append((at + piece.span[0], at + piece.span[1]))
                span_turns.append(turn)
                span_pieces.append((i, piece.span[0], piece.span[1]))
            at += len(piece.ids)
        return SampleParts([p for p, _ in pieces], spans, span_turns, span_pieces=span_pieces)

    def _fit(self, head: list[Piece], history: list[list[tuple[Piece, int]]], tail: list[tuple[Piece, int]],
             limit: int) -> tuple[list[tuple[Piece, int]], int] | None:
        """Drop whole oldest history turns until the sample fits `limit` tokens; None if it never does."""
        fixed = sum(len(p.ids) for p in head) + sum(len(p.ids) for p, _ in tail)
        sizes = [sum(len(p.ids) for p, _ in turn) for turn in history]
        total = fixed + sum(sizes)
        dropped = 0
        while total > limit and dropped < len(history):
            total -= sizes[dropped]
            dropped += 1
        if total > limit:
            return None
        out = [(p, 0) for p in head]
        for turn in history[dropped:]:
            out.extend(turn)
        out.extend(tail)
        return out, dropped

    def cpt(self, limit: int) -> SampleParts | None:
        """The whole trajectory, every observation weighted by its category."""
        if self.chat_format == "plain":
            return self._plain(list(range(1, len(self.traj.turns) + 1)), None, limit)
        turns = range(1, len(self.traj.turns) + 1)
        history = [[(self.user_piece(t), t), (self.history_piece(t, True), t)] for t in turns]
        fitted = self._fit([self.system_piece()], history[:-1], history[-1], limit)
        return self._finish(fitted)

    def turn_sample(self, t: int, limit: int) -> SampleParts | None:
        """Turns 1..t-1 as weight-0 context, then action t with the instruction and its target reply."""
        if self.chat_format == "plain":
            return self._plain(list(range(1, t)), t, limit)
        history = [[(self.user_piece(h), h), (self.history_piece(h, False), h)] for h in range(1, t)]
        tail = [(self.target_user_piece(t), t), (self.target_piece(t), t)]
        return self._finish(self._fit([self.system_piece()], history, tail, limit))

    def rl_prompt(self, t: int) -> list[int]:
        """Prompt ids of an rl sample: system, history, target prompt, and the assistant header."""
        if self.chat_format == "plain":  # the plain rendering of `_plain`, up to the target reply
            texts = [plain("system", self.system_text)]
            for h in range(1, t):
                texts += [plain("user", user_prompt(self.traj, h)), OBSERVATION_HEADER,
                          self.traj.turns[h - 1].observation + "\n\n"]
            texts.append(plain("user", target_prompt(self.traj, t)))
            return self.seg.encode("".join(self.seg.norm(x) for x in texts))
        parts = [self.system_piece()]
        for h in range(1, t):
            parts += [self.user_piece(h), self.history_piece(h, False)]
        parts.append(self.target_user_piece(t))
        ids = np.concatenate([p.ids for p in parts]).tolist()
        if self.chat_format == "chatml":
            ids += self._start.tolist() + _cached_encode(self.seg, "assistant\n")
        return ids

    def _finish(self, fitted) -> SampleParts | None:
        if fitted is None:
            return None
        pieces, dropped = fitted
        parts = self._assemble(pieces)
        parts.dropped_turns = dropped
        return parts

    def _plain(self, history: list[int], target: int | None, limit: int) -> SampleParts | None:
        """Plain format (no special tokens): the whole text tokenized at once, weights by span. As in ChatML,
        whole oldest history turns are dropped until the sample fits `limit` (a cpt sample keeps its last
        turn); None if it never does. The text is tokenized whole, so the fewest turns to drop are searched
        for by halving (a few tokenizations, not one per turn)."""
        encoded = self._plain_encode(history, target)
        if len(encoded[1]) <= limit:
            return self._plain_parts(*encoded, target)
        most = len(history) - (1 if target is None else 0)
        if most < 1 or len((fewest := self._plain_encode(history[most:], target))[1]) > limit:
            return None
        low, high, encoded = 1, most, fewest  # `high` fits; find the least number of dropped turns that does
        while low < high:
            mid = (low + high) // 2
            trial = self._plain_encode(history[mid:], target)
            if len(trial[1]) <= limit:
                high, encoded = mid, trial
            else:
                low = mid + 1
        parts = self._plain_parts(*encoded, target)
        parts.dropped_turns = high
        return parts

    def _plain_encode(self, history: list[int], target: int | None):
        """The plain text's ``(spans, ids, idx)``: its ``(text, weight, turn)`` spans, its token ids and the span of
        each token; all the search for a cut needs (weights and spans are built once, for the cut chosen)."""
        spans: list[tuple[str, float, int]] = [(plain("system", self.system_text), 0.0, 0)]
        for t in history:
            spans.append((plain("user", user_prompt(self.traj, t)), 0.0, 0))
            w = self.scores[t - 1].keep if target is None else 0.0
            spans.append((OBSERVATION_HEADER, 0.0, 0))
            spans.append((self.traj.turns[t - 1].observation + "\n\n", w, t))
        if target is not None:
            spans.append((plain("user", target_prompt(self.traj, target)), 0.0, 0))
            turn, reasoning = self.traj.turns[target - 1], self.target_reasoning.get(target)
            if self.reasoning_weight != 1.0 and reasoning:
                spans.append((reasoning, self.reasoning_weight, target))
                spans.append((target_reply(turn.observation, None) + "\n\n", 1.0, target))
            else:
                spans.append((target_reply(turn.observation, reasoning) + "\n\n", 1.0, target))
        ids, idx = project_weights(self.seg, [(self.seg.norm(s), 1.0) for s, _, _ in spans], return_index=True)
        return spans, ids, idx

    def _plain_parts(self, spans: list[tuple[str, float, int]], ids, idx, target: int | None) -> SampleParts:
        weights, out_spans, span_turns = [], [], []
        drawn: dict[int, list[int]] = {}  # a weighted cpt turn: the positions of its tokens, drawn below
        for i, k in enumerate(idx):
            _text, w, turn = spans[k]
            if turn and target is None and w:
                drawn.setdefault(turn, []).append(i)
            weights.append(w)
            if turn and (not out_spans or span_turns[-1] != turn or out_spans[-1][1] != i):
                out_spans.append((i, i + 1))
                span_turns.append(turn)
            elif turn:
                out_spans[-1] = (out_spans[-1][0], i + 1)
        for turn, positions in drawn.items():  # one draw per turn, or per token, as the keep mode says
            key = masking_key(self.seed, self.traj.traj_id, turn)
            for i, w in zip(positions, token_weights(self.scores[turn - 1].keep, self.keep_mode, key, len(positions))):
                weights[i] = w
        return SampleParts([Piece(as_ids(ids), np.array(weights, dtype=WEIGHTS))], out_spans, span_turns,
                           span_pieces=[(0, a, b) for a, b in out_spans])

    def rendered_parts(self, parts_turns: list[int], target: int | None) -> list[tuple[str, bool]]:
        """The rendered ChatML sample as ``(text, is_special)`` parts (for the segment-wise check).

        Special tokens are parts of their own, so data that spells one stays ordinary text.
        """
        parts: list[tuple[str, bool]] = []

        def message(role: str, content: str) -> None:
            parts.extend([(CHATML_START, True), (f"{role}\n{content}", False), (CHATML_END, True), ("\n", False)])

        message("system", self.system_text)
        for t in parts_turns:
            message("user", user_prompt(self.traj, t))
            message("assistant", history_reply(self.traj.turns[t - 1].observation))
        if target is not None:
            turn = self.traj.turns[target - 1]
            message("user", target_prompt(self.traj, target))
            message("assistant", target_reply(turn.observation, self.target_reasoning.get(target)))
        return [(text if special else self.seg.norm(text), special) for text, special in parts]

    def rendered_text(self, parts_turns: list[int], target: int | None) -> str:
        """The whole rendered text of a ChatML sample (special tokens spelled out)."""
        return "".join(text for text, _ in self.rendered_parts(parts_turns, target))


_ENCODE_CACHE: dict[tuple[int, str], list[int]] = {}


def _cached_encode(seg: SegmentTokenizer, text: str) -> list[int]:
    """Constant strings are tokenized once per process (not counted as per-sample work)."""
    key = (id(seg.tok), text)
    if key not in _ENCODE_CACHE:
        _ENCODE_CACHE[key] = seg.tok.encode(text)
    return _ENCODE_CACHE[key]
