"""The run record's schema: the header and one item line, each field declared once.

    servediff compare runs/*.jsonl        # every record is read against these types

Pydantic validates the header, at the file boundary; an item line is a msgspec struct (``Item``),
decoded without pydantic on the hot path. ``LeanItem`` is the view a lean read decodes a shadow
record's items into: the fields an analysis reads, listed by what it leaves out.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, TypedDict, cast

import msgspec
from pydantic import BaseModel, ConfigDict, Field, create_model

# 2: the header carries a run_id (a control must be two separate runs, not one file twice).
# 3: items may carry ttft_s, itl_s and finished_at (speed); older records read unchanged.
SCHEMA_VERSION = 3


# How every header line starts (``record`` is Header's first field): a cut first line that
# begins like this was a servediff header, anything else is some other file.
HEADER_START = b'{"record":"servediff-run"'


class RecordError(ValueError):
    """A record file that cannot be read or does not match what is asked of it."""


class TornHeader(RecordError):
    """The file holds only the start of a header line: the writer was killed while starting."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SuiteInfo(_Model):
    name: str
    version: str
    source: str
    data_sha256: str
    content_sha256: str
    item_ids: list[str]
    # How answers were scored, where the suite's name alone does not say (mmlu-letter); None:
    # the suite's own extraction rule (and every record written before this field existed).
    scoring: str | None = None


class SamplingInfo(_Model):
    """``types.SamplingParams`` as a run header records it: the same fields (what every request
    was sent with), read back from a file, where a record from an import or an older version may
    not know some of them. The report and compare read this type; it has no other copy."""

    # None: not recorded (an imported log that sent none, so the server's default applied).
    # Unknown is not greedy: compare refuses such a run unless forced.
    temperature: float | None
    seed: int | None
    max_tokens: int
    top_logprobs: int
    enable_thinking: bool | None
    # Defaults: what a record written before sampled runs existed ran with.
    top_p: float = 1.0
    top_k: int = 0
    samples: int = 1  # draws per item (temperature > 0): the record's lines are ITEM#s
    # None: a record written before these were sent, when a server applied its own defaults
    # (llama-cpp-python's server: repeat_penalty 1.1).
    repeat_penalty: float | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


class Header(_Model):
    record: str = "servediff-run"
    schema_version: int = SCHEMA_VERSION
    tool_version: str
    git_revision: str | None
    created: str
    label: str
    repeat: int
    engine: dict[str, Any]
    sampling: SamplingInfo
    suite: SuiteInfo
    concurrency: int
    environment: dict[str, Any]
    extra: dict[str, Any] = Field(default_factory=dict)
    # Unique per run, kept across resumes; None in records written before schema 2.
    run_id: str | None = None

    def fingerprint(self) -> str:
        """What must match for two files to be the same run (used by resume)."""
        keep = {
            "label": self.label,
            "repeat": self.repeat,
            "engine": _stable_engine(self.engine),
            "sampling": self.sampling.model_dump(),
            "suite": self.suite.content_sha256,
            # Same prompts scored another way are another run (kept out when unset, so that
            # records written before the field existed still resume).
            **({"scoring": self.suite.scoring} if self.suite.scoring else {}),
            "concurrency": self.concurrency,
        }
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


def _stable_engine(engine: dict[str, Any]) -> dict[str, Any]:
    # A server's version string, a fresh port or its reported defaults (each field servediff
    # knows is sent explicitly) must not invalidate a finished run.
    return {
        k: v
        for k, v in engine.items()
        if k not in ("server_version", "base_url", "verification", "vocab_sha256", "server_defaults")
    }


class Item(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True, gc=False
):
    """One finished item, as read back. A msgspec struct, not a pydantic model: a shadow record
    holds millions of lines, and validating each with pydantic was about 2/3 of compare's time
    (bench/analysis.py). ``_ItemModel``, derived from it, names a bad field.

    ``gc=False``: an item refers only to strings, numbers, lists and dicts, never back to itself,
    so the cyclic GC need not track millions of them."""

    id: str
    input: Any  # the messages list or the raw prompt
    text: str
    sha256: str
    n_tokens: int | None = None
    finish_reason: str | None = None
    latency_s: float | None = 0.0  # None: not recorded (an imported log that has no timings)
    error: str | None = None
    # Time to first token and mean inter-token latency (seconds), where tokens were seen arrive.
    ttft_s: float | None = None
    itl_s: float | None = None
    # When the runner received the item (epoch seconds): placed in time, a concurrent run's
    # items give its wall time and so its throughput. None in records before schema 3.
    finished_at: float | None = None
    token_ids: list[int] | None = None
    tokens: list[str] | None = None
    token_source: str | None = None
    # per token: [token, logprob, [[alt, logprob], ...]]
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None = None
    answer: str | None = None
    gold: str | None = None
    correct: bool | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)

    def to_json(self) -> str:
        """The item as one JSON line's content (fields at their defaults left out)."""
        return msgspec.json.encode(self).decode()


def _pydantic_twin(struct: type[msgspec.Struct]) -> type[_Model]:
    """The item line's schema as pydantic states it, derived from ``Item`` so that the two cannot
    drift: consulted only for a line the fast decoder refuses, to say which field is wrong (and
    to accept what pydantic's lax mode accepts)."""
    fields: dict[str, Any] = {}
    for f in msgspec.structs.fields(struct):
        if f.default_factory is not msgspec.NODEFAULT:
            fields[f.name] = (f.type, Field(default_factory=f.default_factory))
        else:
            fields[f.name] = (f.type, ... if f.required else f.default)
    model: type[_Model] = create_model("_ItemModel", __base__=_Model, **fields)
    return model


_ItemModel = _pydantic_twin(Item)


_DECODER = msgspec.json.Decoder(Item)


class _ShadowMetadata(TypedDict, total=False):
    """What compare reads of a shadow item's metadata; the request's path and parameters as sent
    stay on disk."""

    comparable: bool
    engine: dict[str, Any]
    engine_timings: dict[str, Any]
    # Where the two answers part, as the candidate's tokenizer splits both: [token index, this
    # side's token id there, the other side's] (shadow.recorder).
    first_token: list[int | None]


# A shadow item as compare reads it: an Item without its input (the messages) and with only the
# metadata above. Shadow records reach millions of lines, and no analysis reads the messages or
# the parameters as sent, yet they were most of an item's memory (1.7 KB per item with them,
# 0.7 KB without, on bench/shadow.py's records). Renaming "input" to a key no line holds makes
# the decoder skip it; unknown keys are skipped too, so the strict check of field names is the
# ordinary read's (``lean=False``). The SHA-256 of the text and the finish reason are skipped
# likewise ("" and None here): compare reads neither (it compares the texts themselves), and they
# were 166 bytes an item and a side, each a fresh object to allocate. The token ids the shadow
# replay asks the candidate's tokenizer for, where two answers differ, are skipped too, and the
# source they name: compare places the divergence from the item's "first_token" (taken from
# those ids when recorded), and reading the ids of 300,000 divergent pairs cost seconds. A
# subclass of Item: everything downstream reads it as one.
_LeanItem = msgspec.defstruct(
    "LeanItem",
    [
        ("input", Any, None),
        ("sha256", str, ""),
        ("finish_reason", str | None, None),
        ("token_ids", list[int] | None, None),
        ("token_source", str | None, None),
        ("metadata", _ShadowMetadata, msgspec.field(default_factory=dict)),
    ],
    bases=(Item,),
    rename={
        "input": " input (not read)",
        "sha256": " sha256 (not read)",
        "finish_reason": " finish_reason (not read)",
        "token_ids": " token_ids (not read)",
        "token_source": " token_source (not read)",
    },
    forbid_unknown_fields=False,
    frozen=True,
    kw_only=True,
    gc=False,
)


_LEAN_DECODER: msgspec.json.Decoder[Item] = msgspec.json.Decoder(_LeanItem)


def lean_item() -> type[Item]:
    """The type a lean read decodes an item line into (``_LeanItem``)."""
    return cast("type[Item]", _LeanItem)


def whole_item(line: bytes) -> Item:
    """An item line decoded whole, as an ordinary read does (msgspec.DecodeError if it is not
    one the fast decoder takes: the ordinary read says what is wrong with it)."""
    return _DECODER.decode(line)


def lean_line(line: bytes) -> Item:
    """An item line decoded as a lean read decodes it (msgspec.DecodeError as ``whole_item``)."""
    return _LEAN_DECODER.decode(line)
