"""The run record's schema: the header and one item line, each field declared once.

    servediff compare runs/*.jsonl        # every record is read against these types

Pydantic validates the header, at the file boundary; an item line is a msgspec struct (``Item``),
decoded without pydantic on the hot path. ``LeanItem`` is the view a lean read decodes a shadow
record's items into: the fields an analysis reads, listed by what it leaves out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal, TypedDict, cast

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
    (bench/analysis.py). ``Schema.model``, derived from it, names a bad field; ``ITEM_FIELDS``
    says how each field is written, read lean and exported.

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
    # the same for the end token, where the text ended by choosing one (position len(logprobs))
    stop_logprobs: tuple[str, float, list[tuple[str, float]]] | None = None
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


class _ShadowMetadata(TypedDict, total=False):
    """What compare reads of a shadow item's metadata; the request's path and parameters as sent
    stay on disk."""

    comparable: bool
    engine: dict[str, Any]
    engine_timings: dict[str, Any]
    # Where the two answers part, as the candidate's tokenizer splits both: [token index, this
    # side's token id there, the other side's] (shadow.recorder).
    first_token: list[int | None]


# How each item field is written, read lean and exported: one entry per field of ``Item``, in its
# order (``Schema`` refuses an item type whose fields the table does not declare). ``lean``:
# "column", a column of the lean store of its own (the id, the text, the token count); "time", one
# of the store's four float columns; "skipped", a field a lean read leaves out (at ``lean_default``);
# "kept", a field a lean read keeps: an item holding it is kept whole (what a new field is, unless
# the store is given a column for it); "metadata", the metadata (only what compare reads, lean).
ItemUse = Literal["column", "time", "skipped", "kept", "metadata"]


@dataclass(frozen=True, slots=True)
class ItemField:
    lean: ItemUse
    always: bool = False  # written even at its default (null): a record has always held it
    digits: int | None = None  # rounded to this many decimals when written (times)
    export: bool = False  # a column of ``servediff export``
    lean_default: Any = None  # what a lean read leaves a skipped field at


# A shadow item as compare reads it (``Schema.lean``): an Item without its input (the messages)
# and with only the metadata compare reads. Shadow records reach millions of lines, and no
# analysis reads the messages or the parameters as sent, yet they were most of an item's memory
# (1.7 KB per item with them, 0.7 KB without, on bench/shadow.py's records). Renaming a skipped
# field to a key no line holds makes the decoder skip it; unknown keys are skipped too, so the
# strict check of field names is the ordinary read's. The SHA-256 of the text and the finish
# reason are skipped likewise: compare reads neither (it compares the texts themselves), and they
# were 166 bytes an item and a side, each a fresh object to allocate. The token ids the shadow
# replay asks the candidate's tokenizer for, where two answers differ, are skipped too, and the
# source they name: compare places the divergence from the item's "first_token" (taken from
# those ids when recorded), and reading the ids of 300,000 divergent pairs cost seconds.
ITEM_FIELDS: dict[str, ItemField] = {
    "id": ItemField("column", always=True),
    "input": ItemField("skipped", always=True),
    "text": ItemField("column", always=True, export=True),
    "sha256": ItemField("skipped", always=True, export=True, lean_default=""),
    "n_tokens": ItemField("column", always=True, export=True),
    "finish_reason": ItemField("skipped", always=True, export=True),
    "latency_s": ItemField("time", always=True, digits=6, export=True),
    "error": ItemField("kept", always=True, export=True),
    "ttft_s": ItemField("time", digits=6),
    "itl_s": ItemField("time", digits=6),
    "finished_at": ItemField("time", digits=6),
    "token_ids": ItemField("skipped"),
    "tokens": ItemField("kept"),
    "token_source": ItemField("skipped"),
    "logprobs": ItemField("kept"),
    "stop_logprobs": ItemField("kept"),
    "answer": ItemField("kept", export=True),
    "gold": ItemField("kept", export=True),
    "correct": ItemField("kept", export=True),
    "metadata": ItemField("metadata"),
}
# The lean store's own columns: a field of another use than "kept" or "skipped" needs its code.
_STORE = ("id", "text", "n_tokens", "latency_s", "finished_at", "ttft_s", "itl_s", "metadata")


class Schema:
    """An item type and the table of its fields: what every path writes, reads whole, reads lean
    and exports. ``SCHEMA`` is the record's; a test adds a field with a subclass of ``Item`` and
    one more table entry, and reads with ``ReadOptions(schema=...)``."""

    def __init__(self, item: type[Item], fields: Mapping[str, ItemField]) -> None:
        names = [f.name for f in msgspec.structs.fields(item)]
        if set(names) != set(fields):
            odd = sorted(set(names) ^ set(fields))
            raise TypeError(f"the table does not declare {item.__name__}'s fields exactly: {odd}")
        self.item, self.fields = item, {n: fields[n] for n in names}
        stored = sorted(n for n, f in self.fields.items() if f.lean in ("column", "time", "metadata"))
        if stored != sorted(_STORE):
            raise TypeError(f"the lean store keeps {sorted(_STORE)} as columns, not {stored}")
        self.lean = _lean_view(item, self.fields)
        self.decoder = msgspec.json.Decoder(item)
        self.lean_decoder: msgspec.json.Decoder[Item] = msgspec.json.Decoder(self.lean)
        self.model = _pydantic_twin(item)
        self.kept = tuple(n for n, f in self.fields.items() if f.lean == "kept")
        self.exported = tuple(n for n, f in self.fields.items() if f.export)
        # what a plain lean item holds beyond its columns: each field at its lean default
        beyond = [n for n, f in self.fields.items() if f.lean in ("kept", "skipped")]
        self.beyond = attrgetter(*beyond)
        self.beyond_defaults = tuple(self.fields[n].lean_default for n in beyond)

    def line(self, item: Item) -> str:
        """``item`` as one line of a record (fields at their defaults left out, but those a
        record has always held)."""
        out: dict[str, Any] = {}
        for f in msgspec.structs.fields(item):
            use, value = self.fields[f.name], getattr(item, f.name)
            default = f.default if f.default_factory is msgspec.NODEFAULT else f.default_factory()
            if use.always or value != default:
                rounded = use.digits is not None and value is not None
                out[f.name] = round(value, use.digits) if rounded else value
        return json.dumps(out, ensure_ascii=False) + "\n"


def _lean_view(item: type[Item], fields: Mapping[str, ItemField]) -> type[Item]:
    """A subclass of ``item`` whose skipped fields are renamed to keys no line holds (so never
    decoded) and whose metadata is only what compare reads: everything downstream reads it as an
    item."""
    types = {f.name: f.type for f in msgspec.structs.fields(item)}
    skipped = [n for n, f in fields.items() if f.lean == "skipped"]
    view = msgspec.defstruct(
        f"Lean{item.__name__}",
        [
            *((n, types[n], fields[n].lean_default) for n in skipped),
            ("metadata", _ShadowMetadata, msgspec.field(default_factory=dict)),
        ],
        bases=(item,),
        rename={n: f" {n} (not read)" for n in skipped},
        forbid_unknown_fields=False,
        frozen=True,
        kw_only=True,
        gc=False,
    )
    return cast("type[Item]", view)


SCHEMA = Schema(Item, ITEM_FIELDS)


def lean_item() -> type[Item]:
    """The type a lean read decodes an item line into (``SCHEMA.lean``)."""
    return SCHEMA.lean


def whole_item(line: bytes) -> Item:
    """An item line decoded whole, as an ordinary read does (msgspec.DecodeError if it is not
    one the fast decoder takes: the ordinary read says what is wrong with it)."""
    return SCHEMA.decoder.decode(line)


def lean_line(line: bytes) -> Item:
    """An item line decoded as a lean read decodes it (msgspec.DecodeError as ``whole_item``)."""
    return SCHEMA.lean_decoder.decode(line)
