"""How an HTTP worker sends a request: one POST, plain or streamed, over a channel.

    servediff run --engine http --base-url https://example.com --out a.jsonl    # aiohttp's channel

For ``http://`` each worker owns a keep-alive connection of the lean client (``http1.py``); for
``https://`` (or anything that client does not speak) the workers share one aiohttp session
(``AiohttpChannel``). ``run_async`` runs the workers, on uvloop where it is installed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

import aiohttp

from servediff.engines.http1 import Arrivals, Reply, TransportError

# Imported with this module (beside aiohttp, which costs thirty times more), not on the first
# run: a run's clock should not start with a 5 ms import.
try:
    import uvloop
except ImportError:  # Windows, or not installed
    uvloop = None  # type: ignore[assignment]

T = TypeVar("T")


class Channel(Protocol):
    """How a worker sends one POST: (status, body bytes), or TransportError / TimeoutError."""

    async def post(self, url: str, body: bytes) -> Reply: ...

    async def post_stream(self, url: str, body: bytes) -> tuple[Reply, Arrivals]: ...


class AiohttpChannel:
    """The aiohttp path (https, or anything the lean client does not speak)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def post(self, url: str, body: bytes) -> Reply:
        try:
            async with self.session.post(url, data=body) as resp:
                return resp.status, await resp.read(), resp.headers.get("Retry-After")
        except asyncio.TimeoutError:
            raise
        except aiohttp.ClientConnectionError as exc:
            raise TransportError(str(exc)) from exc
        except aiohttp.ClientError as exc:  # a broken payload or protocol: retrying won't help
            raise ValueError(str(exc)) from exc

    async def post_stream(self, url: str, body: bytes) -> tuple[Reply, Arrivals]:
        arrivals: Arrivals = []
        parts = bytearray()
        try:
            async with self.session.post(url, data=body) as resp:
                async for piece in resp.content.iter_any():
                    parts += piece
                    arrivals.append((len(parts), time.perf_counter()))
                return (resp.status, bytes(parts), resp.headers.get("Retry-After")), arrivals
        except asyncio.TimeoutError:
            raise
        except aiohttp.ClientConnectionError as exc:
            raise TransportError(str(exc)) from exc
        except aiohttp.ClientError as exc:
            raise ValueError(str(exc)) from exc


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed (fewer Python frames per I/O event)."""
    if uvloop is None:
        return asyncio.run(coro)
    return uvloop.run(coro)
