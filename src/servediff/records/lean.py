"""A shadow record's items as compare reads them: columns, with an ``Item`` made when one is read.

    servediff compare primary-0001.jsonl candidate-0001.jsonl     # a million requests a side

Most lines of shadow traffic hold an id, a text, a token count and three times, nothing else. As
``Item`` structs (each with its own floats, and a dictionary entry) they were ~0.25 KB an item
and side beyond their texts, and at a million a side the memory they took, first touched, was
a good part of compare's time. Here those items are columns: their ids and texts (shared with
the other side's where equal; or, read in halves, left out and read back from the record when
an item is made: ``records.halves``), token counts, the numbers in float arrays (NaN for None;
a time no item recorded, none at all), and the recorded "first_token" marks as int columns
(``Placed``). An item that holds anything else (the first line, read whole; an engine error;
metadata; token data; a score) is kept whole (``extras``). Reading an item makes it from its
columns: the same ``Item`` the lean decoder made, field for field (``tests/test_record_blocks.py``,
``tests/test_halves.py``).

The analyses that pass over every item of a shadow pair (the pairing, a run's row, whether it is
scored, the speed columns) read the columns; anything else reads items, made one at a time.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, ValuesView
from functools import partial
from itertools import compress, repeat
from operator import is_not, ne, not_
from typing import TYPE_CHECKING, Any, cast

import msgspec

from servediff.records.columns import Columns, engine_counters
from servediff.records.items import RunItems
from servediff.records.placed import Firsts, Placed, firsts_of
from servediff.records.schema import Item, Schema

if TYPE_CHECKING:
    import numpy as np


NAN = math.nan
# What an item holds beyond its id, text, token count and times: a plain item has none of them.
_TIME_FIELDS = ("latency_s", "finished_at", "ttft_s", "itl_s")
# The metadata of every plain item (nothing writes to an item's metadata).
NO_METADATA: dict[str, Any] = {}


class LeanItems(RunItems):
    """Items by id, in the order read (ids unique: a record with an id twice is read into a dict).

    ``make``: the lean item type, called with a plain item's fields."""

    __slots__ = (
        "_differ",
        "_index",
        "_make",
        "_schema",
        "extras",
        "ids",
        "n_tokens",
        "placed",
        "text_at",
        "texts",
        "times",
        "twinned",
    )

    def __init__(self, schema: Schema) -> None:
        self._schema = schema
        self._make: Callable[..., Item] = schema.lean
        self.ids: list[str] = []
        # None where the text was not kept: ``text_at`` reads it back from the record (a shadow
        # pair read in halves, ``records.halves``, keeps a text only where either side's item
        # is kept whole, and knows where the two sides' texts differ: ``pair``).
        self.texts: list[str | None] = []
        self.text_at: Callable[[int], str] | None = None
        self.n_tokens: list[int | None] = []
        self.times = tuple(array("d") for _ in _TIME_FIELDS)  # latency, finished, TTFT, ITL; NaN: None
        self.extras: dict[int, Item] = {}  # position → the item, kept whole
        # position → the item's metadata "first_token", where that is all its metadata holds
        # (shadow traffic's divergent answers: ``servediff.shadow.recorder``)
        self.placed = Placed()
        self.twinned = 0  # items whose partner's item was the one at the same position
        self._index: dict[str, int] | None = None
        # (the other side, the positions where its text and this one's differ): known from the
        # read where the texts themselves were not kept (``pair``).
        self._differ: tuple[LeanItems, list[int]] | None = None

    # --- Mapping ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __getitem__(self, key: str) -> Item:
        return self.item(self.index[key])

    def __contains__(self, key: object) -> bool:
        return key in self.index

    def values(self) -> ValuesView[Item]:
        return _Values(self)

    @property
    def index(self) -> dict[str, int]:
        """Id → position, made when first asked (a shadow compare in the records' order never does)."""
        if self._index is None:
            self._index = dict(zip(self.ids, range(len(self.ids))))
        return self._index

    def item(self, i: int) -> Item:
        """The item at position ``i``: kept whole, or made from the columns."""
        kept = self.extras.get(i)
        if kept is not None:
            return kept
        placed = self.placed.get(i)
        times = self.times
        latency, finished, ttft, itl = (t[i] if i < len(t) else NAN for t in times)  # beyond: NaN
        text = self.texts[i]
        if text is None:
            assert self.text_at is not None  # a text is left out only where it can be read back
            text = self.text_at(i)
        return self._make(
            id=self.ids[i],
            text=text,
            n_tokens=self.n_tokens[i],
            latency_s=None if latency != latency else latency,  # NaN: recorded as null
            finished_at=None if finished != finished else finished,
            ttft_s=None if ttft != ttft else ttft,
            itl_s=None if itl != itl else itl,
            metadata=NO_METADATA if placed is None else {"first_token": placed},
        )

    # --- reading ---------------------------------------------------------------------------------
    def append(self, got: list[Item], partner: Mapping[str, Any] | None, at: int, plain: bool) -> list[Item]:
        """Items read in order (``at`` item lines were read before them): ``adopt`` of their
        ``block_of``. Returns the items kept whole."""
        return self.adopt(block_of(got, self._schema, plain), partner, at)

    def adopt(self, block: Block, partner: Mapping[str, Any] | None, at: int) -> list[Item]:
        """A block's columns (``block_of``), made here or by a read-ahead process
        (``records.ahead``). Each item shares its id, and its text where equal, with the
        other side's item of that id (``partner``): the two sides of a segment are written in
        one order, so that is most often the partner's item at the same position. Returns the
        items kept whole."""
        ids, texts = block.ids, block.texts
        n = len(ids)
        if isinstance(partner, LeanItems) and partner.ids[at : at + n] == ids:
            ids = partner.ids[at : at + n]
            texts = [p if p == t else t for p, t in zip(partner.texts[at : at + n], texts)]
            self.twinned += n
        elif partner is not None:
            for k, twin in enumerate(map(partner.get, ids)):
                if twin is not None:
                    ids[k] = twin.id
                    if twin.text == texts[k]:
                        texts[k] = twin.text
        start = len(self.ids)
        self.ids += ids
        self.texts += texts
        self.n_tokens += block.n_tokens
        for column, values in zip(self.times, block.times):
            put_times(column, start, values)
        self.placed.add(start, block.placed)
        return self._keep_whole(start, block.kept, texts)

    def extend(
        self,
        n_tokens: list[int | None],
        times: Sequence[array[float] | bytes],
        placed: Placed | Firsts,
        kept: list[tuple[int, Any]],
        texts: list[tuple[int, str]],
    ) -> None:
        """Columns of items read already matched with the other side's (``records.halves``),
        their ids in ``ids`` already: their token counts, times, "first_token" values and items
        kept whole by their place among them, and the texts kept (by place; the others None).
        An empty store takes the columns themselves, not copies (a million items a side)."""
        start = len(self.n_tokens)
        if start:
            self.n_tokens += n_tokens
        else:
            self.n_tokens = n_tokens
        arrays = [t for t in times if isinstance(t, array)]
        if not start and len(arrays) == len(self.times):
            self.times = tuple(arrays)
        else:
            for column, values in zip(self.times, times):
                put_times(column, start, values.tobytes() if isinstance(values, array) else values)
        self.texts += repeat(None, len(n_tokens))
        for k, text in texts:
            self.texts[start + k] = text
        if isinstance(placed, Placed):
            assert not start, "a store takes a Placed whole, as its first columns"
            self.placed = placed
        else:
            self.placed.add(start, placed)
        self._keep_whole(start, kept, None)

    def _keep_whole(
        self, start: int, kept: list[tuple[int, Any]], texts: Sequence[str | None] | None
    ) -> list[Item]:
        """Items kept whole, by their place among the items from ``start`` on: each takes the
        store's id (one object with the other side's), and its text from ``texts`` where given
        (shared likewise). Returns them."""
        setattr_ = msgspec.structs.force_setattr
        out = []
        for k, item in kept:
            setattr_(item, "id", self.ids[start + k])
            if texts is not None:
                setattr_(item, "text", texts[k])
            if not item.metadata:
                setattr_(item, "metadata", NO_METADATA)
            self.extras[start + k] = item
            out.append(item)
        return out

    def pair(self, other: LeanItems, differ: list[int]) -> None:
        """The positions where this side's texts and ``other``'s differ, both read already."""
        self._differ, other._differ = (other, differ), (self, differ)

    def differing(self, other: LeanItems) -> Iterable[int]:
        """The positions where this side's text and ``other``'s differ, in order (the two hold
        the same ids in the same order)."""
        if self._differ is not None and self._differ[0] is other:
            return self._differ[1]
        if self.text_at is None and other.text_at is None:
            return compress(range(len(self.ids)), map(ne, self.texts, other.texts))
        return [i for i in range(len(self.ids)) if self.item(i).text != other.item(i).text]

    def keep(self, item: Item) -> None:
        """The last item appended, kept whole whatever it holds (a lean read's first item)."""
        self.extras[len(self.ids) - 1] = item

    def unique(self, partner: Mapping[str, Any] | None) -> bool:
        """Every id once: known when each item's partner was at its position in a partner whose
        ids are unique, else counted."""
        if isinstance(partner, LeanItems) and self.twinned == len(self.ids) == len(partner.ids):
            return True
        return len(set(self.ids)) == len(self.ids)

    def columns(self) -> Columns:
        """The speed statistics' columns (``records.columns``), one row per item."""
        import numpy as np

        n = len(self.ids)
        error = np.zeros(n)
        counters = {}
        for i, item in self.extras.items():
            if item.error is not None:
                error[i] = 1.0
            if item.metadata:
                counters[i] = engine_counters(item.metadata)
        if counters:
            engine_n, engine_ms = np.full(n, NAN), np.full(n, NAN)
            for i, (count, ms) in counters.items():
                engine_n[i], engine_ms[i] = count, ms
        else:  # no engine's counters (shadow traffic): no memory for a million NaN
            engine_n = engine_ms = np.broadcast_to(np.float64(NAN), (n,))
        # None counts 0, as ``Columns.add``; most often there is none, and no list is made
        counts = self.n_tokens
        tokens = np.array(counts if None not in counts else [t or 0 for t in counts], float)
        latency, finished, ttft, itl = (_column(t, n) for t in self.times)
        return Columns.of(
            error=error,
            latency=latency,
            finished=finished,
            tokens=tokens,
            ttft=ttft,
            itl=itl,
            engine_n=engine_n,
            engine_ms=engine_ms,
        )

    def errors(self) -> int:
        return sum(item.error is not None for item in self.extras.values())

    def output_tokens(self) -> int:
        """Σ token counts of the items answered without an error (None counts 0)."""
        failed = [self.n_tokens[i] or 0 for i, item in self.extras.items() if item.error is not None]
        return sum(filter(None, self.n_tokens)) - sum(failed)

    def scored(self) -> bool:
        """Whether any item holds a score (only a kept item can)."""
        return any(item.correct is not None for item in self.extras.values())


class Block(msgspec.Struct, array_like=True, gc=False):
    """A block of items read in order, as columns: their ids, texts and token counts, their
    four times (latency, finished, TTFT, ITL) as float arrays' bytes (NaN: None), where an
    item's metadata holds only "first_token" that value (``placed``), and the items kept whole
    (``kept``), each by its place in the block. Plain data: a read-ahead process
    (``records.ahead``) sends it as MessagePack."""

    ids: list[str]
    texts: list[str | None]
    n_tokens: list[int | None]
    times: list[bytes]
    placed: Firsts
    kept: list[tuple[int, Any]]


def block_of(got: list[Item], schema: Schema, plain: bool) -> Block:
    """The columns of items read in order. ``plain``: the items came from the lean block decoder
    (``schema.lean``; none holds a field the lean read skips); else each is checked whole.

    The block is turned into columns in C (each item a tuple, the tuples transposed): the ids,
    texts, token counts and times taken by a pass over each attribute cost 2.4 times as much at
    a million items a side."""
    make = schema.lean
    n, at_, structs = len(got), _fields(make), cast("list[msgspec.Struct]", got)
    fields = list(zip(*map(msgspec.structs.astuple, structs))) if n else [()] * len(at_)
    times = []
    for name in _TIME_FIELDS:
        values = fields[at_[name]]
        nones = values.count(None)  # a column is most often all numbers, or all None (TTFT)
        if nones == n:
            times.append(b"")  # all NaN: nothing (``put_times``)
        else:
            times.append(array("d", [NAN if x is None else x for x in values] if nones else values).tobytes())
    places: list[int] = []
    firsts: list[Any] = []
    if plain:  # kept: where one of the other fields is not None, or the metadata not empty
        metadata = fields[at_["metadata"]]
        kept = set()
        for k in compress(range(n), metadata):
            if len(metadata[k]) == 1 and "first_token" in metadata[k]:  # a column of its own
                places.append(k)
                firsts.append(metadata[k]["first_token"])
            else:
                kept.add(k)
        for name in schema.kept:  # a lean read's kept fields: None unless the line held them
            values = fields[at_[name]]
            if values.count(None) != n:
                kept.update(compress(range(n), map(is_not, values, repeat(None))))
        where: Iterable[int] = sorted(kept)
    else:
        where = compress(range(n), map(not_, map(partial(_is_plain, schema), got)))
    return Block(
        ids=list(fields[at_["id"]]),
        texts=list(fields[at_["text"]]),
        n_tokens=list(fields[at_["n_tokens"]]),
        times=times,
        placed=firsts_of(places, firsts),
        kept=[(k, got[k]) for k in where],
    )


_FIELDS: dict[Any, dict[str, int]] = {}
_NAN_BYTES = array("d", [NAN]).tobytes()


def put_times(column: array[float], start: int, values: bytes) -> None:
    """A block's times (float64 bytes) into ``column``, the block's items from position
    ``start`` on. A column holds its values up to its length and NaN beyond: a time no item
    recorded (TTFT and ITL of shadow traffic, most often) is no memory at all, where at a
    million items a side each such column was 8 MB of NaN to fill."""
    if values:
        if len(column) < start:
            column.frombytes(_NAN_BYTES * (start - len(column)))
        column.frombytes(values)


def _column(times: array[float], n: int) -> np.ndarray:
    """A time column as ``n`` floats: a view of it, NaN-padded, or one NaN seen ``n`` times (a
    read-only view of no memory) where it holds none."""
    import numpy as np

    if not times:
        return np.broadcast_to(np.float64(NAN), (n,))
    got = np.frombuffer(times, float)
    return got if len(got) == n else np.concatenate([got, np.full(n - len(got), NAN)])


def _fields(make: Callable[..., Any]) -> dict[str, int]:
    """Each field's place in ``msgspec.structs.astuple`` of a ``make`` item."""
    at = _FIELDS.get(make)
    if at is None:
        at = _FIELDS[make] = {f.name: k for k, f in enumerate(msgspec.structs.fields(cast("type", make)))}
    return at


def _is_plain(schema: Schema, item: Item) -> bool:
    """An item made back from the columns would be this one: a lean item with nothing else."""
    return type(item) is schema.lean and schema.beyond(item) == schema.beyond_defaults and not item.metadata


class _Values(ValuesView[Item]):
    """The items in their order, each made when reached (not kept)."""

    _mapping: LeanItems

    def __iter__(self) -> Iterator[Item]:
        return map(self._mapping.item, range(len(self._mapping)))


def column_store(items: RunItems) -> LeanItems | None:
    """The items as columns, where they are kept so: a pass over every item (the pairing of two
    runs, the speed columns) may read the columns rather than make a million items."""
    return items if isinstance(items, LeanItems) else None
