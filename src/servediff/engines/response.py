"""An OpenAI-compatible server's answer, read: a completion's body as a ``Completion``, a one-token
answer as a probe's top-k, any body as a JSON object or the text of an error.

    servediff run --engine http --base-url http://127.0.0.1:8000 --out a.jsonl

What each field must be is ``wire``'s; this module turns the validated body into servediff's types.
A completion's body is read by ``wire.lean_response`` (msgspec, the common shape) and, only
where that refuses it, by ``wire.Response`` (pydantic), which accepts the rarer shapes and
words the error for a broken one; both give the same Completion.
"""

from __future__ import annotations

import json
from typing import Any

from servediff.engines import ProbeResult
from servediff.engines.sse import chat_logprobs, engine_timings, text_logprobs
from servediff.engines.wire import (
    ChatChoice,
    LeanChatChoice,
    LeanResponse,
    Response,
    TextChoice,
    lean_response,
    parse,
    parse_json,
)
from servediff.types import Completion


def next_token(raw: Any, k: int, method: str) -> ProbeResult:
    """The top-k of a one-token /v1/completions answer with ``logprobs``."""
    choice = parse(Response, raw, "response").choices[0]
    block = choice.logprobs if isinstance(choice, TextChoice) else None
    listed = (block.top_logprobs if block else None) or []
    if not listed or listed[0] is None:
        # The server chose its end-of-sequence token first, and llama-cpp-python's server
        # returns no text and no logprobs for it: nothing here to measure, which is not a
        # failure of the probe (retrying gives the same answer).
        return ProbeResult((), NO_LOGPROBS_AT_END)
    pairs = sorted(listed[0].items(), key=lambda x: -x[1])
    return ProbeResult(tuple(pairs[:k]), method)


NO_LOGPROBS_AT_END = (
    "http: not obtainable: the server ended the sequence here and returns no logprobs for its "
    "end-of-sequence token"
)


def text_of(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def json_object(raw: bytes) -> dict[str, Any]:
    """A response body that must be a JSON object; anything else raises ValueError (whose
    message leaves the body out: the caller adds it, redacted)."""
    if not raw.strip():
        raise ValueError("empty response body")
    try:
        parsed = json.loads(raw.decode())  # str, not bytes: skips json's encoding detection
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"response is not JSON ({exc})") from exc
    if not isinstance(parsed, dict):
        raise ValueError("response is not a JSON object")
    return parsed


def parse_response(item_id: str, body: bytes, latency: float) -> Completion:
    """A chat or text completion response body → Completion. A body that is not JSON or not
    the shape of a response (``wire.Response``) raises ValueError, and so does an answer that is
    not there (``content``/``text`` null or missing): an empty string is an answer a model can
    give, a null is a server that gave none, and must not be scored."""
    # The common shape, read by msgspec; pydantic's models accept the rest or say why not.
    lean = lean_response(body)
    response = lean if lean is not None else parse_json(Response, body, "response")
    return completion_of(item_id, response, latency)


def completion_of(item_id: str, response: Response | LeanResponse, latency: float) -> Completion:
    """A validated response (either reading of it) → Completion; ValueError for a null answer."""
    choice = response.choices[0]
    if isinstance(choice, (ChatChoice, LeanChatChoice)):
        text, where, lps = choice.message.content, "message.content", chat_logprobs(choice.logprobs)
    else:
        text, where, lps = choice.text, "text", text_logprobs(choice.logprobs)
    if text is None:
        raise ValueError(f"no answer: {where} is null (finish_reason {choice.finish_reason!r})")
    n_tokens = response.usage.completion_tokens if response.usage else None
    prompt_tokens = response.usage.prompt_tokens if response.usage else None
    # The generation's own token ids where the server names every one (llama-server does).
    ids = [t.token_id for t in lps] if lps and all(t.token_id is not None for t in lps) else None
    return Completion(
        engine_timings=engine_timings(response.timings),
        item_id=item_id,
        text=text,
        finish_reason=choice.finish_reason,
        latency_s=latency,
        n_tokens=n_tokens if n_tokens is not None else (len(lps) if lps else None),
        tokens=[t.token for t in lps] if lps else None,
        token_ids=[i for i in ids if i is not None] if ids is not None else None,
        logprobs=lps,
        token_source="engine" if lps else None,
        engine_meta={"prompt_tokens": prompt_tokens} if prompt_tokens is not None else None,
    )
