"""A small client for any OpenAI-compatible chat endpoint (vLLM, SGLang, a hosted API).

Standard library only (``urllib``): nothing to install for users who only build shards. What it
adds over a bare request:

- a concurrency limit shared by every thread that uses one client (`max_concurrency`);
- retries with exponential backoff on HTTP 429 and 5xx, timeouts and connection errors (answers cut
  short or not HTTP included), honouring
  a ``Retry-After`` header (capped at `max_backoff_s`); other 4xx answers fail at once, with the start of
  the server's message in the reason (`ChatResult.endpoint_failed` marks those that say the endpoint, key
  or model is wrong, and connections refused on every try; `ChatResult.refused` those that say the request
  itself is, `refuses_the_request`);
- a per-request timeout (for the whole answer: a server sending its answer slowly is cut off too);
- a disk cache keyed by the request content (endpoint, model, messages, parameters — never the API
  key), on any fsspec URL (`stages.llm.answer_cache`), so re-scoring the same predictions costs no calls;
  successful answers are cached (not one cut at the token limit, nor an empty one), and so are refusals of
  the request itself, keyed like answers and by the endpoint: the same request to the same endpoint is not
  asked again, while another endpoint (one with a longer context, say), model or prompt is; transient
  failures (429, 5xx, timeouts, connections) never are;
- accounting per call (`ChatResult`) and in total (`Usage`): calls, HTTP attempts, retries, cache
  hits, failures, prompt and completion tokens.

Example::

    client = ChatClient("http://localhost:8000/v1", model="qwen", cache_dir="~/.cache/lwm-judge")
    result = client.chat([{"role": "user", "content": "hi"}])
    result.text, result.ok, client.usage.as_dict()
"""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from stages.llm.answer_cache import REFUSED, AnswerCache

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# The endpoint itself is wrong (the key, the model or the path), whatever was asked: no answer will come from it.
ENDPOINT_STATUS = frozenset({401, 403, 404})
# Client errors about the account or the way to the server (payment, a proxy's login), not about the request.
ACCOUNT_STATUS = frozenset({402, 407})
ERROR_DETAIL_CHARS = 200  # of a server's error message kept in a failure's reason

T = TypeVar("T")
R = TypeVar("R")


def refuses_the_request(status: int) -> bool:
    """Whether HTTP `status` says the request itself is wrong, as it will be every time it is sent (400 for a prompt
    over the model's context, 413, 422): a 4xx that is not retried and is not about the endpoint, key or account."""
    return 400 <= status < 500 and status not in RETRY_STATUS | ENDPOINT_STATUS | ACCOUNT_STATUS


def map_in_threads(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``[fn(x) for x in items]`` on up to `workers` threads, results in order.

    An exception from `fn` is raised here once the items already begun have ended, and no further item is begun,
    as with a thread pool's ``map``. Unlike a `ThreadPoolExecutor` left by an interrupt (Ctrl-C, SIGTERM on this
    thread), an interrupt ends it at once: no item not yet begun is started (a pool's exit would still send every
    queued request), and the threads, daemons, do not hold the process's exit while a request waits for its
    answer (up to ``timeout_s``, per retry)."""
    if not items:
        return []
    results: list[Any] = [None] * len(items)
    failure: list[BaseException] = []
    lock, stop, done = threading.Lock(), threading.Event(), threading.Event()
    state = {"next": 0, "ended": 0, "active": 0}

    def work() -> None:
        while True:
            with lock:
                index = state["next"]
                if stop.is_set() or index >= len(items):
                    if not state["active"] and (stop.is_set() or state["ended"] == len(items)):
                        done.set()
                    return
                state["next"], state["active"] = index + 1, state["active"] + 1
            try:
                results[index] = fn(items[index])
            except BaseException as exc:  # raised on the caller's thread, as `pool.map` would
                with lock:
                    failure.append(exc)
                stop.set()
            with lock:
                state["active"] -= 1
                state["ended"] += 1

    try:
        for _ in range(max(1, min(workers, len(items)))):
            threading.Thread(target=work, name="llm-request", daemon=True).start()
        while not done.wait(0.5):  # a bounded wait: an interrupt reaches this thread between waits
            pass
    finally:
        stop.set()  # after an interrupt: the threads take no further item
    if failure:
        raise failure[0]
    return results


@dataclass
class ChatResult:
    """One chat call: the answer text (None on failure), the error, and what it cost."""

    text: str | None
    error: str = ""
    attempts: int = 0
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    endpoint_failed: bool = False  # the endpoint refused as it would any request: 401/403/404, or nothing listening
    tokens_known: bool = True  # False: the answer came without token counts (``usage``), so they count 0
    refused: bool = False  # the server refuses this request as it would every time (`refuses_the_request`)
    not_sent: bool = False  # never sent: what it needed from an earlier model stage is missing (`stages.llm.stage`)

    @property
    def ok(self) -> bool:
        return self.text is not None


@dataclass
class Usage:
    """Totals over every call of one client."""

    calls: int = 0
    attempts: int = 0
    retries: int = 0
    cache_hits: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # failures per reason
    refused: dict[str, int] = field(default_factory=dict)  # of those, refusals of the request itself (cached)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ChatClient:
    """Chat completions against ``{base_url}/chat/completions`` with limits, retries and a cache."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        max_concurrency: int = 8,
        cache_dir: str | None = None,
        default_params: dict[str, Any] | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key = model, api_key
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.max_concurrency = max(1, int(max_concurrency))
        self.default_params = dict(default_params or {})
        self.usage = Usage()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._cache = AnswerCache(cache_dir) if cache_dir else None

    # ---------------------------------------------------------------------------------- public

    def chat(self, messages: Sequence[dict[str, str]], cache_salt: str = "", **params: Any) -> ChatResult:
        """One chat completion; never raises for endpoint trouble (the result carries the error)."""
        body = {"model": self.model, "messages": list(messages), **self.default_params, **params}
        key = self.cache_key(body, cache_salt)
        start = time.monotonic()
        cached = self._cache_get(key)
        result = self._result_from(cached, attempts=0, cached=True) if cached is not None else None
        if result is None or not result.ok:  # an empty answer cached by an older version is asked again
            result = self._refusal(key)
        if result is None:
            result = self._call(body)
            if result.ok:
                self._cache_put(key, result)
            elif result.refused:
                self._cache_put(self.refusal_key(key), result)
        result.seconds = time.monotonic() - start
        self._account(result)
        return result

    def chat_many(self, requests: Sequence[Sequence[dict[str, str]]], **params: Any) -> list[ChatResult]:
        """`chat` for each message list, up to `max_concurrency` at a time, results in order."""
        if not requests:
            return []
        return map_in_threads(lambda m: self.chat(m, **params), requests, self.max_concurrency)

    def cache_key(self, body: dict[str, Any], salt: str = "") -> str:
        """sha256 of the endpoint and the canonical request body (the API key is not part of it)."""
        blob = json.dumps({"url": self.url, "body": body, "salt": salt}, sort_keys=True, ensure_ascii=False)
        # surrogatepass: a lone surrogate in a prompt (a model's broken output) is hashed, not an error; any other
        # text hashes to the key it always had, so existing caches stay valid
        return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()

    def refusal_key(self, key: str) -> str:
        """The key of a refusal of the request whose answer would be cached under `key`: that key and this client's
        endpoint, so that another server (which may take a longer prompt) is asked, whatever the answers' keys hold."""
        return hashlib.sha256(json.dumps({"refused": key, "url": self.url}).encode("utf-8")).hexdigest()

    # --------------------------------------------------------------------------------- private

    def _call(self, body: dict[str, Any]) -> ChatResult:
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        error, attempts = "", 0
        for attempt in range(self.max_retries + 1):
            attempts = attempt + 1
            retry_after, unreachable = None, False
            if attempt:
                self._before_retry()
            with self._slots:
                try:
                    req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
                    deadline = time.monotonic() + self.timeout_s
                    with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                        payload = json.loads(_read_until(resp, deadline).decode("utf-8"))
                    # a 200 without message content is not retried: the server did answer
                    return self._result_from(payload, attempts=attempts, cached=False)
                except urllib.error.HTTPError as exc:
                    error = f"HTTP {exc.code}" + (f": {detail}" if (detail := self._error_detail(exc)) else "")
                    if exc.code not in RETRY_STATUS:
                        return ChatResult(None, error=error, attempts=attempts,
                                          endpoint_failed=exc.code in ENDPOINT_STATUS,
                                          refused=refuses_the_request(exc.code))
                    retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
                except TimeoutError:
                    error = "timeout"
                except urllib.error.URLError as exc:
                    error = "timeout" if isinstance(exc.reason, TimeoutError) else f"connection: {exc.reason}"
                    unreachable = isinstance(exc.reason, ConnectionRefusedError | socket.gaierror | str)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    error = "invalid JSON from endpoint"
                except http.client.HTTPException as exc:  # an answer cut short or not HTTP: a dropped connection
                    error = f"connection: {type(exc).__name__}"
                except (ConnectionError, OSError) as exc:
                    error = f"connection: {exc}"
                    unreachable = isinstance(exc, ConnectionRefusedError | socket.gaierror)
            if attempt < self.max_retries:
                with self._lock:
                    self.usage.retries += 1
                time.sleep(self._backoff(attempt, retry_after))
        # refused on every try: nothing listens there (or the host has no address)
        return ChatResult(None, error=error, attempts=attempts, endpoint_failed=unreachable)

    def _error_detail(self, exc: urllib.error.HTTPError) -> str:
        """The start of an error answer's message (what the server says is wrong: a wrong key, an unknown model, a
        prompt over the context), on one line, cut to `ERROR_DETAIL_CHARS`, with the key and any secret removed."""
        try:
            raw = exc.read(8192)
        except (OSError, http.client.HTTPException):
            return ""
        text = raw.decode("utf-8", "replace").strip()
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if isinstance(body, dict):  # OpenAI and vLLM: {"error": {"message": …}}; others: {"message": …}, {"detail": …}
            inner = body.get("error")
            found = next((v for v in (inner.get("message") if isinstance(inner, dict) else inner,
                                      body.get("message"), body.get("detail")) if isinstance(v, str) and v), None)
            text = found if found is not None else text
        text = " ".join(text.split())
        if self.api_key:
            text = text.replace(self.api_key, "<SECRET:api_key>")
        from stages.redact import redact_text  # on an error answer only: the client itself needs nothing else

        text = redact_text(text)[0]
        return text if len(text) <= ERROR_DETAIL_CHARS else text[: ERROR_DETAIL_CHARS - 1] + "…"

    def _before_retry(self) -> None:
        """Called before each retry is sent; a subclass may draw it from a budget (and raise when it is spent)."""

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff_s)
        base = self.backoff_s * (2**attempt)
        return min(base * (0.5 + random.random() / 2), self.max_backoff_s)

    @staticmethod
    def _result_from(payload: dict[str, Any], attempts: int, cached: bool) -> ChatResult:
        """The answer of a chat completion. A server with a reasoning parser (vLLM, SGLang) sends the thinking apart,
        as ``message.reasoning_content`` (or ``reasoning``): it is put back before the answer as the
        ``<think>…</think>`` block a model without that parser writes, which every reader of answers expects. An
        answer cut at the token limit (``finish_reason`` ``length``) or without text is a failure, never cached: the
        same request would only get it again."""
        try:
            choice = payload["choices"][0]
            message = choice["message"]
            text = message["content"]
        except (KeyError, IndexError, TypeError):
            choice, message, text = {}, {}, None
        usage = payload.get("usage") if isinstance(payload, dict) else None
        error = ""
        if not isinstance(text, str):
            text, error = None, "answer without message content"
        elif isinstance(choice, dict) and choice.get("finish_reason") == "length":
            text, error = None, "answer cut short at the token limit (finish_reason length)"
        elif not text.strip():
            text, error = None, "empty answer"
        else:
            thinking = next((v for v in (message.get("reasoning_content"), message.get("reasoning"))
                             if isinstance(v, str) and v.strip()), None) if isinstance(message, dict) else None
            if thinking is not None and "<think>" not in text:
                text = f"<think>\n{thinking.strip()}\n</think>\n{text.lstrip()}"
        return ChatResult(
            text,
            error=error,
            attempts=attempts,
            cached=cached,
            tokens_known=isinstance(usage, dict) and "completion_tokens" in usage,
            prompt_tokens=_token_count(usage, "prompt_tokens"),
            completion_tokens=_token_count(usage, "completion_tokens"),
        )

    def _account(self, result: ChatResult) -> None:
        with self._lock:
            u = self.usage
            u.calls += 1
            u.attempts += result.attempts
            u.cache_hits += result.cached
            if not result.ok:
                u.failures += 1
                u.errors[result.error] = u.errors.get(result.error, 0) + 1
            if result.refused:
                u.refused[result.error] = u.refused.get(result.error, 0) + 1
            if not result.cached:
                u.prompt_tokens += result.prompt_tokens
                u.completion_tokens += result.completion_tokens

    def _refusal(self, key: str) -> ChatResult | None:
        """The recorded refusal of the request of answer key `key` at this endpoint, replayed; None if there is none."""
        found = self._cache_get(self.refusal_key(key), REFUSED)
        refused = found.get("refused") if found is not None else None
        if not isinstance(refused, dict) or not isinstance(refused.get("error"), str):
            return None
        return ChatResult(None, error=refused["error"], cached=True, refused=True)

    def _cache_get(self, key: str, folder: str = "") -> dict[str, Any] | None:
        return self._cache.read(key, folder) if self._cache is not None else None

    def _cache_put(self, key: str, result: ChatResult) -> None:
        """Record `result` under `key`: an answer, or a refusal (under `refusal_key`) in the refusals' folder."""
        if self._cache is None:
            return
        if result.refused:
            self._cache.write(key, {"refused": {"error": result.error}}, REFUSED)
            return
        self._cache.write(key, {"choices": [{"message": {"role": "assistant", "content": result.text}}],
                                "usage": {"prompt_tokens": result.prompt_tokens,
                                          "completion_tokens": result.completion_tokens}})


def _read_until(resp, deadline: float) -> bytes:
    """The body of `resp`, or `TimeoutError` once `deadline` passes: the socket's timeout bounds each read only, and
    a server (or proxy) that trickles its answer would otherwise hold the request for as long as it keeps sending."""
    chunks = []
    while chunk := resp.read1(65536):
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise TimeoutError("the answer took longer than the request's timeout")
    if getattr(resp, "length", None):  # the connection ended before the Content-Length it announced
        raise http.client.IncompleteRead(b"".join(chunks), resp.length)
    return b"".join(chunks)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _token_count(usage: Any, key: str) -> int:
    """A token count of an answer's ``usage``; 0 where the server sent none or something that is not a count (the
    answer itself is still good: only the accounting lacks it)."""
    value = usage.get(key) if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        return 0
    return int(min(value, 2**62))
