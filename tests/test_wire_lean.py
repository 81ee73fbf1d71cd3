"""The hot path's reading of a completion body (``wire.lean_response``, msgspec) against the
models' (``wire.Response``, pydantic): it may refuse more, never accept what they refuse, and
what it accepts gives the same Completion.

    pytest tests/test_wire_lean.py

Everything it refuses goes to the models, so a refusal costs only time; an acceptance the models
would refuse would let a broken server's answer be scored. Hypothesis builds response-like
bodies whose every field is sometimes of the wrong JSON type, null, missing, negative or
misaligned; the recorded vLLM bodies and the fault stub's bodies are checked by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servediff.engines.response import completion_of, parse_response
from servediff.engines.wire import Response, lean_response, parse_json
from servediff.types import Completion
from tests.helpers.stub_server import FAULTS, OK_BODY, STATUS_FAULTS, chat_body

VLLM = Path(__file__).parent / "data" / "vllm"


def by_models(raw: bytes) -> Completion | str:
    """What the models make of ``raw``: the Completion, or the error's message."""
    try:
        return completion_of("i", parse_json(Response, raw, "response"), 0.5)
    except ValueError as exc:
        return str(exc)


def by_parse_response(raw: bytes) -> Completion | str:
    try:
        return parse_response("i", raw, 0.5)
    except ValueError as exc:
        return str(exc)


def agrees(raw: bytes) -> bool:
    """True when the lean reading accepted ``raw``; fails the test if it should not have."""
    lean = lean_response(raw)
    models = by_models(raw)
    if lean is None:
        # The models' answer, or their very error (repr: a NaN timing is not equal to itself).
        assert repr(by_parse_response(raw)) == repr(models)
        return False
    assert not (isinstance(models, str) and models.startswith(("unexpected", "response is not"))), models
    try:
        mine: Completion | str = completion_of("i", lean, 0.5)
    except ValueError as exc:
        mine = str(exc)
    assert mine == models
    return True


def recorded_bodies() -> list[tuple[str, bytes]]:
    out = []
    for path in sorted(VLLM.glob("*.json")):
        got = json.loads(path.read_text(encoding="utf-8"))
        body = got.get("body") if isinstance(got, dict) else None
        if isinstance(body, str) and got.get("status") == 200 and '"choices"' in body and "data:" not in body:
            out.append((path.stem, body.encode()))
    return out


@pytest.mark.parametrize(("name", "raw"), recorded_bodies(), ids=[n for n, _ in recorded_bodies()])
def test_recorded_vllm_answers_take_the_lean_path_to_the_same_completion(name: str, raw: bytes) -> None:
    assert agrees(raw), f"{name}: a well-formed vLLM body should not need the models"


def test_the_stubs_answers_take_the_lean_path() -> None:
    for raw in (OK_BODY, chat_body("4"), chat_body(""), chat_body(None)):
        assert agrees(raw.encode())


MALFORMED = sorted(set(FAULTS) - set(STATUS_FAULTS) - {"content null"})


@pytest.mark.parametrize("kind", MALFORMED)
def test_every_malformed_body_is_refused_with_the_models_error(kind: str) -> None:
    raw = FAULTS[kind][1].encode()
    assert lean_response(raw) is None
    with pytest.raises(ValueError) as caught:
        parse_response("i", raw, 0.5)
    assert str(caught.value) == by_models(raw) and str(caught.value).startswith(("unexpected", "response"))


@pytest.mark.parametrize(
    ("raw", "lean"),
    [
        (b'{"choices": [{"messag\\u0065": {"content": "a"}}]}', False),  # an escaped key: still chat
        (b'{"choices": [{"text": "b", "messag\\u0065": {"content": "a"}}]}', False),  # so: "a"
        (b'{"choices": [{"message": {"content": "a"}}, {"text": "b"}]}', False),  # mixed choices
        (b'{"choices": [{"message": {"content": "a"}, "text": 5}]}', True),  # a chat choice's text: ignored
        (b'{"choices": "oops", "choices": [{"message": {"content": "a"}}]}', False),  # the last key counts
        (b'{"choices": [{"message": {"content": "a"}}], "choices": []}', False),
        (b'{"choices": [{"message": {"content": "a"}}], "timings": {"t": NaN}}', False),  # json's NaN
        (b'{"choices": [{"text": "a", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [0.0]}}]}', False),
        (b'{"choices": [{"message": {"content": "a"}}], "usage": {"completion_tokens": -1}}', False),
        (b'{"choices": [{"message": {"content": "a"}}], "usage": {"completion_tokens": 1.0}}', False),
        (b'{"choices": [{"message": {"content": "a"}}], "usage": {"completion_tokens": true}}', False),
        (b'{"choices": [{"message": {"content": 1}}]}', False),
        (b'{"choices": []}', False),
        (b'{"choices": [{"message": null}]}', False),
        (b'{"choices": [{"message": {}}]}', False),
        (b'{"choices": [{}]}', False),
        (b"  \n", False),
        (b"[]", False),
        (b'{"choices": [{"text": "\xff"}]}', False),
    ],
)
def test_rarer_and_broken_shapes(raw: bytes, lean: bool) -> None:
    """Refused by the lean reading: read by the models, or refused with their error."""
    assert agrees(raw) is lean


# Bodies built to probe every field: valid in type (though a count may be negative, logprobs
# misaligned, an answer null), and with ``junk`` one field in ten anything at all.
ANY_JSON = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 3),
    st.floats(-2, 2, allow_nan=False),
    st.text(max_size=2),
    st.just("1.5"),
    st.just([]),
    st.just({}),
    st.just([1.5]),
    st.just({"token": "a"}),
)
TEXT = st.text(alphabet="ab é\n", max_size=3)
NUMBER = st.one_of(st.floats(-30, 0, allow_nan=False), st.integers(-3, 0))
FINISH = st.sampled_from(["stop", "length", None])


def bodies(junk: bool) -> st.SearchStrategy[Any]:
    def mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        # sampled_from shrinks to its first entry: a failure shrinks towards valid fields
        return st.sampled_from(range(10)).flatmap(lambda i: ANY_JSON if i == 9 else valid) if junk else valid

    def obj(required: dict[str, Any], optional: dict[str, Any]) -> st.SearchStrategy[Any]:
        fields = {k: mostly(v) for k, v in required.items()}
        return mostly(st.fixed_dictionaries(fields, optional={k: mostly(v) for k, v in optional.items()}))

    top = obj({"token": TEXT, "logprob": NUMBER}, {})
    entry = obj(
        {"token": TEXT, "logprob": NUMBER},
        {"top_logprobs": st.lists(top, max_size=2), "id": st.integers(-1, 9)},
    )
    text_lps = {
        "tokens": st.lists(TEXT, max_size=2),
        "token_logprobs": st.lists(NUMBER, max_size=2),
        "top_logprobs": st.lists(st.one_of(st.none(), st.dictionaries(TEXT, NUMBER, max_size=2)), max_size=2),
    }
    chat = obj(
        {"message": obj({"content": st.one_of(TEXT, st.none())}, {"role": st.just("assistant")})},
        {
            "finish_reason": FINISH,
            "logprobs": obj({}, {"content": st.lists(entry, max_size=3)}),
            "index": st.just(0),
        },
    )
    text = obj({"text": st.one_of(TEXT, st.none())}, {"finish_reason": FINISH, "logprobs": obj({}, text_lps)})
    rest = {
        "usage": obj({}, {"completion_tokens": st.one_of(st.integers(-1, 40), st.none())}),
        "timings": st.dictionaries(st.sampled_from(["n", "ms"]), NUMBER, max_size=2),
        "id": TEXT,
    }
    # mostly one kind of choice, as servers send them; sometimes both
    choices = st.one_of(st.lists(chat, min_size=1, max_size=2), st.lists(text, min_size=1, max_size=2))
    return obj({"choices": st.one_of(choices, st.lists(st.one_of(chat, text), max_size=2))}, rest)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(junk=True), st.booleans())
def test_the_lean_reading_never_accepts_what_the_models_refuse(body: Any, spaced: bool) -> None:
    raw = json.dumps(body, separators=None if spaced else (",", ":")).encode()
    agrees(raw)


def places(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value inside ``value`` (keys and indexes), itself first."""
    if isinstance(value, dict):
        return [at, *(p for k, v in value.items() for p in places(v, (*at, k)))]
    if isinstance(value, list):
        return [at, *(p for i, v in enumerate(value) for p in places(v, (*at, i)))]
    return [at]


GONE = object()


def with_one_change(body: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    body = json.loads(json.dumps(body))
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    if new is GONE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return body


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(junk=False), st.data())
def test_one_field_of_any_type_anywhere(body: Any, data: st.DataObject) -> None:
    """A valid body with one value anywhere in it replaced by anything, or its key removed."""
    path = data.draw(st.sampled_from(places(body)))
    keyed = bool(path) and isinstance(path[-1], str)
    new = data.draw(st.one_of(ANY_JSON, st.just(GONE)) if keyed else ANY_JSON)
    agrees(json.dumps(with_one_change(body, path, new)).encode())


# Every field a body can hold, filled in: each place in them gets each value below in turn.
FULL_CHAT = {
    "choices": [
        {
            "message": {"role": "assistant", "content": "ab"},
            "finish_reason": "stop",
            "logprobs": {
                "content": [
                    {
                        "token": "a",
                        "logprob": -0.5,
                        "id": 7,
                        "top_logprobs": [{"token": "a", "logprob": -0.5}],
                    },
                    {"token": "b", "logprob": -1, "top_logprobs": []},
                ]
            },
        }
    ],
    "usage": {"completion_tokens": 2, "prompt_tokens": 3},
    "timings": {"predicted_ms": 1.5, "n": 2},
}
FULL_TEXT = {
    "choices": [
        {
            "text": "ab",
            "finish_reason": "length",
            "logprobs": {
                "tokens": ["a", "b"],
                "token_logprobs": [-0.5, -1],
                "top_logprobs": [{"a": -0.5, "c": -2}, None],
            },
        }
    ],
    "usage": {"completion_tokens": 2},
}
VALUES = [None, True, 0, -1, 2, 1.5, -0.5, "", "a", "1.5", [], [1.5], {}, {"token": "a"}, GONE]


@pytest.mark.parametrize("body", [FULL_CHAT, FULL_TEXT], ids=["chat", "text"])
def test_every_place_of_a_full_body_with_every_kind_of_value(body: dict[str, Any]) -> None:
    assert agrees(json.dumps(body).encode())
    for path in places(body)[1:]:
        for new in VALUES:
            if new is not GONE or isinstance(path[-1], str):
                agrees(json.dumps(with_one_change(body, path, new)).encode())


@pytest.mark.parametrize("junk", [True, False])
def test_the_generated_bodies_reach_both_outcomes(junk: bool) -> None:
    """The properties above are only worth something if their bodies are often read by the lean
    reading and often not."""
    outcomes: list[bool] = []

    @settings(max_examples=300, deadline=None, database=None)
    @given(bodies(junk))
    def collect(body: Any) -> None:
        outcomes.append(lean_response(json.dumps(body).encode()) is not None)

    collect()
    assert 0.1 < sum(outcomes) / len(outcomes) < 0.95
