"""The lean HTTP/1.1 transport: response framing, chunked bodies, servers that drop connections."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest

from servediff.engines.http1 import CHUNKED, UNTIL_CLOSE, Endpoint, TransportError, dechunk, parse_head
from servediff.engines.openai_http import HTTPEngine, HTTPOptions
from servediff.suites import SuiteOptions, load_suite
from servediff.types import Completion, SamplingParams
from tests.helpers.stub_server import OK_BODY


def test_parse_head_waits_for_the_blank_line_and_reads_framing() -> None:
    assert parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n") is None
    head = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
    assert head is not None and (head.status, head.end, head.length, head.keep_alive) == (200, 38, 5, True)
    head = parse_head(b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    assert head is not None and (head.status, head.length, head.keep_alive) == (503, CHUNKED, False)
    head = parse_head(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}")
    assert head is not None and (head.length, head.keep_alive) == (UNTIL_CLOSE, False)
    with pytest.raises(TransportError):
        parse_head(b"garbage\r\n\r\n")


def test_dechunk_needs_every_chunk_and_skips_extensions_and_trailers() -> None:
    body = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: y\r\n\r\nNEXT"
    assert dechunk(body, 0) == (b"Wikipedia", len(body) - 4)
    for cut in range(len(body) - 4):
        assert dechunk(body[:cut], 0) is None
    assert dechunk(b"3\r\nabc\r\n0\r\n\r\n", 0) == (b"abc", 13)


def test_endpoint_refuses_https_and_keeps_the_key_in_a_header() -> None:
    with pytest.raises(ValueError):
        Endpoint.from_url("https://example.com", None)
    ep = Endpoint.from_url("http://127.0.0.1:8000/prefix", "sk-1")
    assert (ep.origin, ep.host, ep.port) == ("http://127.0.0.1:8000", "127.0.0.1", 8000)
    assert b"Authorization: Bearer sk-1\r\n" in ep.headers


def _read_request(conn: socket.socket, buf: bytes) -> tuple[bytes, bytes] | None:
    """One request (head + Content-Length body) from ``conn``; the rest of the buffer."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    lengths = [int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")]
    length = lengths[0] if lengths else 0
    while len(rest) < length:
        rest += conn.recv(65536)
    return head, rest[length:]


@contextmanager
def chunked_server(
    close_every: int, delay_s: Callable[[int], float] = lambda n: 0.0
) -> Iterator[tuple[str, dict[str, int]]]:
    """Answers with chunked bodies, split over several writes; drops each connection after
    ``close_every`` responses, as servers do with idle keep-alive connections. Waits
    ``delay_s(n)`` before answering the n-th POST (from 0)."""
    counts = {"requests": 0, "connections": 0}
    listener = socket.create_server(("127.0.0.1", 0))
    models = json.dumps({"data": [{"id": "stub"}]}).encode()

    def serve(conn: socket.socket) -> None:
        buf, served = b"", 0
        # suppress: a client that timed out has closed the connection this answers late on
        with conn, suppress(OSError):
            while (got := _read_request(conn, buf)) is not None:
                head, buf = got
                body = models if head.startswith(b"GET") else OK_BODY.encode()
                if not head.startswith(b"GET"):
                    time.sleep(delay_s(counts["requests"]))
                    counts["requests"] += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for i in range(0, len(body), 50):
                    piece = body[i : i + 50]
                    conn.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                conn.sendall(b"0\r\n\r\n")
                served += 1
                if served == close_every:
                    return

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            counts["connections"] += 1
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", counts
    finally:
        listener.close()


def test_chunked_responses_over_connections_the_server_drops() -> None:
    with chunked_server(close_every=2) as (url, counts):
        engine = HTTPEngine(HTTPOptions(base_url=url, retokenize=False, max_retries=0))
        out: list[Completion] = []
        samples = load_suite("prompts", SuiteOptions(limit=5)).samples
        engine.generate(samples, SamplingParams(max_tokens=8), out.append)
    assert [c.error for c in out] == [None] * 5
    assert {c.text for c in out} == {"stub answer"} and {c.n_tokens for c in out} == {2}
    # No retries were allowed: a dropped idle connection is reopened, never counted as a failure,
    # and no request is sent twice.
    assert counts["requests"] == 5 and counts["connections"] >= 3


def test_a_server_without_a_tokenize_endpoint_answered_by_concurrent_items() -> None:
    """Items in flight together all learn that /tokenize is not there (404): each drops the
    endpoint from the ones still tried, and none of them fails for it. (Two items getting the
    404 at once once made the second fail: the endpoint was no longer in the list.)"""
    from tests.helpers.stub_server import always, stub_server

    with stub_server(always(200, OK_BODY)) as (url, _):
        engine = HTTPEngine(HTTPOptions(base_url=url, concurrency=8, max_retries=0))
        out: list[Completion] = []
        samples = load_suite("prompts", SuiteOptions(limit=16)).samples
        engine.generate(samples, SamplingParams(max_tokens=8), out.append)
    assert [c.error for c in out] == [None] * 16
    assert {c.token_source for c in out} == {None}  # no tokenizer answered


def test_each_request_on_a_kept_alive_connection_gets_its_own_whole_timeout() -> None:
    """One timer watches a connection's deadlines: the requests after the first are timed from
    when they were sent, not from the first one's deadline (five 0.2 s answers on one connection
    with a 0.5 s timeout all succeed), and one that hangs still times out."""
    with chunked_server(close_every=100, delay_s=lambda n: 0.2 if n < 5 else 3.0) as (url, counts):
        engine = HTTPEngine(HTTPOptions(base_url=url, retokenize=False, max_retries=0, timeout_s=0.5))
        out: list[Completion] = []
        samples = load_suite("prompts", SuiteOptions(limit=6)).samples
        engine.generate(samples, SamplingParams(max_tokens=8), out.append)
    assert [c.error for c in out[:5]] == [None] * 5 and counts["connections"] == 2  # /v1/models's, one
    assert out[5].error and "timeout after 0.5 s" in out[5].error and 0.45 < out[5].latency_s < 1.5
