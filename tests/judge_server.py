"""A loopback OpenAI-compatible judge for tests: answers /v1/chat/completions from a script.

``reply(body, n)`` (n = how many requests this server has seen before) returns one of
``Answer(text, usage)`` (200 with a chat completion), ``Status(code, retry_after)``,
``Slow(seconds, then)`` (sleeps, then answers `then` — longer than the client's timeout makes a
timeout) or ``Raw(bytes)`` (200 with a body that is not a chat completion).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    text: str
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 100, "completion_tokens": 20})


@dataclass
class Status:
    code: int
    retry_after: str | None = None


@dataclass
class Slow:
    seconds: float
    then: Any


@dataclass
class Raw:
    body: bytes


def scores_answer(value: int = 5, reasoning: str = "Looks right.") -> str:
    scores = {d: value for d in ("format", "factuality", "consistency", "realism", "quality")}
    return f"{reasoning}\n<final_evaluation>\n```json\n{json.dumps({'strengths': [], 'weaknesses': [], 'scores': scores})}\n```\n</final_evaluation>"


class JudgeServer:
    """Start with `with JudgeServer(reply) as judge:`; `judge.url` is the ``/v1`` base URL."""

    def __init__(self, reply) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self.send_response(404)
                    self.end_headers()
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    n = len(server.requests)
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._answer(server.reply(body, n))
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, action):
                while isinstance(action, Slow):
                    time.sleep(action.seconds)
                    action = action.then
                if isinstance(action, Status):
                    self.send_response(action.code)
                    if action.retry_after is not None:
                        self.send_header("Retry-After", action.retry_after)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if isinstance(action, Raw):
                    payload = action.body
                else:
                    payload = json.dumps({
                        "id": "x", "object": "chat.completion",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": action.text},
                                     "finish_reason": "stop"}],
                        "usage": {**action.usage,
                                  "total_tokens": action.usage["prompt_tokens"] + action.usage["completion_tokens"]},
                    }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                # the client may have given up (a timeout); that is the point of some tests
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
