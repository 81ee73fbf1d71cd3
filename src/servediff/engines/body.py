"""A request's JSON body as the bytes the HTTP engine sends.

    servediff run --engine http --base-url http://127.0.0.1:8000 --concurrency 64 --out a.jsonl

Encoded once per request, so against a fast server it is part of the client's pace: msgspec
writes a chat body in about a tenth of ``json.dumps``'s time (BENCHMARKS.md, part 1). Both
write the same JSON values in the same key order; msgspec writes it compact and leaves
non-ASCII text as UTF-8 rather than ``\\uXXXX`` escapes, which every JSON parser reads alike.
Where the two would differ in meaning, ``json.dumps`` writes it, as it always did: a number
that is not finite (msgspec would write ``null``, a server's default, for it) and text that is
not valid Unicode (a lone surrogate, which msgspec refuses).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_ENCODER = msgspec.json.Encoder()


def body_bytes(body: dict[str, Any]) -> bytes:
    """``body`` as JSON bytes, the same values as ``json.dumps(body)``."""
    try:
        data = _ENCODER.encode(body)
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError):  # ValueError: a lone surrogate
        return json.dumps(body).encode()
    # msgspec writes a NaN or an infinity as null, and a request body holds no null of its own:
    # one that reads "null" anywhere (a prompt may say it) takes json.dumps's way, which is
    # right for every body, only slower.
    return json.dumps(body).encode() if b"null" in data else data
