"""A streamed OpenAI-compatible completion (server-sent events) → one Completion, timed per token.

    servediff run --engine http --base-url http://127.0.0.1:8000 --stream --out a.jsonl

With ``stream: true`` a server sends each token (or a few) as one ``data: {...}`` event and ends
with ``data: [DONE]``. Joined, the events give the same text, finish reason and logprobs as the
non-streamed response (the tests check this against a real server); what streaming adds is
*when* each token arrived: the time to first token and the gaps between tokens. Token counts
come from the final ``usage`` event where the server sends one (``stream_options.include_usage``:
vLLM, SGLang), else from the logprobs, else from the number of events that carried text
(llama-cpp-python sends one per token and no usage).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any

from servediff.engines.wire import (
    ChatLogprobs,
    Chunk,
    ChunkChatChoice,
    LeanChatLogprobs,
    LeanTextLogprobs,
    TextLogprobs,
    Usage,
    parse_json,
)
from servediff.types import Completion, TokenLogprob

Arrivals = list[tuple[int, float]]  # (body bytes received so far, time.perf_counter())


def events(body: bytes) -> list[tuple[int, str]]:
    """(offset just past the event in ``body``, its data) for each event, up to ``[DONE]``."""
    out: list[tuple[int, str]] = []
    data: list[str] = []
    pos = 0
    for line in body.splitlines(keepends=True):
        pos += len(line)
        text = line.decode("utf-8").rstrip("\r\n")
        if text.startswith("data:"):
            data.append(text[5:].removeprefix(" "))
        elif not text and data:  # a blank line ends an event
            joined = "\n".join(data)
            data = []
            if joined == "[DONE]":
                break
            out.append((pos, joined))
    if data and "\n".join(data) != "[DONE]":
        out.append((pos, "\n".join(data)))  # a last event without its blank line
    return out


def arrival_time(arrivals: Arrivals, offset: int) -> float | None:
    """When the body's first ``offset`` bytes had arrived (None: no arrival times)."""
    i = bisect.bisect_left([n for n, _ in arrivals], offset)
    return arrivals[i][1] if i < len(arrivals) else None


@dataclass(slots=True)
class _Joined:
    text: list[str]
    finish: str | None = None
    usage: Usage | None = None
    timings: dict[str, Any] | None = None
    logprobs: list[TokenLogprob] | None = None
    saw_text: bool = False  # some event carried a text, even an empty one
    saw_null: bool = False  # some event said the answer is null


def _add(j: _Joined, event: Chunk) -> bool:
    """Fold one event into ``j``; True when it carried generated text or tokens."""
    if event.error:
        raise ValueError(f"the stream reported an error: {json.dumps(event.error)[:300]}")
    j.usage = event.usage or j.usage
    j.timings = event.timings or j.timings
    if not event.choices:
        return False
    choice = event.choices[0]
    if choice.finish_reason:
        j.finish = choice.finish_reason
    j.saw_null = j.saw_null or choice.null_content
    if isinstance(choice, ChunkChatChoice):
        piece = choice.delta.content if choice.delta else None
        lps = chat_logprobs(choice.logprobs)
    else:
        piece = choice.text
        lps = text_logprobs(choice.logprobs)
    if lps:
        j.logprobs = [*(j.logprobs or []), *lps]
    if piece is not None:
        j.saw_text = True
    if piece:
        j.text.append(piece)
        return True
    return bool(lps)


def parse_stream(item_id: str, body: bytes, arrivals: Arrivals, sent: float, latency: float) -> Completion:
    """The events of one streamed response → Completion with ttft_s and itl_s.

    ``sent`` is the perf_counter time the request went out. Raises ValueError for a stream that
    holds no answer (no events, an error event, an event not of the shape ``wire.Chunk``, no
    finish reason, content that was null throughout): a server fault, as in ``parse_response``."""
    found = events(body)
    if not found:
        raise ValueError("the stream held no events")
    joined = _Joined(text=[])
    stamps: list[float] = []
    for end, data in found:
        if _add(joined, parse_json(Chunk, data, "streamed event")):
            t = arrival_time(arrivals, end)
            if t is not None:
                stamps.append(t)
    if joined.finish is None:
        raise ValueError("the stream ended without a finish reason (cut off)")
    lps = joined.logprobs
    if joined.saw_null and not joined.saw_text and not lps:
        # As message.content null without streaming: a server that gave no answer. A stream
        # whose events carry no content at all stays an empty answer: llama-cpp-python and
        # llama-server stream one that way (a role event, then an empty one with the finish).
        raise ValueError(f"no answer: every streamed content was null (finish_reason {joined.finish!r})")
    n = joined.usage.completion_tokens if joined.usage else None
    n_tokens = n if n is not None else (len(lps) if lps else len(stamps) or None)
    return Completion(
        item_id=item_id,
        text="".join(joined.text),
        finish_reason=joined.finish,
        latency_s=latency,
        n_tokens=n_tokens,
        tokens=[t.token for t in lps] if lps else None,
        logprobs=lps,
        token_source="engine" if lps else None,
        ttft_s=stamps[0] - sent if stamps else None,
        itl_s=(stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else None,
        engine_timings=engine_timings(joined.timings),
    )


def engine_timings(timings: dict[str, Any] | None) -> dict[str, Any] | None:
    """A response's own ``timings`` object (llama.cpp's C++ server), marked as the engine's."""
    if not timings:
        return None
    return {"source": "response timings", **timings}


def chat_logprobs(block: ChatLogprobs | LeanChatLogprobs | None) -> list[TokenLogprob] | None:
    if block is None or not block.content:
        return None
    return [
        # llama-server also names each generated token's id (``id``); OpenAI and vLLM do not.
        TokenLogprob(e.token, e.logprob, tuple((t.token, t.logprob) for t in e.top_logprobs or ()), e.id)
        for e in block.content
    ]


def text_logprobs(block: TextLogprobs | LeanTextLogprobs | None) -> list[TokenLogprob] | None:
    if block is None or not block.tokens or block.token_logprobs is None:
        return None
    tops = block.top_logprobs or [None] * len(block.tokens)
    out = []
    for tok, lp, top in zip(block.tokens, block.token_logprobs, tops):
        pairs = sorted((top or {}).items(), key=lambda x: -x[1])
        out.append(TokenLogprob(tok, lp, tuple(pairs)))
    return out
