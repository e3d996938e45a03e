"""The budget of the model-in-the-loop stages: a ledger shared by every worker, and its progress line.

``llm.max_requests`` / ``llm.max_tokens`` (0 = no limit) bound what one invocation sends, over every
worker: the driver creates one `Ledger` per stage run (`LedgerOwner`): a Ray actor when the run is on
Ray, an object in this process otherwise; a task finds it by the spec it carries (`ledger_for`).

The token budget holds with requests in flight: each request reserves the most it may cost (its prompt and
its ``max_tokens``: `stages.llm.stage.token_reservation`) before it is sent, and settles with the tokens its
answer's usage counts; a request whose reservation would pass the budget, with what is spent and what the
requests in flight hold, is not sent (``not_sent``) and the invocation stops.
`Ticker` prints a line with the ledger's counters every few seconds while a stage runs.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from typing import Any

# Requests in a row that the endpoint refused as it would refuse any (a wrong key, model or URL, nothing listening),
# with no answer between them, after which the invocation stops instead of sending the rest.
ENDPOINT_FAILURES_IN_A_ROW = 5


class Ledger:
    """Counters shared by every client of one stage run, and the budget they draw from."""

    def __init__(self, max_requests: int = 0, max_tokens: int = 0) -> None:
        self.max_requests, self.max_tokens = max_requests, max_tokens
        self.requests = self.cache_hits = self.failures = self.retries = self.answered = 0
        self.uncounted = 0  # answers without token counts: the token budget cannot see what they cost
        self.prompt_tokens = self.completion_tokens = 0
        self.reserved = 0  # tokens held by requests in flight, until their usage comes
        self.not_sent = 0  # requests the budget kept from being sent
        self.refused_reservation = 0  # the largest reservation the token budget refused
        self.exhausted = False
        self.endpoint_failures = 0  # in a row, since the last request that was not refused so
        self.endpoint_error = ""  # the last of them: endpoint, model and the server's reason
        self._lock = threading.Lock()

    def take(self, tokens: int = 0) -> bool:
        """Reserve one request and `tokens`, the most it may cost (a retry reserves none: its first try's reservation
        holds until `add` settles it). False, and exhausted, when the request budget is spent or the reservation would
        pass the token budget with what is spent and reserved: the request is not sent (counted in `not_sent`)."""
        with self._lock:
            spent_tokens = self.prompt_tokens + self.completion_tokens
            over_tokens = self.max_tokens and (spent_tokens >= self.max_tokens
                                               or spent_tokens + self.reserved + tokens > self.max_tokens)
            if (self.max_requests and self.requests >= self.max_requests) or over_tokens:
                self.exhausted = True
                self.not_sent += 1
                if over_tokens:
                    self.refused_reservation = max(self.refused_reservation, tokens)
                return False
            self.requests += 1
            self.reserved += tokens
            return True

    def release(self, tokens: int) -> None:
        """Give back a reservation whose request ended without an outcome to count (stopped by the budget on a retry)."""
        with self._lock:
            self.reserved -= tokens

    def add(self, prompt_tokens: int, completion_tokens: int, ok: bool, retries: int, endpoint_error: str = "",
            tokens_known: bool = True, reserved: int = 0) -> bool:
        """Count one request's outcome, settling the `reserved` tokens it held with those it cost; `endpoint_error`:
        why the endpoint refused it as it would any request; `tokens_known`: False for an answer without token
        counts. True when `ENDPOINT_FAILURES_IN_A_ROW` requests in a row were refused so: the endpoint has failed."""
        with self._lock:
            self.reserved -= reserved
            self.uncounted += not tokens_known
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.failures += not ok
            self.answered += ok
            self.retries += retries
            if endpoint_error:
                self.endpoint_failures += 1
                self.endpoint_error = endpoint_error
            else:
                self.endpoint_failures = 0
            return self.endpoint_failures >= ENDPOINT_FAILURES_IN_A_ROW

    def hit(self) -> None:
        with self._lock:
            self.cache_hits += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"requests": self.requests, "cache_hits": self.cache_hits, "failures": self.failures,
                    "retries": self.retries, "prompt_tokens": self.prompt_tokens,
                    "completion_tokens": self.completion_tokens, "exhausted": self.exhausted,
                    "answered": self.answered, "uncounted": self.uncounted, "reserved": self.reserved,
                    "not_sent": self.not_sent, "refused_reservation": self.refused_reservation,
                    "endpoint_failures": self.endpoint_failures,
                    "endpoint_error": self.endpoint_error}


_LOCAL_LEDGERS: dict[str, Ledger] = {}


class _RayLedgerProxy:
    def __init__(self, name: str) -> None:
        import ray

        self._ray, self._actor = ray, ray.get_actor(name)

    def take(self, *args) -> bool:
        return self._ray.get(self._actor.take.remote(*args))

    def release(self, *args) -> None:
        self._ray.get(self._actor.release.remote(*args))

    def add(self, *args) -> bool:
        return self._ray.get(self._actor.add.remote(*args))

    def hit(self) -> None:
        self._actor.hit.remote()

    def snapshot(self) -> dict[str, Any]:
        return self._ray.get(self._actor.snapshot.remote())


def ledger_for(spec: dict[str, Any]):
    """The ledger a task's spec names (in this process, or the Ray actor of the driver)."""
    if spec["kind"] == "local":
        return _LOCAL_LEDGERS[spec["name"]]
    return _RayLedgerProxy(spec["name"])


class LedgerOwner:
    """Creates the ledger of one invocation's model stages on the driver and removes it afterwards."""

    def __init__(self, executor, llm: dict[str, Any]) -> None:
        self.name = f"lwm-llm-{uuid.uuid4().hex[:12]}"
        self._actor = None
        if getattr(executor, "name", "") == "ray":
            import ray

            # a local Ray may still be starting in the background: the actor must go to that instance
            getattr(getattr(executor, "chosen", None) or executor, "wait_for_ray", lambda: None)()
            self._actor = ray.remote(num_cpus=0)(Ledger).options(name=self.name).remote(
                llm["max_requests"], llm["max_tokens"])
            self.spec = {"kind": "ray", "name": self.name}
            self.ledger = _RayLedgerProxy(self.name)
        else:
            _LOCAL_LEDGERS[self.name] = Ledger(llm["max_requests"], llm["max_tokens"])
            self.spec = {"kind": "local", "name": self.name}
            self.ledger = _LOCAL_LEDGERS[self.name]

    def close(self) -> None:
        _LOCAL_LEDGERS.pop(self.name, None)
        if self._actor is not None:
            import ray

            ray.kill(self._actor)
            self._actor = None


class Ticker:
    """A progress line every `every` seconds while a stage runs: requests, req/s, tokens."""

    def __init__(self, stage: str, ledger, mode: str, every: float = 2.0, stream=None) -> None:
        self.stage, self.ledger, self.mode, self.every = stage, ledger, mode, every
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.base = ledger.snapshot()  # the ledger serves the whole invocation: this stage's share is the rise
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def line(self) -> str:
        now, base = self.ledger.snapshot(), self.base
        s = {k: now[k] - base.get(k, 0) for k in ("requests", "cache_hits", "prompt_tokens", "completion_tokens",
                                                  "failures")}
        elapsed = max(time.monotonic() - self.start, 1e-9)
        tokens = s["prompt_tokens"] + s["completion_tokens"]
        return (f"[{self.stage}] {s['requests']:,} requests  {s['cache_hits']:,} cached  "
                f"{s['requests'] / elapsed:,.1f} req/s  {tokens:,} tokens  {s['failures']:,} failed  {elapsed:,.1f}s")

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._emit()

    def _emit(self) -> None:
        if self.mode == "off":
            return
        try:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
        except Exception:
            pass

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._emit()
