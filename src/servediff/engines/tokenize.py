"""A text's token ids from a server's own tokenizer, where the server exposes one.

Without token data a divergence has only a character index; the server's tokenizer gives it a
token index too (it can split differently from generation, so it is marked "retokenized").
Each server names the endpoint and reads the text its own way:

    llama-cpp-python   POST /extras/tokenize   {"input": text}
    vLLM, SGLang       POST /tokenize          {"model": ..., "prompt": text, "add_special_tokens": false}
    llama-server       POST /tokenize          {"content": text, "add_special": false, ...}

llama-server answers the vLLM body with an empty list (it reads no "content"), so an empty list
for a non-empty text is a request the server did not understand, not an answer.
"""

from __future__ import annotations

import json
from typing import Any, Literal

Reader = Literal["llama-cpp-python", "openai", "llama-server"]
# Each way of asking, in the order a server of unknown kind is asked.
WAYS: tuple[tuple[str, Reader], ...] = (
    ("/tokenize", "openai"),
    ("/tokenize", "llama-server"),
    ("/extras/tokenize", "llama-cpp-python"),
)


def body(reader: Reader, text: str, model: str | None) -> bytes:
    if reader == "llama-cpp-python":
        out: dict[str, Any] = {"input": text}
    elif reader == "llama-server":
        out = {"content": text, "add_special": False, "parse_special": False}
    else:
        out = {"model": model, "prompt": text, "add_special_tokens": False}
    return json.dumps(out).encode()


def token_ids(raw: bytes, text: str) -> list[int] | None:
    """The ids of a tokenize answer, or None where it is not one for ``text``."""
    try:
        out = json.loads(raw)
    except ValueError:
        return None
    tokens = out.get("tokens") if isinstance(out, dict) else None
    if not isinstance(tokens, list) or (not tokens and text):
        return None
    return tokens if all(isinstance(t, int) and not isinstance(t, bool) for t in tokens) else None
