"""A lean keep-alive HTTP/1.1 client on asyncio for plain ``http://`` servers.

    servediff run --engine http --base-url http://127.0.0.1:8000 --concurrency 64 --out a.jsonl

Why it exists: against an instant local server (``bash bench/run.sh``) a general-purpose client
spends most of each request in its own bookkeeping (pool scans, timers, header objects, cookie
jars), and at high concurrency that — not the engine — sets the pace. This one does only what
the HTTP engine needs: each worker owns one connection, sends a JSON POST, and reads one
response (Content-Length, chunked, or until close) in a protocol callback. ``https://`` and
everything else goes through aiohttp (see ``openai_http.py``).

A streamed response (``post_stream``) is read the same way; the protocol also notes when each
piece of it arrived, as (body bytes received so far, time), so that the engine can time every
server-sent event without a second parser on the hot path.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from servediff import __version__

CHUNKED = -1  # body length markers in a parsed head
UNTIL_CLOSE = -2


class TransportError(Exception):
    """The connection failed (refused, reset, closed mid-response): a retry may help."""


class _Stale(TransportError):
    """A reused keep-alive connection was closed before any byte of the response came back."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go: host and port of an ``http://`` base URL, and the headers they share."""

    origin: str  # "http://host:port" exactly as it prefixes every request URL
    host: str
    port: int
    headers: bytes  # Host, User-Agent, Content-Type, Authorization: the same for every request

    @classmethod
    def from_url(cls, base_url: str, api_key: str | None) -> Endpoint:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not a plain http:// URL: {base_url!r}")
        origin = f"{parts.scheme}://{parts.netloc}"
        lines = [
            f"Host: {parts.netloc}",
            f"User-Agent: servediff/{__version__}",
            "Content-Type: application/json",
        ]
        if api_key:
            lines.append(f"Authorization: Bearer {api_key}")
        headers = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        return cls(origin, parts.hostname, parts.port or 80, headers)


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 3× as much, per response
class _Head:
    status: int
    end: int  # index of the first body byte
    length: int  # byte count, CHUNKED or UNTIL_CLOSE
    keep_alive: bool
    retry_after: str | None = None  # the Retry-After value of a 429 or 503, as sent


# What a POST gets back: status, body, and the Retry-After header of a 429/503 (else None).
Reply = tuple[int, bytes, str | None]
# When a streamed body arrived: (body bytes received so far, time.perf_counter()), in order.
Arrivals = list[tuple[int, float]]


def parse_head(buf: bytes | bytearray) -> _Head | None:
    """The status line and headers at the start of ``buf``; None until they are complete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    # Three lookups in the lower-cased head instead of a loop over every header: this runs
    # once per response, and only three headers decide the framing.
    head = bytes(buf[: end + 2]).lower()
    try:
        status = int(head[9:12]) if head.startswith(b"http/1.") else -1
    except ValueError:
        status = -1
    if status < 0:
        raise TransportError(f"malformed status line {bytes(buf[: min(end, 80)])!r}")
    keep_alive = not head.startswith(b"http/1.0")
    length = UNTIL_CLOSE
    value = _header(head, b"\r\ncontent-length:")
    if value is not None:
        length = int(value)
    value = _header(head, b"\r\ntransfer-encoding:")
    if value is not None and b"chunked" in value:
        length = CHUNKED
    value = _header(head, b"\r\nconnection:")
    if value is not None:
        keep_alive = value == b"keep-alive" or (keep_alive and value != b"close")
    if status in (204, 304) or 100 <= status < 200:
        length = 0
    retry_after = None
    if status in (429, 503):  # only these carry a Retry-After worth honouring; skip it on a 200
        value = _header(head, b"\r\nretry-after:")
        retry_after = value.decode("latin-1") if value is not None else None
    return _Head(status, end + 4, length, keep_alive and length != UNTIL_CLOSE, retry_after)


def _header(head: bytes, name: bytes) -> bytes | None:
    """The stripped value of header ``name`` (given as b"\\r\\nname:") in a lower-cased head."""
    i = head.find(name)
    if i < 0:
        return None
    start = i + len(name)
    return head[start : head.find(b"\r\n", start)].strip()


def dechunk(
    buf: bytes | bytearray, pos: int, spans: list[tuple[int, int]] | None = None
) -> tuple[bytes, int] | None:
    """A chunked body starting at ``pos``: (body, index after it), or None while incomplete.

    ``spans``, when given, receives (index of the chunk's data in ``buf``, its size) per chunk."""
    parts: list[bytes] = []
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        try:
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        except ValueError as exc:
            raise TransportError("malformed chunk size") from exc
        pos = eol + 2
        if size == 0:  # optional trailers, then an empty line
            if buf[pos : pos + 2] == b"\r\n":
                return b"".join(parts), pos + 2
            end = buf.find(b"\r\n\r\n", pos)
            return None if end < 0 else (b"".join(parts), end + 4)
        if len(buf) < pos + size + 2:
            return None
        parts.append(bytes(buf[pos : pos + size]))
        if spans is not None:
            spans.append((pos, size))
        pos += size + 2


def body_arrivals(stamps: Arrivals, spans: list[tuple[int, int]]) -> Arrivals:
    """Raw-buffer stamps (buffer length, time) → body stamps (body bytes received, time).

    ``spans`` are where the body's pieces lie in the raw buffer (chunk data, or one span for a
    Content-Length body), in order; framing bytes between them count for nothing."""
    out: Arrivals = []
    i, before = 0, 0  # spans wholly received, and their body bytes
    for raw, t in stamps:
        while i < len(spans) and spans[i][0] + spans[i][1] <= raw:
            before += spans[i][1]
            i += 1
        partial = min(max(raw - spans[i][0], 0), spans[i][1]) if i < len(spans) else 0
        out.append((before + partial, t))
    return out


class _Protocol(asyncio.Protocol):
    """One TCP connection: at most one request in flight, its response read in callbacks."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.head: _Head | None = None
        self.waiter: asyncio.Future[Reply] | None = None
        self.closed = False
        # Streaming only: (buffer length, time) at each arrival, then the same per body byte.
        self.stamps: Arrivals | None = None
        self.arrivals: Arrivals = []
        # The request in flight times out at ``deadline`` (loop time). One timer per connection
        # watches it, set again only when it fires before the deadline of the request then in
        # flight: arming and cancelling a timer per request cost more than reading a response
        # from a fast server (BENCHMARKS.md, part 1).
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.stamps is not None:
            self.stamps.append((len(self.buf), time.perf_counter()))
        if self.waiter is not None and not self.waiter.done():
            try:
                self._try_complete()
            except (TransportError, ValueError) as exc:
                self._fail(TransportError(f"bad response: {exc}"))

    def _try_complete(self) -> None:
        while self.head is None or 100 <= self.head.status < 200:  # skip interim 1xx responses
            if self.head is not None:
                del self.buf[: self.head.end]
            self.head = parse_head(self.buf)
            if self.head is None:
                return
        head = self.head
        spans: list[tuple[int, int]] | None = [] if self.stamps is not None else None
        if head.length == CHUNKED:
            done = dechunk(self.buf, head.end, spans)
            if done is None:
                return
            body, end = done
        elif head.length == UNTIL_CLOSE or len(self.buf) < head.end + head.length:
            return
        else:
            end = head.end + head.length
            body = bytes(self.buf[head.end : end])
            if spans is not None:
                spans.append((head.end, head.length))
        if self.stamps is not None and spans is not None:
            self.arrivals = body_arrivals(self.stamps, spans)
        self._finish(head, body, end)

    def _finish(self, head: _Head, body: bytes, end: int) -> None:
        del self.buf[:end]
        self.head = None
        if not head.keep_alive or self.buf:  # leftover bytes: the stream is out of step
            self.close()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((head.status, body, head.retry_after))

    def _fail(self, exc: BaseException) -> None:
        self.close()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        w = self.waiter
        if w is None or w.done():
            return
        if self.head is not None and self.head.length == UNTIL_CLOSE:
            w.set_result((self.head.status, bytes(self.buf[self.head.end :]), self.head.retry_after))
        elif not self.buf and self.head is None:
            w.set_exception(_Stale(f"server closed the connection ({exc or 'EOF'})"))
        else:
            w.set_exception(TransportError(f"connection closed mid-response ({exc or 'EOF'})"))

    def close(self) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.close()

    async def request(self, data: bytes, timeout: float, stream: bool = False) -> Reply:
        if self.closed or self.transport is None:
            raise _Stale("connection already closed")
        waiter: asyncio.Future[Reply] = self.loop.create_future()
        self.waiter, self.head = waiter, None
        self.buf.clear()
        self.stamps, self.arrivals = ([] if stream else None), []
        self.deadline = self.loop.time() + timeout
        timer = self.timer
        # (A timer set for after this deadline: this request was given a shorter timeout.)
        if timer is None or timer.when() > self.deadline:
            if timer is not None:
                timer.cancel()
            self.timer = self.loop.call_at(self.deadline, self._on_deadline)
        self.transport.write(data)
        try:
            return await waiter
        except asyncio.CancelledError:
            self.close()  # the response may still come: this connection cannot be reused
            raise
        finally:
            self.waiter = None

    def _on_deadline(self) -> None:
        """The timer fired: time the request in flight out if its deadline has come, else
        watch that deadline; when idle, let the next request set the timer."""
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.loop.time() < self.deadline:
            self.timer = self.loop.call_at(self.deadline, self._on_deadline)
            return
        waiter.set_exception(asyncio.TimeoutError())
        self.close()


class Connection:
    """A worker's own keep-alive connection, (re)opened on demand."""

    def __init__(self, endpoint: Endpoint, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._proto: _Protocol | None = None

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: _Protocol(loop), ep.host, ep.port), self.timeout_s
            )
        except OSError as exc:
            raise TransportError(f"cannot connect to {ep.host}:{ep.port}: {exc}") from exc
        return proto

    async def post(self, url: str, body: bytes) -> Reply:
        """POST ``body`` (JSON) to ``url`` (which starts with the endpoint's origin)."""
        return (await self._post(url, body, False))[0]

    async def post_stream(self, url: str, body: bytes) -> tuple[Reply, Arrivals]:
        """POST and read a streamed (server-sent events) response, noting when each part came."""
        return await self._post(url, body, True)

    async def _post(self, url: str, body: bytes, stream: bool) -> tuple[Reply, Arrivals]:
        ep = self.endpoint
        target = url[len(ep.origin) :] or "/"
        data = b"".join(
            (b"POST ", target.encode(), b" HTTP/1.1\r\n", ep.headers, b"Content-Length: ",
             str(len(body)).encode(), b"\r\n\r\n", body)
        )  # fmt: skip
        proto = self._proto
        if proto is not None and not proto.closed:
            try:
                return await proto.request(data, self.timeout_s, stream), proto.arrivals
            except _Stale:
                pass  # the server dropped an idle connection: reopen once, as browsers do
        self._proto = proto = await self._open()
        try:
            return await proto.request(data, self.timeout_s, stream), proto.arrivals
        except _Stale as exc:
            raise TransportError(str(exc)) from exc

    def close(self) -> None:
        if self._proto is not None:
            self._proto.close()
            self._proto = None
