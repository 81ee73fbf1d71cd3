"""The shadow side: a bounded queue of answered requests, and a child process whose fixed pool of
workers replays each on the candidate and records both answers.

The proxy hands a request over only after its client has the primary's answer, and never waits:
``offer`` puts without blocking, and when the queue is full the copy is dropped and counted. The
replay runs in its own process, so neither the candidate's speed, nor its death, nor the work of
parsing and recording (about a millisecond of CPU per request) reaches the primary path: in one
process that work shared the proxy's event loop and added ~3 ms to every answer (BENCHMARKS.md).
The child watches its parent and leaves when it is gone, so it never outlives the proxy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import aiohttp
import numpy as np

from servediff.engines import tokenize
from servediff.engines.response import parse_response
from servediff.engines.sse import Arrivals, parse_stream
from servediff.redaction import header_secrets, redact_json, redact_text
from servediff.shadow.recorder import FirstToken, Recorder, first_token
from servediff.shadow.request import Mirrored, parse
from servediff.types import Completion


@dataclass(slots=True)
class Counts:
    """What happened to the traffic; written to ``shadow.json``. Every completion request ends
    in exactly one of mirrored, dropped, unparsed, sampled_out and failed, so they add up to
    ``requests``, whatever the candidate, the client or a signal did."""

    requests: int = 0  # completion requests the proxy received
    sampled_out: int = 0  # left out by --sample
    dropped: int = 0  # the queue was full
    unparsed: int = 0  # bodies that were not JSON objects (or nested too deep): answered, not mirrored
    mirrored: int = 0  # recorded on both sides
    noncomparable: int = 0  # among mirrored: sampled without a seed
    primary_errors: int = 0
    candidate_errors: int = 0
    segments: int = 0  # record pairs written (--rotate-mb)
    # The three kinds of failed; each has one writer (see SharedCounts).
    relay_failed: int = 0  # the primary's answer did not reach the client whole (either side left)
    replay_failed: int = 0  # the replay raised on this request (logged, one line)
    unfinished: int = 0  # queued or in flight when the replay ended (session's end, or it died)

    @property
    def failed(self) -> int:
        return self.relay_failed + self.replay_failed + self.unfinished

    def as_dict(self) -> dict[str, int]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        head = ("requests", "mirrored", "dropped", "unparsed", "sampled_out")
        return {**{k: values.pop(k) for k in head}, "failed": self.failed, **values}


FIELDS = [f.name for f in fields(Counts)]


class SharedCounts:
    """Counts in shared memory: each field has one writer (the proxy or the replay process)."""

    def __init__(self, ctx: Any) -> None:
        self.array = ctx.Array("q", len(FIELDS), lock=False)

    def add(self, name: str, n: int = 1) -> None:
        self.array[FIELDS.index(name)] += n

    def set(self, name: str, n: int) -> None:
        self.array[FIELDS.index(name)] = n

    def snapshot(self) -> Counts:
        return Counts(*self.array[:])


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
    # The client's headers and query string: never sent on, only hunted for in what is recorded
    # (a server may echo any of them in a body; ``redaction.header_secrets``).
    headers: tuple[tuple[str, str], ...] = ()
    query: str = ""


@dataclass(frozen=True, slots=True)
class CandidateConfig:
    base_url: str
    api_key: str | None
    timeout_s: float = 300.0
    redact: tuple[str, ...] = ()  # --redact-field rules, applied to what is recorded
    top_logprobs: int = 0  # asked of the candidate only


@dataclass(frozen=True, slots=True)
class MirrorConfig:
    candidate: CandidateConfig
    queue_size: int = 1024
    workers: int = 4
    sample: float = 1.0
    seed: int = 0


LONG_SECRET = 8  # a header value this long is blanked in answers too (``Replayer._replay``)

# The replay process's orders, in shared memory (one writer: the proxy).
RUN, DRAIN, STOP = 0, 1, 2
POLL_S = 0.2  # how often the replay process looks at its orders and its parent
GRACE_S = 2.0  # after STOP: the replay process cancels what is in flight, closes the records, leaves


class Mirror:
    """The proxy's end: the --sample draw, the bounded queue, the replay process."""

    def __init__(self, recorder: Recorder, config: MirrorConfig) -> None:
        ctx = mp.get_context("spawn")  # no fork of a process that runs an event loop
        self.config = config
        self.queue: Any = ctx.Queue(maxsize=config.queue_size)
        self.counts = SharedCounts(ctx)
        self.orders: Any = ctx.Value("i", RUN, lock=False)
        self.rng = np.random.default_rng(config.seed)
        args = (recorder, config, self.queue, self.counts, os.getpid(), self.orders)
        self.process = ctx.Process(target=replay, args=args, daemon=True)

    def received(self) -> None:
        """Counts a completion request as it arrives: from here on it ends in exactly one of
        the other counts (``Counts``), the remainder at the end as ``unfinished``."""
        self.counts.add("requests")

    def relay_failed(self) -> None:
        self.counts.add("relay_failed")

    def wanted(self) -> bool:
        """Draws whether --sample keeps a relayed request (before anything is copied)."""
        if self.config.sample < 1.0 and self.rng.random() >= self.config.sample:
            self.counts.add("sampled_out")
            return False
        return True

    def offer(self, answered: Answered) -> None:
        try:
            self.queue.put_nowait(answered)
        except queue.Full:
            self.counts.add("dropped")

    def start(self) -> None:
        self.process.start()

    def stop(self, drain_s: float) -> Counts:
        """Let the replay process finish what is queued for up to ``drain_s``, then have it
        cancel what is still in flight (a hung candidate never holds the session's end);
        whatever it had not recorded by then is counted ``unfinished``."""
        if self.process.pid is not None:  # started
            self.orders.value = DRAIN
            self.process.join(drain_s)
            self.orders.value = STOP
            self.process.join(GRACE_S)
            if self.process.is_alive():  # stuck outside the event loop: it never recorded half
                self.process.kill()
                self.process.join(GRACE_S)
        # Copies the replay process never read must not hold this process's exit.
        self.queue.cancel_join_thread()
        self.queue.close()
        counts = self.counts.snapshot()
        ended = counts.mirrored + counts.dropped + counts.unparsed + counts.sampled_out + counts.failed
        counts.unfinished += counts.requests - ended
        return counts


def replay(
    recorder: Recorder, config: MirrorConfig, inbox: Any, counts: SharedCounts, parent: int, orders: Any
) -> None:
    """The replay process: read the queue, replay on the candidate, record both answers."""
    # Ctrl-C and a SIGTERM sent to the whole group reach the proxy, which drains us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    recorder.open()
    counts.set("segments", recorder.segment)
    try:
        asyncio.run(_replay_all(recorder, config, inbox, counts, Watch(parent, orders)))
    finally:
        recorder.close()
        counts.set("segments", recorder.segment)


@dataclass(frozen=True, slots=True)
class Watch:
    """What ends the replay process early: the proxy's STOP, or the proxy gone (SIGKILL leaves
    no one to send STOP; the pid of the parent then changes)."""

    parent: int
    orders: Any

    def stopped(self) -> bool:
        return bool(self.orders.value == STOP) or os.getppid() != self.parent

    def draining(self) -> bool:
        return bool(self.orders.value == DRAIN)


async def _replay_all(
    recorder: Recorder, config: MirrorConfig, inbox: Any, counts: SharedCounts, watch: Watch
) -> None:
    loop = asyncio.get_running_loop()
    work: asyncio.Queue[Answered | None] = asyncio.Queue(maxsize=config.workers)
    cand = config.candidate
    headers = {"Authorization": f"Bearer {cand.api_key}"} if cand.api_key else {}
    async with aiohttp.ClientSession(
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=cand.timeout_s),
        connector=aiohttp.TCPConnector(limit=config.workers),
    ) as session:
        worker = Replayer(recorder, cand, counts, session)
        tasks = [asyncio.ensure_future(worker.run(work)) for _ in range(config.workers)]

        def cancel() -> None:
            # A worker is cancelled only at an await: before its request's lines are written
            # (writing and counting have none), so a request is recorded and counted, or neither.
            for t in tasks:
                t.cancel()

        pump = threading.Thread(target=_pump, args=(inbox, work, loop, watch, cancel), daemon=True)
        pump.start()
        await asyncio.gather(*tasks, return_exceptions=True)


def _pump(
    inbox: Any,
    work: asyncio.Queue[Answered | None],
    loop: asyncio.AbstractEventLoop,
    watch: Watch,
    cancel: Callable[[], None],
) -> None:
    """Move queued copies into the event loop. Draining, an empty queue ends the workers once
    they finish; stopped, or with the parent gone, they are cancelled at once."""
    ending = False
    while not watch.stopped():
        if ending:  # the end markers are given; the workers finish unless stopped first
            time.sleep(POLL_S)
            continue
        try:
            item = inbox.get(timeout=POLL_S)
        except queue.Empty:
            if not watch.draining():
                continue
            item = None
        except (EOFError, OSError):  # the proxy's end of the queue is gone
            break
        if item is None:
            ending = all(_put(work, None, loop, watch) for _ in range(work.maxsize))
        elif not _put(work, item, loop, watch):
            break
    loop.call_soon_threadsafe(cancel)
    time.sleep(GRACE_S)  # the event loop had its chance; a stuck process must still go
    os._exit(1)


def _put(
    work: asyncio.Queue[Answered | None], item: Answered | None, loop: asyncio.AbstractEventLoop, watch: Watch
) -> bool:
    """Hands one item to the workers, waiting while all are busy; False once stopped."""
    done = asyncio.run_coroutine_threadsafe(work.put(item), loop)
    while True:
        try:
            done.result(timeout=POLL_S)
            return True
        except concurrent.futures.TimeoutError:
            if watch.stopped():
                done.cancel()
                return False


@dataclass(slots=True)
class Replayer:
    recorder: Recorder
    candidate: CandidateConfig
    counts: SharedCounts
    session: aiohttp.ClientSession
    # How the candidate's tokenizer is asked (``engines.tokenize``): every way until one answers,
    # then that one; a way whose endpoint the server lacks (404, 405) is not asked again.
    tokenize_ways: list[tuple[str, tokenize.Reader]] = field(default_factory=lambda: list(tokenize.WAYS))

    async def run(self, work: asyncio.Queue[Answered | None]) -> None:
        while (a := await work.get()) is not None:
            await self.replay(a)

    async def replay(self, a: Answered) -> None:
        try:
            await self._replay(a)
        except Exception as exc:  # one request's fault never ends the others
            self.counts.add("replay_failed")
            known = header_secrets(a.headers, a.query)
            print(
                f"shadow: a request was not mirrored: {redact_text(repr(exc), known)[:300]}", file=sys.stderr
            )

    async def _replay(self, a: Answered) -> None:
        try:
            req = parse(a.path, a.body, self.candidate.redact, self.candidate.top_logprobs)
        except (ValueError, UnicodeDecodeError):  # json.JSONDecodeError is a ValueError
            self.counts.add("unparsed")
            return
        item_id = self.recorder.item_id(req)
        primary = _completion(item_id, a.status, a.answer, a.arrivals, a.sent, a.latency_s, req.stream)
        primary.finished_at = a.finished_at
        candidate = await self.ask(item_id, req)
        placed = None
        if req.comparable and primary.error is None is candidate.error and primary.text != candidate.text:
            placed = await self.locate(req, primary, candidate)
        known = header_secrets(a.headers, a.query)
        if known:
            # In answers and inputs, only values long enough to be credentials: a cookie's
            # "theme=dark" must not blank every "dark" a model writes. Errors get every value.
            long = [k for k in known if len(k) >= LONG_SECRET]
            req = _scrubbed(req, long)
            for c in (primary, candidate):
                c.text = redact_text(c.text, long, shapes=False)
                c.error = None if c.error is None else redact_text(c.error, known)
        self.recorder.write(req, item_id, primary, candidate, placed)
        self.counts.set("segments", self.recorder.segment)
        self.counts.add("noncomparable", not req.comparable)
        self.counts.add("primary_errors", primary.error is not None)
        self.counts.add("candidate_errors", candidate.error is not None)
        self.counts.add("mirrored")  # last: a reader that sees it counted sees the rest

    async def ask(self, item_id: str, req: Mirrored) -> Completion:
        url = self.candidate.base_url.rstrip("/") + req.path
        sent = time.perf_counter()
        arrivals: Arrivals = []
        chunks: list[bytes] = []
        try:
            async with self.session.post(
                url, data=req.candidate_body, headers={"Content-Type": "application/json"}
            ) as resp:
                async for chunk in resp.content.iter_any():
                    chunks.append(chunk)
                    arrivals.append(
                        (arrivals[-1][0] + len(chunk) if arrivals else len(chunk), time.perf_counter())
                    )
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            c = Completion(item_id, error=redact_text(f"candidate unreachable: {exc!r}"))
            c.latency_s, c.finished_at = time.perf_counter() - sent, time.time()
            return c
        c = _completion(
            item_id, status, b"".join(chunks), arrivals, sent, time.perf_counter() - sent, req.stream
        )
        c.finished_at = time.time()
        return c

    async def locate(self, req: Mirrored, primary: Completion, candidate: Completion) -> FirstToken | None:
        """Token ids for two answers that differ, both from the candidate's tokenizer (the
        primary serves production and is asked nothing of its own), and where they part: the
        divergence then has a token position, so the report gives its hazard, and ``servediff
        probe`` can measure its cause. An answer that no way of asking tokenizes leaves both
        without."""
        model = req.params.get("model")
        name = model if isinstance(model, str) else None
        a, b = [await self.tokenize(c.text, name) for c in (primary, candidate)]
        if a is None or b is None:
            return None
        primary.token_ids, candidate.token_ids = a, b
        primary.token_source = candidate.token_source = "retokenized"
        return first_token(a, b)

    async def tokenize(self, text: str, model: str | None) -> list[int] | None:
        url = self.candidate.base_url.rstrip("/")
        if url.endswith("/v1"):
            url = url[: -len("/v1")]
        for way in list(self.tokenize_ways):
            path, reader = way
            try:
                async with self.session.post(
                    url + path,
                    data=tokenize.body(reader, text, model),
                    headers={"Content-Type": "application/json"},
                ) as resp:
                    status, raw = resp.status, await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                return None
            if status in (404, 405):
                self.tokenize_ways = [w for w in self.tokenize_ways if w[0] != path]
                continue
            ids = tokenize.token_ids(raw, text) if status == 200 else None
            if ids is not None:
                self.tokenize_ways = [way]
                return ids
        return None


def _scrubbed(req: Mirrored, known: list[str]) -> Mirrored:
    """The request as recorded, with the client's header values blanked wherever they occur."""
    return dataclasses.replace(
        req, input=redact_json(req.input, known), params=redact_json(req.params, known)
    )


def _completion(
    item_id: str, status: int, body: bytes, arrivals: Arrivals, sent: float, latency: float, stream: bool
) -> Completion:
    """A relayed answer → Completion; a failure (status or shape) is an error, never a text."""
    if status != 200:
        # Redacted before it is cut: a credential across the cut would leave its first part.
        snippet = redact_text(body[:4096].decode("utf-8", errors="replace"))[:300]
        return Completion(item_id, latency_s=latency, error=f"HTTP {status}: {snippet}")
    try:
        if stream:
            return parse_stream(item_id, body, arrivals, sent, latency)
        return parse_response(item_id, body, latency)
    except (ValueError, UnicodeDecodeError) as exc:
        return Completion(item_id, latency_s=latency, error=redact_text(str(exc))[:300])
