"""A tiny OpenAI-compatible stub for fault injection only (5xx, 429, timeouts, broken JSON).

Real behaviour is tested against the real llama.cpp server; this stub exists to make a server
fail on purpose, which a real one will not do on demand. ``Campaign`` fails a seeded ~20 % of
requests in every way a server can (statuses with and without Retry-After, truncated and empty
bodies, missing choices, a null answer, hangs), and echoes the Authorization header in its error
bodies as careless servers do.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Request:
    index: int  # 0-based among the POSTs to /v1/
    body: dict[str, Any]
    authorization: str  # the header as received ("" when none)


# A behaviour answers a request with (status, body, delay_s) or (status, body, delay_s, headers).
# "{authorization}" in a body is replaced by the request's Authorization header (an echo).
Reply = tuple[int, str, float] | tuple[int, str, float, dict[str, str]]
Behaviour = Callable[[Request], Reply]

OK_BODY = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "model": "stub",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "stub answer"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
)


def chat_body(content: str | None) -> str:
    """A chat completion whose answer is ``content`` (None: the ``null`` a broken server sends)."""
    body = json.loads(OK_BODY)
    body["choices"][0]["message"]["content"] = content
    return json.dumps(body)


def always(
    status: int, body: str = "", delay: float = 0.0, headers: dict[str, str] | None = None
) -> Behaviour:
    return lambda r: (status, body, delay, headers or {})


def fail_then_ok(failures: int, status: int = 503, headers: dict[str, str] | None = None) -> Behaviour:
    return lambda r: (status, "overloaded", 0.0, headers or {}) if r.index < failures else (200, OK_BODY, 0.0)


ECHO = '{"error": {"message": "rejected request with Authorization: {authorization}"}}'
# Every way a server can fail a request, as (status, body, headers, hangs).
FAULTS: dict[str, tuple[int, str, dict[str, str], bool]] = {
    "500": (500, ECHO, {}, False),
    "503": (503, ECHO, {}, False),
    "503 Retry-After": (503, ECHO, {"Retry-After": "1"}, False),
    "429": (429, ECHO, {}, False),
    "429 Retry-After": (429, ECHO, {"Retry-After": "1"}, False),
    "truncated JSON": (200, OK_BODY[: len(OK_BODY) // 2], {}, False),
    "empty body": (200, "", {}, False),
    "no choices": (200, '{"id": "x", "object": "chat.completion", "model": "stub"}', {}, False),
    "content null": (200, chat_body(None), {}, False),
    "hang": (200, OK_BODY, {}, True),
}


@dataclass
class Campaign:
    """Fails about ``rate`` of the requests, the fault drawn from ``FAULTS`` by ``seed`` and the
    request's index (so a run against it is reproducible); answers the rest with ``answer``.
    Setting ``active`` to False stops the faults."""

    answer: Callable[[Request], str]
    seed: int = 0
    rate: float = 0.2
    hang_s: float = 2.0
    active: bool = True
    injected: list[tuple[int, str]] = field(default_factory=list)  # (request index, fault)

    def __call__(self, request: Request) -> Reply:
        rng = random.Random(f"{self.seed}:{request.index}")
        if self.active and rng.random() < self.rate:
            # The kinds in a seeded order, cycled: every kind occurs once ten faults have.
            order = sorted(FAULTS)
            random.Random(self.seed).shuffle(order)
            kind = order[len(self.injected) % len(order)]
            self.injected.append((request.index, kind))
            status, body, headers, hangs = FAULTS[kind]
            return status, body, self.hang_s if hangs else 0.0, headers
        return 200, chat_body(self.answer(request)), 0.0


@contextmanager
def stub_server(behaviour: Behaviour) -> Iterator[tuple[str, list[int]]]:
    """Yields (base_url, statuses sent) for a server that answers POSTs by ``behaviour``."""
    sent: list[int] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._reply(200, json.dumps({"data": [{"id": "stub"}]}))
            else:
                self._reply(404, "{}")

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if not self.path.startswith("/v1/"):
                self._reply(404, "{}")
                return
            authorization = self.headers.get("Authorization", "")
            with lock:
                request = Request(len(sent), json.loads(raw or b"{}"), authorization)
                status, body, delay, *more = behaviour(request)
                sent.append(status)
            time.sleep(delay)
            with suppress(BrokenPipeError, ConnectionResetError):
                self._reply(status, body.replace("{authorization}", authorization), *more)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", sent
    finally:
        server.shutdown()
        server.server_close()


# --- run as a process: a fake vLLM whose speculative decoder does or does not engage -------------
_SPEC_METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{model_name="stub",engine="0"}} {drafts}.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{model_name="stub",engine="0"}} {draft_tokens}.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{model_name="stub",engine="0"}} {accepted}.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="stub",engine="0",position="0"}} {pos0}.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="stub",engine="0",position="1"}} {pos1}.0
"""


def serve_fake_vllm(port: int, engaged: bool) -> None:
    """/health, /version, /v1/models, /metrics and chat completions; with ``engaged`` every request
    adds 4 drafts of 2 tokens with 5 accepted (3 at position 0, 2 at 1), else the counters stay."""
    requests = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, body: str, kind: str = "application/json") -> None:
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            n = requests[0] if engaged else 0
            pages = {
                "/health": "{}",
                "/version": json.dumps({"version": "0.0.0-fake"}),
                "/v1/models": json.dumps({"data": [{"id": "stub"}]}),
                "/metrics": _SPEC_METRICS.format(
                    drafts=4 * n, draft_tokens=8 * n, accepted=5 * n, pos0=3 * n, pos1=2 * n
                ),
            }
            if self.path not in pages:
                self.send_response(404)
                self.end_headers()
                return
            self._reply(pages[self.path], "text/plain" if self.path == "/metrics" else "application/json")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if not self.path.startswith("/v1/"):  # e.g. a tokenize probe: not a generation
                self.send_response(404)
                self.end_headers()
                return
            requests[0] += 1
            self._reply(OK_BODY)

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    import os
    import sys

    # As vLLM does at start-up: print the arguments and the token it will use, secrets and all.
    print(f"non-default args: {sys.argv[3:]}; HF_TOKEN={os.environ.get('HF_TOKEN', '')}", flush=True)
    serve_fake_vllm(int(sys.argv[1]), engaged=sys.argv[2] == "engaged")
