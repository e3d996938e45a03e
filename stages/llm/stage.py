"""What a model-in-the-loop stage is given: a client with a content-keyed cache and a budget, requests, a context.

A stage (see `pipeline.llm_stage` for how stages are run, resumed and accounted) is an object with:

- ``name`` and ``schema`` — its rows (pyarrow, with a ``traj_id`` column) are written per
  trajectories part to ``llm/<name>/part-<task>.parquet``, each with the ``occurrence`` of its
  trajectory added (trajectories that share an id: `pipeline.occurrences`); one ``process`` call
  is never given two trajectories that share an id;
- ``wants(traj, ctx) -> bool`` — whether it has work for a trajectory;
- ``process(trajs, ctx) -> rows`` — asks through ``ctx.send`` (model) or ``ctx.send(…, judge=True)`` (a stage
  that asks the judge says so: ``uses_judge = True``, which the dry run shows);
- ``dry_requests(traj, ctx) -> (first-round requests, (min calls, max calls))`` — for the dry run;
- ``apply(traj, rows, ctx) -> {turn: drop reason} | Applied`` — how its rows change the trajectory that
  later stages and the samples see, and which target turns must not become samples; an `Applied` also
  gives the world model's reasoning for a target. That reasoning is kept apart from ``Turn.reasoning``,
  the agent's own thought before its action (what the WMAT policy segments hold), never the world model's.
  An `Applied` whose ``unanswered`` is set says the stage got no answer for a change it makes to the trajectory
  (its requests failed): a later stage, whose prompt would lack that change, sends nothing about it in this run
  (`UnsentClient`), and the next run asks again. A stage whose rows change nothing a later prompt holds leaves it
  unset.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from schemas.errors import ConfigError
from schemas.stats import Stats
from schemas.trajectory import Trajectory
from stages.llm.client import ChatClient, ChatResult, map_in_threads
from stages.redact import redact_text
from stages.uri_credentials import recorded_uri


@dataclass
class Applied:
    """What the stages' rows say of one trajectory's samples besides the trajectory itself."""

    dropped: dict[int, str] = field(default_factory=dict)  # target turn -> why it becomes no sample
    reasoning: dict[int, str] = field(default_factory=dict)  # target turn -> the world model's reasoning
    unanswered: bool = False  # a stage got no answer for the trajectory: it is not yet what the stages would make

    def add(self, other: dict[int, str] | Applied | None) -> None:
        """Take in what one stage's ``apply`` returned: drop reasons, or an `Applied`."""
        if isinstance(other, Applied):
            self.dropped.update(other.dropped)
            self.reasoning.update(other.reasoning)
            self.unanswered = self.unanswered or other.unanswered
        elif other:
            self.dropped.update(other)


class BudgetExhausted(ConfigError):
    """The request or token budget of this invocation is spent (answers so far are cached)."""


class EndpointFailed(ConfigError):
    """The endpoint refused request after request as it would any (a wrong key, model or URL, nothing listening)."""


# Tokens a chat template may add around each message (role markers, separators) and before the answer.
TEMPLATE_TOKENS = 16


def token_reservation(body: dict[str, Any], default_completion: int = 0) -> int:
    """The most tokens a request may cost, which the budget holds while it is in flight: its messages' UTF-8 bytes as
    JSON (a byte-level BPE tokenizer makes no more tokens than bytes) with `TEMPLATE_TOKENS` each and for the answer's
    start, and its completion bound, ``max_tokens`` (`default_completion` for a request without one)."""
    prompt = sum(len(json.dumps(m, ensure_ascii=False).encode("utf-8", "surrogatepass")) + TEMPLATE_TOKENS
                 for m in body.get("messages") or ())
    completion = body.get("max_tokens") or body.get("max_completion_tokens") or default_completion
    return prompt + TEMPLATE_TOKENS + int(completion)


class StageClient(ChatClient):
    """`ChatClient` whose cache key is the request content only and whose sends draw on a ledger.

    `completion_tokens`: what a request without ``max_tokens`` reserves of the token budget for its answer."""

    def __init__(self, *args, ledger=None, completion_tokens: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ledger = ledger
        self.completion_tokens = completion_tokens

    def cache_key(self, body: dict[str, Any], salt: str = "") -> str:
        blob = json.dumps({"body": body, "salt": salt}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _cache_get(self, key: str, folder: str = ""):
        found = super()._cache_get(key, folder)
        if found is not None and self.ledger is not None:
            self.ledger.hit()
        return found

    def _call(self, body: dict[str, Any]) -> ChatResult:
        if self.ledger is None:
            return super()._call(body)
        reserved = token_reservation(body, self.completion_tokens)
        if not self.ledger.take(reserved):
            raise BudgetExhausted("llm budget spent")
        try:
            result = super()._call(body)
        except BaseException:  # stopped by the budget before a retry, or interrupted: nothing came to count
            self.ledger.release(reserved)
            raise
        refused = f"{recorded_uri(self.url)} (model {self.model}): {result.error}" if result.endpoint_failed else ""
        if self.ledger.add(result.prompt_tokens, result.completion_tokens, result.ok, max(0, result.attempts - 1),
                           refused, result.tokens_known or not result.ok, reserved):
            raise EndpointFailed(refused)
        return result

    def _before_retry(self) -> None:
        if self.ledger is not None and not self.ledger.take():  # a retry is sent, and paid for, like any request
            raise BudgetExhausted("llm budget spent")


EARLIER_STAGE_UNANSWERED = "earlier_stage_unanswered"
# Reasons in a stage's rows that the next run may change: it asks those requests again.
UNANSWERED = frozenset({"request_failed", EARLIER_STAGE_UNANSWERED})


def unanswered_reason(answer: ChatResult) -> str:
    """Why a request has no answer, as a stage's rows name it: ``request_refused`` when the server refuses the request
    itself as it would every time (recorded in the cache: not asked again at that endpoint),
    ``earlier_stage_unanswered`` when it was not sent (`UnsentClient`), else ``request_failed`` (nothing recorded:
    the next run asks again)."""
    if answer.not_sent:
        return EARLIER_STAGE_UNANSWERED
    return "request_refused" if answer.refused else "request_failed"


def all_unanswered(rows: Sequence[dict[str, Any]], failed_status: str) -> bool:
    """Whether a stage's rows of one trajectory (each with ``status`` and ``reason``) say it produced nothing for it
    for want of answers: every row has `failed_status` and a reason of `UNANSWERED`."""
    return bool(rows) and all(r["status"] == failed_status and r["reason"] in UNANSWERED for r in rows)


class UnsentClient:
    """Stands in for the clients when a stage is given trajectories an earlier stage got no answer for: every request
    comes back at once without an answer and unsent, so the stage drops what needed it as it would after a failed
    request (reason ``earlier_stage_unanswered``) and spends nothing on a prompt that lacks the earlier stage's
    output; the next run, which asks the earlier stage again, asks these too."""

    max_concurrency = 1
    ERROR = "not sent: an earlier stage got no answer for this trajectory"

    def chat(self, messages: Sequence[dict[str, str]], cache_salt: str = "", **params: Any) -> ChatResult:
        return ChatResult(None, error=self.ERROR, not_sent=True)

    def chat_many(self, requests: Sequence[Sequence[dict[str, str]]], **params: Any) -> list[ChatResult]:
        return [self.chat(m) for m in requests]


@dataclass(frozen=True)
class Request:
    """One chat request of a stage: messages, a cache salt (distinct samples of one prompt), parameters."""

    messages: tuple[dict[str, str], ...] | list[dict[str, str]]
    salt: str = ""
    params: dict[str, Any] = field(default_factory=dict)


def send_all(client: ChatClient | UnsentClient, requests: Sequence[Request]) -> list[ChatResult]:
    """Every request through `client`, up to its concurrency at a time; results in order."""
    if not requests:
        return []
    return map_in_threads(lambda r: client.chat(list(r.messages), cache_salt=r.salt, **r.params), requests,
                          client.max_concurrency)


@dataclass
class StageContext:
    """What a stage sees: the resolved config, the clients (None in a dry run), counters."""

    cfg: dict[str, Any]
    client: StageClient | UnsentClient | None = None
    judge: StageClient | UnsentClient | None = None
    stats: Stats = field(default_factory=Stats)

    @property
    def llm(self) -> dict[str, Any]:
        return self.cfg["llm"]

    def gen_params(self, **extra: Any) -> dict[str, Any]:
        return {"temperature": self.llm["temperature"], "max_tokens": self.llm["max_completion_tokens"], **extra}

    def redacted(self, text: str | None, count: bool = True) -> str | None:
        """Model-written text that enters the trajectories (an instruction, a reasoning, a block), with secrets
        replaced as in the input (the run's ``[redact]``) and counted in ``redacted.<kind>``: a model may repeat
        or make up a key, and nothing past ``raw/`` holds one. `count`: False for text drawn from text already
        counted (a block's keywords)."""
        if not text or not self.cfg["redact"]["enabled"]:
            return text
        out, counts = redact_text(text, emails=bool(self.cfg["redact"]["emails"]))
        for kind, n in sorted(counts.items()) if count else ():
            self.stats.add(f"redacted.{kind}", n)
        return out

    def send(self, requests: Sequence[Request], judge: bool = False) -> list[ChatResult]:
        client = self.judge if judge else self.client
        if client is None:
            raise RuntimeError("no client in a dry run")
        return send_all(client, requests)


class LLMStage(Protocol):
    name: str
    schema: Any
    uses_judge: bool  # whether it sends to the judge (``ctx.send(…, judge=True)``); a stage without it sends none

    def wants(self, traj: Trajectory, ctx: StageContext) -> bool: ...

    def process(self, trajs: list[Trajectory], ctx: StageContext) -> list[dict[str, Any]]: ...

    def dry_requests(self, traj: Trajectory, ctx: StageContext) -> tuple[list[Request], tuple[int, int]]: ...

    def apply(self, traj: Trajectory, rows: list[dict[str, Any]], ctx: StageContext) -> dict[int, str] | Applied: ...
