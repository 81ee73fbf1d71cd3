"""The proxy the clients talk to: every request goes to the primary and its answer comes back
unchanged (status, headers, body bytes, streamed chunk by chunk as they arrive).

    servediff shadow --primary http://a:8000 --candidate http://b:8000 --listen 127.0.0.1:9000 --out shadow/

Only after the client has the whole answer does a completion request go to the mirror, and the
mirror never blocks (see ``mirror.py``). The client's headers, Authorization included, go to the
primary only; none is recorded. ``GET /servediff/shadow`` returns the counts so far.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from servediff.engines.sse import Arrivals
from servediff.shadow.mirror import Answered, Mirror

MIRRORED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
# Hop-by-hop headers (RFC 9110 §7.6.1) and what aiohttp sets itself for the relayed body.
HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "host",
    }
)


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    primary: str
    timeout_s: float = 600.0


class Proxy:
    def __init__(self, config: ProxyConfig, mirror: Mirror) -> None:
        self.config = config
        self.mirror = mirror
        self.session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_get("/servediff/shadow", self._counts)
        app.router.add_route("*", "/{tail:.*}", self._relay)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, _: web.Application) -> None:
        # No decompression: the client gets the primary's bytes, encoded as the primary sent them.
        self.session = aiohttp.ClientSession(
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=self.config.timeout_s),
            connector=aiohttp.TCPConnector(limit=0),
        )

    async def _stop(self, _: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    async def _counts(self, _: web.Request) -> web.Response:
        return web.json_response(self.mirror.counts.snapshot().as_dict())

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        mirrored = request.method == "POST" and request.path in MIRRORED_PATHS
        if not mirrored:
            return await self._forward(request, mirrored)
        self.mirror.received()  # from here it ends in exactly one count (mirror.Counts)
        try:
            return await self._forward(request, mirrored)
        except web.HTTPException:  # the proxy's own answer (413 past the body limit): not relayed
            self.mirror.relay_failed()
            raise

    async def _forward(self, request: web.Request, mirrored: bool) -> web.StreamResponse:
        assert self.session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        url = self.config.primary.rstrip("/") + request.path_qs
        sent = time.perf_counter()
        try:
            upstream = await self.session.request(request.method, url, data=body, headers=headers)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            # The primary itself failed: the client sees a gateway error, as from any proxy.
            if mirrored:
                self.mirror.relay_failed()
            return web.Response(status=502, text=f"primary unreachable: {type(exc).__name__}")
        async with upstream:
            out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for k, v in upstream.headers.items():
                if k.lower() not in HOP:
                    out.headers.add(k, v)
            if upstream.content_length is not None:  # else chunked, as the primary sent it
                out.content_length = upstream.content_length
            chunks: list[bytes] = []
            arrivals: Arrivals = []
            try:
                await out.prepare(request)
                size = 0
                async for chunk in upstream.content.iter_any():
                    await out.write(chunk)
                    chunks.append(chunk)
                    size += len(chunk)
                    arrivals.append((size, time.perf_counter()))
                await out.write_eof()
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                return self._cut(request, out, mirrored, exc)
        if mirrored:
            latency = time.perf_counter() - sent
            self._hand_over(request, body, upstream.status, b"".join(chunks), arrivals, sent, latency)
        return out

    def _cut(
        self, request: web.Request, out: web.StreamResponse, mirrored: bool, exc: BaseException
    ) -> web.StreamResponse:
        """The client left, or the primary's body ended early: the client's connection is closed
        where the answer broke (it must see a cut, never an ending the primary did not send), the
        request counted ``relay_failed``, and nothing mirrored: there is no whole answer to
        compare. One line in the log, no traceback."""
        if mirrored:
            self.mirror.relay_failed()
        gone = request.transport is None or request.transport.is_closing()
        side = "the client left" if gone else "the primary's body ended early"
        print(f"shadow: {request.path}: {side} ({type(exc).__name__}); not mirrored", file=sys.stderr)
        request.protocol.force_close()
        return out

    def _hand_over(
        self,
        request: web.Request,
        body: bytes,
        status: int,
        answer: bytes,
        arrivals: Arrivals,
        sent: float,
        latency: float,
    ) -> None:
        # Only a draw and a put here: parsing, hashing and redaction wait for a worker.
        if self.mirror.wanted():
            headers = tuple(request.headers.items())
            self.mirror.offer(
                Answered(
                    request.path,
                    body,
                    status,
                    answer,
                    arrivals,
                    sent,
                    latency,
                    time.time(),
                    headers,
                    request.query_string,
                )
            )
