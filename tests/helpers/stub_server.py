"""A tiny OpenAI-compatible stub for fault injection only (5xx, 429, timeouts, broken JSON).

Real behaviour is tested against the real llama.cpp server; this stub exists to make a server
fail on purpose, which a real one will not do on demand. ``Campaign`` fails a seeded ~20 % of
requests in every way a server can (statuses with and without Retry-After, truncated and empty
bodies, missing choices, a null answer, fields of the wrong type, hangs; streamed requests also
with events of the wrong shape and streams of null deltas), and echoes the Authorization header
in its error bodies as careless servers do.
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
# "{authorization}" in a body is replaced by the request's Authorization header (an echo),
# "{headers}" by every header of the request, "{path}" by its path and query.
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


def sse_body(events: list[object]) -> str:
    """Server-sent events as a server streams them: one ``data:`` line per event, then [DONE]."""
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def chunk(delta: object, finish: str | None = None) -> dict[str, object]:
    """One streamed chat event (the shape llama-cpp-python and vLLM send)."""
    return {"id": "x", "object": "chat.completion.chunk", "model": "stub",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


def stream_body(content: str) -> str:
    """A well-formed stream of ``content``: a role event, the text in pieces, the finish, usage."""
    pieces = [content[i : i + 4] for i in range(0, len(content), 4)]
    events: list[object] = [chunk({"role": "assistant"})]
    events += [chunk({"content": p}) for p in pieces] + [chunk({}, "stop")]
    events.append({"id": "x", "choices": [], "usage": {"completion_tokens": len(pieces)}})
    return sse_body(events)


SSE = {"Content-Type": "text/event-stream"}


def always(
    status: int, body: str = "", delay: float = 0.0, headers: dict[str, str] | None = None
) -> Behaviour:
    return lambda r: (status, body, delay, headers or {})


def fail_then_ok(failures: int, status: int = 503, headers: dict[str, str] | None = None) -> Behaviour:
    return lambda r: (status, "overloaded", 0.0, headers or {}) if r.index < failures else (200, OK_BODY, 0.0)


def reshaped(path: str, value: object) -> str:
    """OK_BODY with the field at ``path`` ("choices.0.message") replaced by ``value``."""
    body = json.loads(OK_BODY)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    target = body
    for p in parents:
        target = target[p]
    target[last] = value
    return json.dumps(body)


ECHO = '{"error": {"message": "rejected request with Authorization: {authorization}"}}'
Fault = tuple[int, str, dict[str, str], bool]  # (status, body, headers, hangs)
# Every way a server can fail any request, streamed or not.
STATUS_FAULTS: dict[str, Fault] = {
    "500": (500, ECHO, {}, False),
    "503": (503, ECHO, {}, False),
    "503 Retry-After": (503, ECHO, {"Retry-After": "1"}, False),
    "429": (429, ECHO, {}, False),
    "429 Retry-After": (429, ECHO, {"Retry-After": "1"}, False),
    "empty body": (200, "", {}, False),
    "hang": (200, OK_BODY, {}, True),
}
# ... a response body that is not a response (type confusion: a field of another JSON type) ...
FAULTS: dict[str, Fault] = {
    **STATUS_FAULTS,
    "truncated JSON": (200, OK_BODY[: len(OK_BODY) // 2], {}, False),
    "no choices": (200, '{"id": "x", "object": "chat.completion", "model": "stub"}', {}, False),
    "content null": (200, chat_body(None), {}, False),
    "choices a string": (200, reshaped("choices", "oops"), {}, False),
    "message a string": (200, reshaped("choices.0.message", "oops"), {}, False),
    "usage a string": (200, reshaped("usage", "n/a"), {}, False),
    "logprobs a number": (200, reshaped("choices.0.logprobs", 5), {}, False),
}
# ... and a stream that is not one: events of the wrong shape, an answer that is all null.
STREAM_FAULTS: dict[str, Fault] = {
    **STATUS_FAULTS,
    "event choices a string": (200, sse_body([{"choices": "oops"}]), SSE, False),
    "event delta a string": (200, sse_body([chunk("oops"), chunk({}, "stop")]), SSE, False),
    "event not an object": (200, sse_body([[1, 2], chunk({}, "stop")]), SSE, False),
    "event usage a string": (200, sse_body([chunk({"content": "4"}, "stop"), {"usage": "n/a"}]), SSE, False),
    "null deltas": (
        200,
        sse_body([chunk({"content": None})] * 3 + [chunk({"content": None}, "stop")]),
        SSE,
        False,
    ),
    "null delta objects": (200, sse_body([chunk(None), chunk(None, "stop")]), SSE, False),
    "stream cut off": (200, sse_body([chunk({"content": "4"})])[: -len("data: [DONE]\n\n")], SSE, False),
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
        streamed = bool(request.body.get("stream"))
        if self.active and rng.random() < self.rate:
            # The kinds in a seeded order, cycled: every kind occurs once len(faults) faults have.
            faults = STREAM_FAULTS if streamed else FAULTS
            order = sorted(faults)
            random.Random(self.seed).shuffle(order)
            kind = order[len(self.injected) % len(order)]
            self.injected.append((request.index, kind))
            status, body, headers, hangs = faults[kind]
            return status, body, self.hang_s if hangs else 0.0, headers
        if streamed:
            return 200, stream_body(self.answer(request)), 0.0, SSE
        return 200, chat_body(self.answer(request)), 0.0


def _json(raw: bytes) -> dict[str, Any]:
    # A server answers whatever it is sent, a body nested 50,000 deep included.
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


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
            headers = {"Content-Type": "application/json", **(headers or {})}
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
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
                request = Request(len(sent), _json(raw), authorization)
                status, body, delay, *more = behaviour(request)
                sent.append(status)
            time.sleep(delay)
            with suppress(BrokenPipeError, ConnectionResetError):
                echoed = "; ".join(f"{k}: {v}" for k, v in self.headers.items())
                body = body.replace("{authorization}", authorization).replace("{headers}", echoed)
                body = body.replace("{path}", self.path)
                self._reply(status, body, *more)

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
