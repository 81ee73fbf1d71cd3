"""The run record: one JSONL file per (configuration, suite, repeat).

Line 1 is a header (schema version, tool version, engine identity, sampling, suite, concurrency);
every further line is one finished item. Items are appended as they finish, so an interrupted
run resumes by skipping the ids already present. Order is not significant; for an id written
twice (an errored item retried on resume) the last line wins.

A writer killed mid-write leaves one of two tails, and the reader tells them apart: a complete
JSON line that only lacks its newline is kept (``Run.unterminated``), while a cut line (a JSON
prefix, or bytes cut inside a UTF-8 character) is left out (``Run.torn``). ``seal`` then makes the
file safe to append to. Anything else that is wrong (invalid UTF-8, a bad field) is a
``RecordError`` naming the file, the line and the field.

Pydantic validates here, at the file boundary, and nowhere on the hot path.
"""

from __future__ import annotations

import codecs
import gc
import hashlib
import io
import json
import platform
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Protocol, TypedDict, cast

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from servediff import __version__
from servediff.columns import Columns
from servediff.lean_items import Block, LeanItems, block_of, id_list
from servediff.suites.base import Score
from servediff.types import Completion, SamplingParams

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
# Bytes read at a time by a lean read: ~3,000 lines of a shadow record, into one buffer reused
# from block to block (a fresh megabyte each time was fresh pages from the kernel each time).
_BLOCK_BYTES = 1 << 20
_NEWLINE = b"\n"


def _stable_engine(engine: dict[str, Any]) -> dict[str, Any]:
    # A server's version string, a fresh port or its reported defaults (each field servediff
    # knows is sent explicitly) must not invalidate a finished run.
    return {
        k: v
        for k, v in engine.items()
        if k not in ("server_version", "base_url", "verification", "vocab_sha256", "server_defaults")
    }


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def git_revision() -> str | None:
    """The servediff checkout's revision when running from one (None when installed)."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment() -> dict[str, Any]:
    from importlib import metadata

    versions = {}
    for pkg in ("llama-cpp-python", "aiohttp", "numpy", "torch", "transformers"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": versions,
    }


def make_header(
    *,
    label: str,
    repeat: int,
    engine: dict[str, Any],
    sampling: SamplingParams,
    suite: SuiteInfo,
    concurrency: int,
    extra: dict[str, Any] | None = None,
) -> Header:
    return Header(
        tool_version=__version__,
        git_revision=git_revision(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        label=label,
        repeat=repeat,
        engine=engine,
        sampling=SamplingInfo(**asdict(sampling)),
        suite=suite,
        concurrency=concurrency,
        environment=environment(),
        extra=extra or {},
        run_id=new_run_id(),
    )


def annotate(path: Path, extra: dict[str, Any]) -> None:
    """Merge ``extra`` into a record's header (line 1), atomically: verification is known only
    after the run, and a report renders from records alone."""
    header = read_header(path)
    updated = header.model_copy(update={"extra": {**header.extra, **extra}})
    with path.open("rb") as f:
        f.readline()
        rest = f.read()
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(updated.model_dump_json().encode() + b"\n" + rest)
    tmp.replace(path)


def new_run_id() -> str:
    return uuid.uuid4().hex


def item_line(c: Completion, input_: Any, score: Score | None, metadata: dict[str, Any]) -> str:
    """One JSON line for a finished item. Plain dicts: this runs once per request."""
    d: dict[str, Any] = {
        "id": c.item_id,
        "input": input_,
        "text": c.text,
        "sha256": sha256_text(c.text),
        "n_tokens": c.n_tokens,
        "finish_reason": c.finish_reason,
        "latency_s": round(c.latency_s, 6),
        "error": c.error,
    }
    for key in ("ttft_s", "itl_s"):
        value = getattr(c, key)
        if value is not None:
            d[key] = round(value, 6)
    if c.finished_at is not None:
        d["finished_at"] = round(c.finished_at, 6)
    if c.token_ids is not None:
        d["token_ids"] = c.token_ids
    if c.tokens is not None:
        d["tokens"] = c.tokens
    if c.token_source is not None:
        d["token_source"] = c.token_source
    if c.logprobs is not None:
        d["logprobs"] = [[t.token, t.logprob, [list(p) for p in t.top]] for t in c.logprobs]
    if c.stop_logprob is not None:
        t = c.stop_logprob
        d["stop_logprobs"] = [t.token, t.logprob, [list(p) for p in t.top]]
    if score is not None:
        d.update(answer=score.answer, gold=score.gold, correct=score.correct)
    if c.engine_meta:
        metadata = {**metadata, "engine": c.engine_meta}
    if c.engine_timings:
        # The engine's own numbers, kept apart from servediff's measurements.
        metadata = {**metadata, "engine_timings": c.engine_timings}
    if metadata:
        d["metadata"] = metadata
    return json.dumps(d, ensure_ascii=False) + "\n"


@dataclass
class Run:
    """A record file read back: its header and its items by id (last line per id wins)."""

    path: Path
    header: Header
    # A dict, or for a lean read the items as columns (``servediff.lean_items``).
    items: Mapping[str, Item] = field(default_factory=dict)
    # Where the complete lines end (bytes): appending is safe only from here on.
    end: int = 0
    # The line number of a cut last line that was left out (its item is not done), if any.
    torn: int | None = None
    # True when the last kept line is complete but lacks its newline.
    unterminated: bool = False
    # A lean read's per-item numbers for the speed statistics, one row per item line read (the
    # speed statistics read them once and let them go).
    columns: Columns | None = None

    @property
    def label(self) -> str:
        return self.header.label

    def done_ids(self) -> set[str]:
        """Items finished without an error: a resumed run skips these and retries the rest."""
        return {i for i, item in self.items.items() if item.error is None}


def read_header(path: Path) -> Header:
    try:
        with Path(path).open("rb") as f:
            return _parse_header(Path(path), f.readline())
    except OSError as exc:
        raise RecordError(f"{path}: {exc.strerror or exc}") from exc


def _parse_header(path: Path, line: bytes) -> Header:
    if not line:
        raise RecordError(f"{path}: empty file, not a servediff run record")
    cut = not line.endswith(b"\n")  # a first line without newline is the whole file
    try:
        raw = json.loads(line.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError alike
        if cut and (line.startswith(HEADER_START) or HEADER_START.startswith(line)):
            raise TornHeader(
                f"{path}:1: the header line is cut off (the run was killed while starting)"
            ) from exc
        what = "not valid UTF-8" if isinstance(exc, UnicodeDecodeError) else "not JSON"
        raise RecordError(f"{path}:1: first line is {what} ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("record") != "servediff-run":
        raise RecordError(f"{path}: not a servediff run record (no header line)")
    version = raw.get("schema_version", SCHEMA_VERSION)
    # Checked before pydantic: it would coerce "1" to 1, and a comparison with a str or None
    # would raise TypeError.
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"{path}:1: bad header: schema_version must be an integer, not {version!r}")
    if version > SCHEMA_VERSION:
        raise RecordError(f"{path}: schema {version} is newer than this servediff")
    if version < 1:  # versions start at 1: 0 or -1 is no record this tool (or any) wrote
        raise RecordError(
            f"{path}:1: bad header: schema_version must be from 1 to {SCHEMA_VERSION}, not {version}"
        )
    try:
        return Header.model_validate(raw)
    except ValidationError as exc:
        raise RecordError(f"{path}:1: bad header: {_first_error(exc)}") from exc


def _first_error(exc: ValidationError) -> str:
    """One line for a validation failure: the first field and what is wrong with it."""
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"]) or "(line)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"field {where}: {first['msg']}{more}"


def read_run(path: Path, lean: bool = False, beside: Sequence[Run] = (), ahead: Ahead | None = None) -> Run:
    """Read a record. A cut last line (the writer was killed mid-write) is left out: see ``torn``.

    ``lean``: a shadow record's items after the first are read without their input and with only
    the metadata compare uses (``_LeanItem``), and an item whose text is the same as in the other
    side's record (one of ``beside``, runs already read) shares that text; other records are read
    whole either way. ``ahead``: a read-ahead process parsing this record
    (``servediff.readahead``), whose frames a lean read replays where it finished cleanly."""
    path = Path(path)
    try:
        f: IO[bytes] = path.open("rb")
    except OSError as exc:
        raise RecordError(f"{path}: {exc.strerror or exc}") from exc
    # The cyclic GC finds nothing among freshly parsed items, yet with 100,000s of new objects
    # it runs full collections over and over; pausing it while reading halves the time.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with f:
            run = open_run(path, f)
            lean = lean and "shadow" in run.header.extra
            _read_items(run, f, lean, _partner(run, beside) if lean else None, ahead)
    finally:
        if was_enabled:
            gc.enable()
    return with_items_as_suite(run)


def with_items_as_suite(run: Run) -> Run:
    """Shadow traffic has no suite known in advance: its items are the ones it recorded."""
    if "shadow" in run.header.extra and not run.header.suite.item_ids:
        suite = run.header.suite.model_copy(update={"item_ids": id_list(run.items)})
        run.header = run.header.model_copy(update={"suite": suite})
    return run


def open_run(path: Path, f: IO[bytes]) -> Run:
    """The run whose header is the first line of ``f`` (read from its start), no items yet."""
    first = f.readline()
    run = Run(path=path, header=_parse_header(path, first), end=len(first))
    run.unterminated = not first.endswith(b"\n")
    return run


def whole_item(line: bytes) -> Item:
    """An item line decoded whole, as an ordinary read does (msgspec.DecodeError if it is not
    one the fast decoder takes: the ordinary read says what is wrong with it)."""
    return _DECODER.decode(line)


def lean_line(line: bytes) -> Item:
    """An item line decoded as a lean read decodes it (msgspec.DecodeError as ``whole_item``)."""
    return _LEAN_DECODER.decode(line)


def is_shadow_record(path: Path) -> bool:
    """Whether ``path`` starts with a shadow record's header (what a lean read reads lean); False
    for anything else, a file that cannot be read included (its read says why)."""
    try:
        with Path(path).open("rb") as f:
            first = f.readline()
        return "shadow" in _parse_header(path, first).extra
    except (OSError, RecordError):
        return False


def _partner(run: Run, beside: Sequence[Run]) -> Mapping[str, Item] | None:
    """The items of the other side of a shadow segment, if read already."""
    for other in beside:
        if "shadow" in other.header.extra and other.header.suite.name == run.header.suite.name:
            return other.items
    return None


def _read_items(
    run: Run,
    f: IO[bytes],
    lean: bool = False,
    partner: Mapping[str, Item] | None = None,
    ahead: Ahead | None = None,
) -> None:
    """Every item line of ``f`` into ``run`` (its header already read): line by line, or a lean
    read in blocks (decoded here, or replayed from a read-ahead process's frames)."""
    reader = _Reader(run, lean, partner)
    try:
        if lean:
            if ahead is None or not ahead.replay(reader):
                read_blocks(reader, f)
            reader.finish()
        else:
            reader.lines(f)
    finally:
        run.end = reader.end
        if reader.last is not None:
            run.unterminated = not reader.last.endswith(b"\n")


class _Reader:
    """Where a read stands: the last line's number, the end of the complete lines, the last line,
    and how many item lines were decoded (the partner's item at that position is the next one's
    twin). A lean read keeps its items as columns (``store``); an ordinary one in ``items``."""

    __slots__ = ("end", "items", "last", "lean", "n", "partner", "read", "run", "shared", "store", "whole")

    def __init__(self, run: Run, lean: bool, partner: Mapping[str, Item] | None) -> None:
        self.run, self.lean, self.partner = run, lean, partner
        self.items: dict[str, Item] = {}
        self.store = LeanItems(cast("Callable[..., Item]", _LeanItem))
        run.items = self.store if lean else self.items
        self.read = 0  # item lines decoded
        # The number of the last line read (the header is line 1).
        self.n, self.end, self.last = 1, run.end, cast("bytes | None", None)
        self.shared: dict[int, int] = {}
        self.whole = True  # the next item is decoded whole (a lean read's first: see ``lines``)

    def lines(self, lines: Iterator[bytes]) -> bool:
        """Decode line by line; False when a cut last line ended the read (``run.torn``).

        A line that fails the fast decoder is blank (skipped), or pydantic says what is wrong
        with it, or it is a cut last line. The loop keeps to locals (a whole read of a large
        record passes through here) and finds a blank line by the decoder refusing it."""
        decode = _DECODER.decode if self.whole else _LEAN_DECODER.decode
        items, lean = self.items, self.lean
        n, end, last = self.n, self.end, self.last
        try:
            for line in lines:
                n += 1
                try:
                    item = decode(line)
                except msgspec.DecodeError:
                    if line.isspace():
                        end, last = end + len(line), line
                        continue
                    try:
                        item = _lax(line)
                    except ValidationError as exc:
                        if _is_cut(line, exc):
                            self.run.torn = n  # only the last line can lack a newline: not done
                            return False
                        raise RecordError(_line_problem(self.run.path, n, line, exc)) from exc
                if item.token_ids or item.tokens:
                    share_tokens(item, self.shared)
                if lean:
                    if not self.whole and (problem := _utf8_problem(self.run.path, n, line)):
                        raise RecordError(problem)  # in a field the lean decoder skipped
                    self.store.append([item], self.partner, self.read, plain=False)
                    if self.whole:  # the report names the prompts' form from the first item
                        self.store.keep(item)
                    decode, self.whole = _LEAN_DECODER.decode, False
                else:
                    items[item.id] = item
                end, last = end + len(line), line
                self.read += 1
        finally:
            self.n, self.end, self.last = n, end, last
        return True

    def block(self, size: int, got: list[Item]) -> None:
        """A block of complete lines (``size`` bytes) the block decoder took whole: ``got``
        holds one item a line."""
        self.adopt(size, block_of(got, lean_item(), plain=True))

    def adopt(self, size: int, block: Block) -> None:
        """A block of complete lines (``size`` bytes) as columns (``block``), one item a line:
        made here, or by a read-ahead process (``servediff.readahead``)."""
        for item in self.store.adopt(block, self.partner, self.read):
            if item.token_ids or item.tokens:  # only an item kept whole can hold token data
                share_tokens(item, self.shared)
        n = len(block.ids)
        self.read += n
        self.n += n
        self.end += size
        self.last = _NEWLINE  # the block's last line ends with its newline

    def finish(self) -> None:
        """A lean read's items and speed columns, once every line is read: the columns, or a
        dict where an id came twice (its last line wins, at its first place, as line by line)."""
        store = self.store
        self.run.columns = store.columns()  # one row per item line, as read
        if not store.unique(self.partner):
            self.run.items = dict(zip(store.ids, map(store.item, range(len(store)))))


def lean_item() -> type[Item]:
    """The type a lean read decodes an item line into (``_LeanItem``)."""
    return cast("type[Item]", _LeanItem)


class Ahead(Protocol):
    """Another process's parse of a record (``servediff.readahead.ReadAhead``)."""

    def replay(self, reader: _Reader) -> bool:
        """Give ``reader`` what ``read_blocks`` would have, from the other process's parse;
        False, having given it nothing, where there is none to give."""
        ...


class BlockReader(Protocol):
    """What ``read_blocks`` hands a record's lines to: ``_Reader``, or a read-ahead process's
    writer (``servediff.readahead``)."""

    whole: bool

    def lines(self, lines: Iterator[bytes]) -> bool: ...
    def block(self, size: int, got: list[Item]) -> None: ...


def read_blocks(reader: BlockReader, f: IO[bytes]) -> None:
    """A lean read: blocks of complete lines, each decoded in one call (``decode_lines``).

    At a million lines a side, one decoder call per line and the per-line loop around it were
    about a third of reading. A block goes line by line instead (the same path as an ordinary
    read: its errors name the line) when it holds anything else than one item per line: a blank
    line, a bad one, or a line holding two objects; so does the first item (read whole) and a
    last line without its newline."""
    buf, filled = bytearray(_BLOCK_BYTES), 0  # filled: bytes in buf, a cut line carried at its front
    masks: list[Any] = []  # _line_ends' scratch, this read's own
    while True:
        if filled == len(buf):  # one line longer than the buffer: make room
            buf.extend(bytes(len(buf)))
        with memoryview(buf)[filled:] as free:
            got = f.readinto(free)  # type: ignore[attr-defined]  # a file opened "rb" has it
        if not got:
            break
        filled += got
        cut = buf.rfind(b"\n", 0, filled) + 1
        start = 0
        while reader.whole and start < cut:  # up to the first item, line by line: it is read whole
            end = buf.index(b"\n", start, cut) + 1
            reader.lines(iter((bytes(buf[start:end]),)))
            start = end
        if start < cut:
            items = decode_block(buf, start, cut, masks)
            if items is None:
                if not reader.lines(iter(io.BytesIO(buf[start:cut]))):
                    return
            else:
                reader.block(cut - start, items)
        buf[: filled - cut] = buf[cut:filled]
        filled -= cut
    if filled:
        reader.lines(iter((bytes(buf[:filled]),)))


def decode_block(buf: bytearray, start: int, end: int, masks: list[Any]) -> list[Item] | None:
    """The items of the complete lines ``buf[start:end]``, one per line, or None where that is
    not what they hold. ``decode_lines`` passes over blank lines and takes two objects on one
    line; a block where every newline follows a closing brace and each gave one item has
    neither (a line with trailing spaces or a carriage return goes line by line, and reads the
    same there)."""
    with memoryview(buf)[start:end] as block:
        try:
            got = _LEAN_DECODER.decode_lines(block)
            # The fields the decoder skips are not checked by it: the block is, whole (0.04 s a
            # 700 MB side). Where it fails, the lines say which one.
            codecs.utf_8_decode(block, "strict", True)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
    lines, closed = _line_ends(buf, start, end, masks)
    return got if len(got) == lines == closed else None


def _line_ends(buf: bytearray, start: int, end: int, masks: list[Any]) -> tuple[int, int]:
    """(newlines, newlines right after a closing brace) in ``buf[start:end]``, counted by numpy:
    ``bytes.count`` scans a byte at a time, 0.4 s for the two counts over a 350 MB record.
    ``masks``: the read's two boolean masks, kept from block to block (fresh ones were fresh
    pages each time); made here on first use, and again when a block outgrows them."""
    import numpy as np  # a lean read is compare's, which has numpy loaded already

    n = end - start
    if not masks or len(masks[0]) < n:
        masks[:] = [np.empty(max(n, _BLOCK_BYTES), bool), np.empty(max(n, _BLOCK_BYTES), bool)]
    newline, after_brace = masks[0][:n], masks[1][:n]
    b = np.frombuffer(buf, np.uint8, n, start)
    np.equal(b, 10, out=newline)
    after_brace[0] = False
    np.equal(b[:-1], 125, out=after_brace[1:])
    after_brace &= newline
    return int(np.count_nonzero(newline)), int(np.count_nonzero(after_brace))


def _lax(line: bytes) -> Item:
    """A line the strict decoder refused: pydantic says what is wrong with it (ValidationError),
    or, where its lax mode accepts it (a number written as a string), the item it means."""
    model = _ItemModel.model_validate_json(line)
    return msgspec.convert(model.model_dump(), Item)


def _is_cut(line: bytes, exc: ValidationError) -> bool:
    """A last line cut mid-write: no newline, and not a whole JSON document.

    No proper prefix of a JSON object is JSON, so a line that parses but fails validation was
    written whole and is a real error, not a cut.
    """
    if line.endswith(b"\n"):
        return False
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return True  # cut inside a multi-byte character (or worse; either way not done)
    return exc.errors()[0]["type"] == "json_invalid"


def _utf8_problem(path: Path, n: int, line: bytes) -> str | None:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"{path}:{n}: not valid UTF-8 (byte {bad.start} of the line)"
    return None


def _line_problem(path: Path, n: int, line: bytes, exc: ValidationError) -> str:
    if problem := _utf8_problem(path, n, line):
        return problem
    if exc.errors()[0]["type"] == "json_invalid":
        return f"{path}:{n}: bad item line: not JSON ({exc.errors()[0]['msg']})"
    return f"{path}:{n}: bad item line: {_first_error(exc)}"


def seal(run: Run) -> str | None:
    """Make ``run.path`` safe to append to, as ``run`` was read from it.

    A cut last line is cut off the file (appending after it would glue the next item onto it);
    a complete last line without its newline gets one (cutting it would lose a finished item).
    Returns a warning for stderr when a line was dropped.
    """
    if run.torn is not None:
        with run.path.open("r+b") as f:
            f.truncate(run.end)
        return (
            f"warning: {run.path}:{run.torn}: the last line was cut off mid-write (an interrupted "
            "run); dropped it, and its item runs again"
        )
    if run.unterminated:
        with run.path.open("ab") as f:
            f.write(b"\n")
        run.unterminated = False
        run.end += 1
    return None


def share_tokens(item: Item, shared: dict[int, int]) -> None:
    """Let equal token ids and token strings share one object (same values, same lists).

    Each parsed id is its own 28-byte int; a vocabulary has only ~50k of them, so sharing cuts
    a 100,000-item record's memory by more than half.
    """
    if item.token_ids:
        item.token_ids[:] = map(shared.setdefault, item.token_ids, item.token_ids)
    if item.tokens:
        item.tokens[:] = map(sys.intern, item.tokens)
