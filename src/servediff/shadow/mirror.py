"""The shadow side: a bounded queue of answered requests and a fixed pool of workers that replay
each on the candidate and record both answers.

The proxy hands over a request only after its client has the primary's answer, and never waits:
``offer`` puts without blocking, and when the queue is full the copy is dropped and counted. So
the candidate's speed, or its death, never reaches the primary path. Parsing the primary's
answer also happens here, in a worker, not while the client waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass

import aiohttp
import numpy as np

from servediff.engines.openai_http import json_object, parse_response
from servediff.engines.sse import Arrivals, parse_stream
from servediff.redaction import redact_text
from servediff.shadow.recorder import Recorder
from servediff.shadow.request import Mirrored, parse
from servediff.types import Completion


@dataclass(slots=True)
class Counts:
    """What happened to the traffic; written to ``shadow.json`` and shown in the report."""

    requests: int = 0  # completion requests the proxy answered
    sampled_out: int = 0  # left out by --sample
    unparsed: int = 0  # bodies that were not JSON objects: answered, not mirrored
    dropped: int = 0  # the queue was full
    mirrored: int = 0  # recorded on both sides
    noncomparable: int = 0  # among mirrored: sampled without a seed
    primary_errors: int = 0
    candidate_errors: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Answered:
    """A request the client has had its answer to, with that answer as the proxy relayed it."""

    path: str
    body: bytes  # the request as the client sent it
    status: int
    answer: bytes
    arrivals: Arrivals
    sent: float  # perf_counter when the request went to the primary
    latency_s: float
    finished_at: float


@dataclass(frozen=True, slots=True)
class CandidateConfig:
    base_url: str
    api_key: str | None
    timeout_s: float = 300.0
    redact: tuple[str, ...] = ()  # --redact-field rules, applied to what is recorded
    top_logprobs: int = 0  # asked of the candidate only


class Mirror:
    def __init__(
        self,
        recorder: Recorder,
        candidate: CandidateConfig,
        queue_size: int,
        workers: int,
        sample: float,
        seed: int,
    ) -> None:
        self.recorder = recorder
        self.candidate = candidate
        self.queue: asyncio.Queue[Answered] = asyncio.Queue(maxsize=queue_size)
        self.counts = Counts()
        self.sample = sample
        self.rng = np.random.default_rng(seed)
        self.n_workers = workers
        self.tasks: list[asyncio.Task[None]] = []
        self.session: aiohttp.ClientSession | None = None

    def wanted(self) -> bool:
        """Counts the request and draws whether --sample keeps it (before anything is copied)."""
        self.counts.requests += 1
        if self.sample < 1.0 and self.rng.random() >= self.sample:
            self.counts.sampled_out += 1
            return False
        return True

    def offer(self, answered: Answered) -> None:
        try:
            self.queue.put_nowait(answered)
        except asyncio.QueueFull:
            self.counts.dropped += 1

    async def start(self) -> None:
        headers = {"Authorization": f"Bearer {self.candidate.api_key}"} if self.candidate.api_key else {}
        self.session = aiohttp.ClientSession(
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.candidate.timeout_s),
            connector=aiohttp.TCPConnector(limit=self.n_workers),
        )
        self.tasks = [asyncio.create_task(self._work()) for _ in range(self.n_workers)]

    async def stop(self, drain_s: float) -> None:
        """Let the workers finish what is queued (up to ``drain_s``), then stop them."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.queue.join(), drain_s)
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.session is not None:
            await self.session.close()

    async def _work(self) -> None:
        while True:
            answered = await self.queue.get()
            try:
                await self._replay(answered)
            finally:
                self.queue.task_done()

    async def _replay(self, a: Answered) -> None:
        try:
            req = parse(a.path, a.body, self.candidate.redact, self.candidate.top_logprobs)
        except (ValueError, UnicodeDecodeError):  # json.JSONDecodeError is a ValueError
            self.counts.unparsed += 1
            return
        item_id = self.recorder.item_id(req)
        primary = _completion(item_id, a.status, a.answer, a.arrivals, a.sent, a.latency_s, req.stream)
        primary.finished_at = a.finished_at
        candidate = await self._ask_candidate(item_id, req)
        self.counts.mirrored += 1
        self.counts.noncomparable += not req.comparable
        self.counts.primary_errors += primary.error is not None
        self.counts.candidate_errors += candidate.error is not None
        self.recorder.write(req, item_id, primary, candidate)

    async def _ask_candidate(self, item_id: str, req: Mirrored) -> Completion:
        assert self.session is not None
        url = self.candidate.base_url.rstrip("/") + req.path
        sent = time.perf_counter()
        arrivals: Arrivals = []
        try:
            async with self.session.post(
                url, data=req.candidate_body, headers={"Content-Type": "application/json"}
            ) as resp:
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.content.iter_any():
                    chunks.append(chunk)
                    size += len(chunk)
                    arrivals.append((size, time.perf_counter()))
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            c = Completion(item_id, error=redact_text(f"candidate unreachable: {exc!r}"))
            c.latency_s = time.perf_counter() - sent
            c.finished_at = time.time()
            return c
        latency = time.perf_counter() - sent
        c = _completion(item_id, status, b"".join(chunks), arrivals, sent, latency, req.stream)
        c.finished_at = time.time()
        return c


def _completion(
    item_id: str, status: int, body: bytes, arrivals: Arrivals, sent: float, latency: float, stream: bool
) -> Completion:
    """A relayed answer → Completion; a failure (status or shape) is an error, never a text."""
    if status != 200:
        snippet = redact_text(body[:300].decode("utf-8", errors="replace"))
        return Completion(item_id, latency_s=latency, error=f"HTTP {status}: {snippet}")
    try:
        if stream:
            return parse_stream(item_id, body, arrivals, sent, latency)
        return parse_response(item_id, json_object(body), latency)
    except (ValueError, UnicodeDecodeError) as exc:
        return Completion(item_id, latency_s=latency, error=redact_text(str(exc))[:300])
