"""Where two shadow answers part, as recorded ("first_token"), kept as int columns.

    servediff compare primary-0001.jsonl candidate-0001.jsonl     # 300,000 divergent pairs a side

A lean store (``lean.LeanItems``) keeps an item whose metadata holds only "first_token" as a row
here rather than whole; ``Firsts`` is a block's rows as plain data (a read-ahead or halves child
sends it as MessagePack), ``Placed`` a store's.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable
from itertools import chain
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


# A token id of None in ``Placed``'s columns (no token id is this low).
_NO_ID = -(1 << 63)


class Firsts(msgspec.Struct, array_like=True, gc=False):
    """A block's recorded "first_token" values by their items' places (``at``): those of the
    usual shape ([token index ≥ 0, own token id or None, the other side's]) as int64 columns
    (``_NO_ID`` for None), any other value as it is (``odd``). Plain data for MessagePack."""

    at: bytes
    index: bytes
    own: bytes
    other: bytes
    odd: list[tuple[int, Any]]


def firsts_of(places: list[int], values: list[Any]) -> Firsts:
    """The "first_token" ``values`` of the items at ``places`` (ascending), as ``Firsts``. The
    values come from the lean decoder (``record``): lists of ints or None, no bool among them."""
    if values and set(map(len, values)) == {3}:  # the usual shape: by C calls, not a loop
        flat = list(chain.from_iterable(values))
        if _NO_ID not in flat:
            if None in flat:
                flat = [_NO_ID if x is None else x for x in flat]
            try:
                rows: array[int] | None = array("q", flat)
            except OverflowError:
                rows = None
            if rows is not None and min(index := rows[0::3]) >= 0:  # no index None or below 0
                at = array("q", places).tobytes()
                return Firsts(at, index.tobytes(), rows[1::3].tobytes(), rows[2::3].tobytes(), [])
    columns = [array("q") for _ in range(4)]
    odd = []
    for k, v in zip(places, values):
        if type(v) is list and len(v) == 3 and all(map(_is_id, v)) and v[0] is not None and v[0] >= 0:
            for column, x in zip(columns, (k, *v)):
                column.append(_NO_ID if x is None else x)
        else:
            odd.append((k, v))
    return Firsts(columns[0].tobytes(), columns[1].tobytes(), columns[2].tobytes(), columns[3].tobytes(), odd)


def _is_id(x: object) -> bool:
    return x is None or (type(x) is int and _NO_ID < x < 1 << 63)


class Placed:
    """Position → an item's recorded "first_token" (shadow traffic's divergent answers: where
    they part, ``servediff.shadow.recorder``), for the items whose metadata holds only that.

    300,000 of them a side at a million items: as a dictionary of three-int lists they were
    ~200 bytes each, memory to touch being most of a large compare's time. Here the usual shape
    is four int64 columns (positions ascending), any other value kept as it is."""

    __slots__ = ("_at", "_index", "_odd", "_other", "_own")

    def __init__(self) -> None:
        self._at, self._index, self._own, self._other = (array("q") for _ in range(4))
        self._odd: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self._at) + len(self._odd)

    def add(self, start: int, firsts: Firsts) -> None:
        """A block's values (``Firsts``), its items from position ``start`` on."""
        at = array("q")
        at.frombytes(firsts.at)
        self._at.extend(array("q", map(start.__add__, at)) if start else at)
        self._index.frombytes(firsts.index)
        self._own.frombytes(firsts.own)
        self._other.frombytes(firsts.other)
        for k, v in firsts.odd:
            self._odd[start + k] = v

    def firsts(self) -> Firsts:
        """All of them as one block's."""
        at, index, own, other = (c.tobytes() for c in (self._at, self._index, self._own, self._other))
        return Firsts(at, index, own, other, list(self._odd.items()))

    def get(self, i: int) -> Any:
        """The value at position ``i`` as recorded (a list), or None."""
        at = self._at
        k = bisect_left(at, i)
        if k < len(at) and at[k] == i:
            own, other = self._own[k], self._other[k]
            return [self._index[k], None if own == _NO_ID else own, None if other == _NO_ID else other]
        return self._odd.get(i)

    def placements(
        self, positions: list[int], placement: Callable[[Any], T]
    ) -> list[T | tuple[int, Any, Any]]:
        """For each of ``positions`` (ascending), ``placement`` of its value, where the value
        is of the usual shape the tuple (token index, own id, other's id) it gives, found for all
        at once (300,000 at a million items)."""
        import numpy as np  # compare's, which has numpy loaded already

        out: list[Any] = (
            [placement(self._odd.get(i)) for i in positions]
            if self._odd
            else [placement(None)] * len(positions)
        )
        at = np.frombuffer(self._at, np.int64) if self._at else np.empty(0, np.int64)
        if not len(at) or not positions:
            return out
        want = np.asarray(positions, np.int64)
        rows = np.minimum(np.searchsorted(at, want), len(at) - 1)
        hit = np.flatnonzero(at[rows] == want)
        rows = rows[hit]
        index = np.frombuffer(self._index, np.int64)[rows].tolist()
        # Each token id once (a vocabulary's worth of ints, not two new ones a divergence).
        ids: dict[int, int | None] = {_NO_ID: None}
        own, other = (
            list(map(ids.setdefault, values, values))
            for values in (np.frombuffer(c, np.int64)[rows].tolist() for c in (self._own, self._other))
        )
        for j, point in zip(hit.tolist(), zip(index, own, other)):
            out[j] = point
        return out
