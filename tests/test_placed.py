"""A lean read's recorded "first_token" values as columns (``records.placed.Placed``) give back each
value as recorded, and the placement compare takes from it, whatever its shape."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from servediff.compare.divergence import placement
from servediff.records.placed import Firsts, Placed, firsts_of

NO_ID = -(1 << 63)
ids = st.one_of(
    st.none(), st.integers(-5, 200_000), st.sampled_from([NO_ID, NO_ID + 1, (1 << 63) - 1, 1 << 63])
)
usual = st.tuples(st.integers(0, 4096), ids, ids).map(list)
other = st.one_of(
    st.lists(ids, max_size=5),
    st.tuples(st.one_of(st.none(), st.integers(-3, -1)), ids, ids).map(list),
)


def placed_from(blocks: list[list[Any]]) -> tuple[Placed, dict[int, Any]]:
    """The blocks' values at every other position, each block's placed from its own start (as a
    read adds them), through MessagePack (as the child of a read in halves sends them)."""
    placed, want = Placed(), {}
    start = 0
    for values in blocks:
        places = list(range(0, 2 * len(values), 2))
        firsts = msgspec.msgpack.decode(msgspec.msgpack.encode(firsts_of(places, values)), type=Firsts)
        placed.add(start, firsts)
        want.update((start + k, v) for k, v in zip(places, values))
        start += 2 * len(values) + 1
    return placed, want


@given(st.lists(st.lists(st.one_of(usual, usual, other), max_size=12), max_size=4))
def test_each_value_is_given_back_as_recorded(blocks: list[list[Any]]) -> None:
    placed, want = placed_from(blocks)
    positions = list(range(max(want, default=0) + 2))
    assert [placed.get(i) for i in positions] == [want.get(i) for i in positions]
    assert placed.placements(positions, placement) == [placement(want.get(i)) for i in positions]
    assert len(placed) == len(want)
    again = Placed()
    again.add(0, placed.firsts())
    assert [again.get(i) for i in positions] == [want.get(i) for i in positions]


def test_the_usual_shape_is_columns_and_any_other_kept_as_it_is() -> None:
    values = [[3, 17, 18], [0, None, 5], [2, 7, None], [9, None, None]]
    firsts = firsts_of([0, 1, 2, 3], values)
    assert firsts.odd == [] and len(firsts.at) == 4 * 8  # four int64 rows, no object each
    odd = [[1, 2], [-1, 2, 3], [None, 2, 3], [5, NO_ID, 1], [6, 1 << 63, 2], [], [1, 2, 3, 4]]
    firsts = firsts_of(list(range(len(values) + len(odd))), values + odd)
    assert [v for _, v in firsts.odd] == odd and len(firsts.at) == 4 * 8
