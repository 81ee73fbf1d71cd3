"""The bytes of a request body (``engines.body``): the values ``json.dumps`` would send, in its
key order; where msgspec would send other values (a number that is not finite) or cannot encode
(a lone surrogate), exactly ``json.dumps``'s bytes.

    pytest tests/test_request_body.py
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from servediff.engines.body import body_bytes
from servediff.engines.openai_http import HTTPEngine, HTTPOptions
from servediff.types import Completion, Sample, SamplingParams
from tests.helpers.stub_server import OK_BODY, Request, stub_server

TEXT = st.text(max_size=20)  # any code point, surrogates included
MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]), "content": TEXT}))
BODY = st.fixed_dictionaries(
    {
        "model": TEXT,
        "temperature": st.floats(),  # NaN and infinities included
        "seed": st.integers(-(2**70), 2**70),  # past 64 bits too
        "max_tokens": st.integers(0, 10**6),
        "messages": MESSAGES,
    },
    optional={"top_p": st.floats(0, 1), "logprobs": st.booleans(), "prompt": TEXT},
)


@settings(max_examples=500, deadline=None)
@given(BODY)
def test_the_same_values_in_the_same_order(body: dict[str, Any]) -> None:
    sent = body_bytes(body)
    reference = json.dumps(body)
    # parse_constant: NaN and Infinity read back as the same text, so that equality holds
    back, expected = (json.loads(x, parse_constant=str) for x in (sent, reference))
    assert back == expected and list(back) == list(expected)


def test_what_msgspec_would_write_otherwise_is_json_dumps_bytes() -> None:
    for body in (
        {"temperature": float("nan"), "messages": []},
        {"temperature": float("inf")},
        {"messages": [{"role": "user", "content": "a lone \ud800 surrogate"}]},
        {"messages": [{"role": "user", "content": "null"}]},
    ):
        assert body_bytes(body) == json.dumps(body).encode()


def test_a_plain_body_is_compact_utf8() -> None:
    body = {"model": "m", "temperature": 0.7, "messages": [{"role": "user", "content": "é ✓"}]}
    assert (
        body_bytes(body)
        == '{"model":"m","temperature":0.7,"messages":[{"role":"user","content":"é ✓"}]}'.encode()
    )


def test_the_server_receives_the_body_the_engine_built() -> None:
    """Non-ASCII text travels as UTF-8 and arrives as the same JSON value; a prompt that says
    "null" too."""
    got: list[dict[str, Any]] = []

    def answer(request: Request) -> tuple[int, str, float]:
        got.append(request.body)
        return 200, OK_BODY, 0.0

    samples = [
        Sample(id="a", messages=({"role": "user", "content": "é ✓ 😀 \\u00e9"},)),
        Sample(id="b", messages=({"role": "user", "content": "is null JSON?"},)),
    ]
    params = SamplingParams(max_tokens=8, temperature=0.7, top_p=0.9)
    with stub_server(answer) as (url, _):
        engine = HTTPEngine(HTTPOptions(base_url=url, retokenize=False))
        done: list[Completion] = []
        engine.generate(samples, params, done.append)
    assert [c.text for c in done] == ["stub answer", "stub answer"]
    assert got == [engine.payload(s, params)[1] for s in samples]
