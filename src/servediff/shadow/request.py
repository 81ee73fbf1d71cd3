"""One mirrored request: its id, what is recorded of it, and the body the candidate is sent.

    servediff shadow --primary http://a:8000 --candidate http://b:8000 --listen 127.0.0.1:9000 --out shadow/

The primary always gets the client's bytes untouched; everything here works on a parsed copy,
off the primary path. A request is *comparable* only when both servers should give the same text:
greedy (temperature 0), or sampled with a seed. The OpenAI API's default temperature is 1, so a
request that names no temperature is sampled.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servediff.redaction import REDACTED

# What shapes the answer: recorded per item as "sent", since each request brings its own.
SAMPLING_FIELDS = (
    "model",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "logprobs",
    "top_logprobs",
    "stream",
    "response_format",
)


@dataclass(frozen=True, slots=True)
class Mirrored:
    """A parsed client request: recorded input, parameters, and the body for the candidate."""

    digest: str  # SHA-256 of the path and the body bytes as the client sent them
    path: str
    input: Any  # the messages or the prompt, with --redact-field rules applied
    params: dict[str, Any]
    comparable: bool
    stream: bool
    candidate_body: bytes


def parse(path: str, body: bytes, rules: Sequence[str], top_logprobs: int) -> Mirrored:
    """Raises ValueError for a body that is not a JSON object (the primary still answers it),
    nested deeper than Python's parser follows included."""
    try:
        data = json.loads(body)
    except RecursionError:  # [[[[… 50,000 deep: the primary answered it; it is not mirrored
        raise ValueError("the request body is nested too deep to read") from None
    if not isinstance(data, dict):
        raise ValueError("the request body is not a JSON object")
    digest = hashlib.sha256(path.encode() + b"\0" + body).hexdigest()
    params = {k: data[k] for k in SAMPLING_FIELDS if k in data}
    temperature = data.get("temperature", 1.0)
    greedy = isinstance(temperature, (int, float)) and temperature == 0
    comparable = greedy or data.get("seed") is not None
    raw_input = data.get("messages") if "messages" in data else data.get("prompt")
    return Mirrored(
        digest=digest,
        path=path,
        input=redact_fields({"input": raw_input}, [_input_rule(r) for r in rules])["input"],
        params=params,
        comparable=comparable,
        stream=bool(data.get("stream")),
        candidate_body=_candidate_body(path, data, body, top_logprobs),
    )


def _input_rule(rule: str) -> str:
    # Rules name request fields ("messages.*.content", "prompt", "user"); the recorded input is
    # the messages or the prompt under one key, so both spellings reach it.
    head, _, rest = rule.partition(".")
    return "input" + ("." + rest if rest else "") if head in ("messages", "prompt") else rule


def _candidate_body(path: str, data: dict[str, Any], body: bytes, top_logprobs: int) -> bytes:
    """The client's bytes, or, when logprobs are asked of the candidate, a copy that asks."""
    if top_logprobs <= 0:
        return body
    copy = dict(data)
    if path.endswith("/chat/completions"):
        copy.update(logprobs=True, top_logprobs=top_logprobs)
    else:
        copy["logprobs"] = top_logprobs
    return json.dumps(copy).encode()


def redact_fields(data: Any, rules: Sequence[str]) -> Any:
    """``data`` with each field named by a dotted rule replaced by ``<redacted>``; ``*`` matches
    every element of a list or every key of an object. A copy: the input is not changed."""
    for rule in rules:
        data = _redact(data, rule.split("."))
    return data


def _redact(node: Any, parts: list[str]) -> Any:
    if not parts:
        return REDACTED
    head, rest = parts[0], parts[1:]
    if isinstance(node, list) and (head == "*" or head.isdigit()):
        return [_redact(v, rest) if head == "*" or i == int(head) else v for i, v in enumerate(node)]
    if isinstance(node, dict):
        return {k: _redact(v, rest) if head in ("*", k) else v for k, v in node.items()}
    return node
