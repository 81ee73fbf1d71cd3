"""What an OpenAI-compatible server sends back, validated where it enters: one model per shape.

    servediff run --engine http --base-url http://127.0.0.1:8000 --stream --out a.jsonl

Every field servediff reads from a response body, a streamed event or the model list is declared
here with its type; anything else in the body is ignored. A body that does not fit (``"choices":
"oops"``, ``"delta": 5``, ``"usage": "n/a"``, a logprob that is a string) raises ValueError naming
the field, which the HTTP engine records as an error on that one item (after its retries), never
an exception that ends the run and never a value read on trust. Strict: a number sent as a
string is a broken server, not a number.

A completion's body is read on the hot path (tens of thousands a second against a fast server),
where building these models costs more than the rest of the request. There ``lean_response``
decodes it with msgspec into structs that declare the same fields with the same types,
for the common shape only (every choice a chat one, or every one a text one); whatever they
refuse goes to the models, which either accept it with the same values (a rarer shape: mixed
choices, a NaN timing, a duplicated key) or word the error. The structs never accept what the
models refuse: tests/test_wire_lean.py checks both on the same bodies.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import UNSET, Meta, UnsetType
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class TopLogprob(_Wire):
    token: str
    logprob: float


class ChatTokenLogprob(_Wire):
    token: str
    logprob: float
    top_logprobs: list[TopLogprob] | None = None
    id: int | None = None  # the generated token's id: llama-server sends it, OpenAI and vLLM do not


class ChatLogprobs(_Wire):
    content: list[ChatTokenLogprob] | None = None


class TextLogprobs(_Wire):
    tokens: list[str] | None = None
    token_logprobs: list[float] | None = None
    top_logprobs: list[dict[str, float] | None] | None = None

    @model_validator(mode="after")
    def _aligned(self) -> TextLogprobs:
        # Parallel lists: zip would silently drop the tail of the longer one.
        n = len(self.tokens or ())
        if n and len(self.token_logprobs or ()) != n:
            raise ValueError("tokens and token_logprobs differ in length")
        if n and self.top_logprobs is not None and len(self.top_logprobs) != n:
            raise ValueError("tokens and top_logprobs differ in length")
        return self


class Usage(_Wire):
    completion_tokens: Annotated[int, Field(ge=0)] | None = None
    # The prompt as the server tokenized it (its chat template applied): servediff verify
    # compares it with the reference's, where another template or tokenizer shows at once.
    prompt_tokens: Annotated[int, Field(ge=0)] | None = None


class Message(_Wire):
    content: str | None  # required; null is a server that gave no answer (see openai_http)


class ChatChoice(_Wire):
    message: Message
    finish_reason: str | None = None
    logprobs: ChatLogprobs | None = None


class TextChoice(_Wire):
    text: str | None  # required, as message.content
    finish_reason: str | None = None
    logprobs: TextLogprobs | None = None


class _Lean(msgspec.Struct, gc=False):
    """msgspec's twin of ``_Wire``: unknown keys ignored; str, int and float strict (an int is
    accepted for a float, as pydantic's strict mode does, and a bool for neither)."""


class LeanTopLogprob(_Lean):
    token: str
    logprob: float


class LeanChatTokenLogprob(_Lean):
    token: str
    logprob: float
    top_logprobs: list[LeanTopLogprob] | None = None
    id: int | None = None


class LeanChatLogprobs(_Lean):
    content: list[LeanChatTokenLogprob] | None = None


class LeanTextLogprobs(_Lean):
    tokens: list[str] | None = None
    token_logprobs: list[float] | None = None
    top_logprobs: list[dict[str, float] | None] | None = None

    def __post_init__(self) -> None:
        # TextLogprobs._aligned (msgspec makes the ValueError a ValidationError of the decode)
        n = len(self.tokens or ())
        if n and len(self.token_logprobs or ()) != n:
            raise ValueError("tokens and token_logprobs differ in length")
        if n and self.top_logprobs is not None and len(self.top_logprobs) != n:
            raise ValueError("tokens and top_logprobs differ in length")


class LeanUsage(_Lean):
    completion_tokens: Annotated[int, Meta(ge=0)] | None = None
    prompt_tokens: Annotated[int, Meta(ge=0)] | None = None


class LeanMessage(_Lean):
    content: str | None


class LeanChatChoice(_Lean):
    message: LeanMessage
    finish_reason: str | None = None
    logprobs: LeanChatLogprobs | None = None


class LeanTextChoice(_Lean):
    text: str | None
    finish_reason: str | None = None
    logprobs: LeanTextLogprobs | None = None
    # A choice with a message is a chat one (``_kind``), whatever else it holds: refused here.
    message: UnsetType = UNSET


class LeanChatResponse(_Lean):
    choices: Annotated[list[LeanChatChoice], Meta(min_length=1)]
    usage: LeanUsage | None = None
    timings: dict[str, Any] | None = None


class LeanTextResponse(_Lean):
    choices: Annotated[list[LeanTextChoice], Meta(min_length=1)]
    usage: LeanUsage | None = None
    timings: dict[str, Any] | None = None


LeanResponse = LeanChatResponse | LeanTextResponse
_CHAT = msgspec.json.Decoder(LeanChatResponse)
_TEXT = msgspec.json.Decoder(LeanTextResponse)


def lean_response(raw: bytes) -> LeanResponse | None:
    """A completion body of the common shape, decoded and checked as ``Response`` would check it;
    None for anything else (``parse_json(Response, ...)`` then accepts it or says why not)."""
    # A chat body names "message"; a text body that does is refused by LeanTextChoice anyway.
    try:
        return (_CHAT if b'"message"' in raw else _TEXT).decode(raw)
    except msgspec.DecodeError:  # ValidationError is one
        return None


def _kind(key: str) -> Any:
    """A choice is a chat one when it has ``key`` (message, delta), else a text one: validated
    against that one model, so an error names its field rather than both models' guesses."""
    return Discriminator(lambda v: "chat" if isinstance(v, dict) and key in v else "text")


class Response(_Wire):
    """A chat or text completion (not streamed)."""

    choices: Annotated[
        list[
            Annotated[
                Annotated[ChatChoice, Tag("chat")] | Annotated[TextChoice, Tag("text")], _kind("message")
            ]
        ],
        Field(min_length=1),
    ]
    usage: Usage | None = None
    timings: dict[str, Any] | None = None  # llama.cpp's C++ server


class Delta(_Wire):
    content: str | None = None  # absent: nothing this event; null: see ``null_content``
    role: str | None = None


class ChunkChatChoice(_Wire):
    delta: Delta | None
    finish_reason: str | None = None
    logprobs: ChatLogprobs | None = None

    @property
    def null_content(self) -> bool:
        """The event says the answer is ``null`` (a null delta, or a delta with content null),
        rather than just carrying no text: llama-cpp-python's first event is role-only, and
        llama-server's announces the role with ``"content": null`` before any text; neither counts."""
        d = self.delta
        if d is None:
            return True
        # d.role, not the key: a server may send "role": null beside every piece of content
        return "content" in d.model_fields_set and d.content is None and d.role is None


class ChunkTextChoice(_Wire):
    text: str | None = None
    finish_reason: str | None = None
    logprobs: TextLogprobs | None = None

    @property
    def null_content(self) -> bool:
        return "text" in self.model_fields_set and self.text is None


class Chunk(_Wire):
    """One streamed event: a piece of a choice, or only usage (vLLM, SGLang), or an error."""

    error: Any = None
    choices: (
        list[
            Annotated[
                Annotated[ChunkChatChoice, Tag("chat")] | Annotated[ChunkTextChoice, Tag("text")],
                _kind("delta"),
            ]
        ]
        | None
    ) = None
    usage: Usage | None = None
    timings: dict[str, Any] | None = None


class Model(_Wire):
    id: str | None = None  # an entry without one is skipped, as before this module


class ModelList(_Wire):
    data: list[Model] = []


M = TypeVar("M", bound=_Wire)
_TAGS = frozenset({"chat", "text"})  # the discriminator's tags, which pydantic puts in an error's loc


def parse(model: type[M], value: Any, what: str) -> M:
    """``value`` (parsed JSON) as ``model``; ValueError naming the field else."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ValueError(_message(exc, what)) from None


def parse_json(model: type[M], raw: bytes | str, what: str) -> M:
    """A JSON text as ``model``, parsed and checked in one pass (pydantic-core's parser: about as
    fast as ``json.loads`` alone, which matters at tens of thousands of responses a second)."""
    if not raw.strip():
        raise ValueError(f"empty {what}")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise ValueError(_message(exc, what)) from None


def _message(exc: ValidationError, what: str) -> str:
    """One line: "WHAT is not JSON (…)", or "unexpected WHAT shape: FIELD: what is wrong"."""
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        return f"{what} is not JSON ({first['msg']})"
    loc = first["loc"]
    where = ".".join(
        str(p) for i, p in enumerate(loc) if not (i and isinstance(loc[i - 1], int) and p in _TAGS)
    )
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"unexpected {what} shape: {where + ': ' if where else ''}{first['msg']}{more}"
