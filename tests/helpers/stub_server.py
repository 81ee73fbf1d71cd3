"""A tiny OpenAI-compatible stub for fault injection only (5xx, 429, timeouts, broken JSON).

Real behaviour is tested against the real llama.cpp server; this stub exists to make a server
fail on purpose, which a real one will not do on demand.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A behaviour gets the 0-based index of the POST request and returns (status, body, delay_s).
Behaviour = Callable[[int], tuple[int, str, float]]

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


def always(status: int, body: str = "", delay: float = 0.0) -> Behaviour:
    return lambda i: (status, body, delay)


def fail_then_ok(failures: int, status: int = 503) -> Behaviour:
    return lambda i: (status, "overloaded", 0.0) if i < failures else (200, OK_BODY, 0.0)


@contextmanager
def stub_server(behaviour: Behaviour) -> Iterator[tuple[str, list[int]]]:
    """Yields (base_url, statuses sent) for a server that answers POSTs by ``behaviour``."""
    sent: list[int] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._reply(200, json.dumps({"data": [{"id": "stub"}]}))
            else:
                self._reply(404, "{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if not self.path.startswith("/v1/"):
                self._reply(404, "{}")
                return
            with lock:
                index = len(sent)
                status, body, delay = behaviour(index)
                sent.append(status)
            time.sleep(delay)
            with suppress(BrokenPipeError, ConnectionResetError):
                self._reply(status, body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", sent
    finally:
        server.shutdown()
        server.server_close()
