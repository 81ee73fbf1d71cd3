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

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, cast

import msgspec
from pydantic import ValidationError

from servediff.memory import gc_paused
from servediff.records.blocks import read_blocks
from servediff.records.columns import Columns
from servediff.records.items import ItemDict, RunItems, item_dict
from servediff.records.lean import Block, LeanItems, block_of, column_store
from servediff.records.options import WHOLE, ReadOptions
from servediff.records.schema import (
    HEADER_START,
    SCHEMA_VERSION,
    Header,
    Item,
    RecordError,
    Schema,
    TornHeader,
)

_NEWLINE = b"\n"


@dataclass
class Run:
    """A record file read back: its header and its items by id (last line per id wins)."""

    path: Path
    header: Header
    # A dict, or for a lean read the items as columns (``records.lean``): a ``RunItems`` either way
    # (a mapping given is made one).
    items: RunItems = field(default_factory=ItemDict)
    # Where the complete lines end (bytes): appending is safe only from here on.
    end: int = 0
    # The line number of a cut last line that was left out (its item is not done), if any.
    torn: int | None = None
    # True when the last kept line is complete but lacks its newline.
    unterminated: bool = False
    # A lean read that met an id twice (its items then a dict): its numbers as read, a row a line.
    line_columns: Columns | None = None

    def __post_init__(self) -> None:
        self.items = item_dict(self.items)

    @property
    def columns(self) -> Columns | None:
        """A lean read's per-item numbers for the speed statistics, one row per item line read,
        made when asked (None for a whole read)."""
        if self.line_columns is not None:
            return self.line_columns
        store = column_store(self.items)
        return None if store is None else store.columns()

    @property
    def label(self) -> str:
        return self.header.label

    def done_ids(self) -> set[str]:
        """Items finished without an error: a resumed run skips these and retries the rest."""
        return {i for i, item in self.items.items() if item.error is None}


def read_header(path: Path) -> Header:
    try:
        with Path(path).open("rb") as f:
            return parse_header(Path(path), f.readline())
    except OSError as exc:
        raise RecordError(f"{path}: {exc.strerror or exc}") from exc


def parse_header(path: Path, line: bytes) -> Header:
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


def read_run(
    path: Path,
    options: ReadOptions = WHOLE,
    beside: Sequence[Run] = (),
    ahead: Ahead | None = None,
    header: Header | None = None,
) -> Run:
    """Read a record. A cut last line (the writer was killed mid-write) is left out: see ``torn``.

    ``options.lean``: a shadow record's items after the first are read without their input and with only
    the metadata compare uses (``Schema.lean``), and an item whose text is the same as in the other
    side's record (one of ``beside``, runs already read) shares that text; other records are read
    whole either way. ``ahead``: a read-ahead process parsing this record
    (``records.ahead``), whose frames a lean read replays where it finished cleanly."""
    path = Path(path)
    try:
        f: IO[bytes] = path.open("rb")
    except OSError as exc:
        raise RecordError(f"{path}: {exc.strerror or exc}") from exc
    # The cyclic GC finds nothing among freshly parsed items, yet with 100,000s of new objects
    # it runs full collections over and over; pausing it while reading halves the time.
    with gc_paused(), f:
        run = open_run(path, f, header)
        lean = options.lean and "shadow" in run.header.extra
        partner = _partner(run, beside) if lean else None
        _read_items(run, f, options.block_bytes if lean else 0, partner, ahead, options.schema)
    return with_items_as_suite(run)


def with_items_as_suite(run: Run) -> Run:
    """Shadow traffic has no suite known in advance: its items are the ones it recorded."""
    if "shadow" in run.header.extra and not run.header.suite.item_ids:
        suite = run.header.suite.model_copy(update={"item_ids": run.items.ids})
        run.header = run.header.model_copy(update={"suite": suite})
    return run


def open_run(path: Path, f: IO[bytes], header: Header | None = None) -> Run:
    """The run whose header is the first line of ``f`` (read from its start), no items yet;
    ``header``: that line parsed already (``plan.sniff``)."""
    first = f.readline()
    run = Run(path=path, header=header or parse_header(path, first), end=len(first))
    run.unterminated = not first.endswith(b"\n")
    return run


def _partner(run: Run, beside: Sequence[Run]) -> Mapping[str, Item] | None:
    """The items of the other side of a shadow segment, if read already."""
    for other in beside:
        if "shadow" in other.header.extra and other.header.suite.name == run.header.suite.name:
            return other.items
    return None


def _read_items(
    run: Run,
    f: IO[bytes],
    block_bytes: int,
    partner: Mapping[str, Item] | None,
    ahead: Ahead | None,
    schema: Schema,
) -> None:
    """Every item line of ``f`` into ``run`` (its header already read): line by line, or (where
    ``block_bytes``) a lean read in blocks, decoded here or replayed from a read-ahead process's
    frames."""
    lean = block_bytes > 0
    reader = _Reader(run, lean, partner, schema)
    try:
        if lean:
            if ahead is None or not ahead.replay(reader):
                read_blocks(reader, f, block_bytes)
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

    __slots__ = (
        "decoder", "end", "items", "last", "lean", "n", "partner", "read", "run", "schema", "shared", "store",
        "whole",
    )  # fmt: skip

    def __init__(self, run: Run, lean: bool, partner: Mapping[str, Item] | None, schema: Schema) -> None:
        self.run, self.lean, self.partner, self.schema = run, lean, partner, schema
        self.decoder = schema.lean_decoder
        self.items = ItemDict()
        self.store = LeanItems(schema)
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
        decode = self.schema.decoder.decode if self.whole else self.decoder.decode
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
                        item = _lax(self.schema, line)
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
                    decode, self.whole = self.decoder.decode, False
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
        self.adopt(size, block_of(got, self.schema, plain=True))

    def adopt(self, size: int, block: Block) -> None:
        """A block of complete lines (``size`` bytes) as columns (``block``), one item a line:
        made here, or by a read-ahead process (``servediff.records.ahead``)."""
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
        if not store.unique(self.partner):
            self.run.line_columns = store.columns()  # one row per item line, as read
            self.run.items = ItemDict(zip(store.ids, map(store.item, range(len(store)))))


class Ahead(Protocol):
    """Another process's parse of a record (``servediff.records.ahead.ReadAhead``)."""

    def replay(self, reader: _Reader) -> bool:
        """Give ``reader`` what ``read_blocks`` would have, from the other process's parse;
        False, having given it nothing, where there is none to give."""
        ...


def _lax(schema: Schema, line: bytes) -> Item:
    """A line the strict decoder refused: pydantic says what is wrong with it (ValidationError),
    or, where its lax mode accepts it (a number written as a string), the item it means."""
    model = schema.model.model_validate_json(line)
    return msgspec.convert(model.model_dump(), schema.item)


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


def share_tokens(item: Item, shared: dict[int, int]) -> None:
    """Let equal token ids and token strings share one object (same values, same lists).

    Each parsed id is its own 28-byte int; a vocabulary has only ~50k of them, so sharing cuts
    a 100,000-item record's memory by more than half.
    """
    if item.token_ids:
        item.token_ids[:] = map(shared.setdefault, item.token_ids, item.token_ids)
    if item.tokens:
        item.tokens[:] = map(sys.intern, item.tokens)
