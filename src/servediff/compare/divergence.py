"""Where two completions of the same item part ways: first differing character and token.

    servediff compare runs/*.jsonl --md report.md

The one token alignment every part of servediff uses (identity tables, mechanism, hazard,
probes, export): engine token ids beat engine token texts beat ids the server retokenized.
Pure functions on record items.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from operator import ne
from typing import TYPE_CHECKING, Any

import msgspec

from servediff.records import Item, Run

if TYPE_CHECKING:
    from servediff.records.lean import LeanItems

CONTEXT_CHARS = 60

ENGINE_IDS = "token ids (engine)"
ENGINE_TEXTS = "token text (engine)"
RETOKENIZED_IDS = "token ids (retokenized)"
NO_TOKENS = "none"


# Point and Divergence are msgspec structs, not frozen dataclasses: one of each per divergence,
# 300,000 of them in a million-item shadow compare, and a frozen dataclass sets each field
# through object.__setattr__ (0.8 µs an object, a struct 0.1). Neither is in the report model.
class Point(msgspec.Struct, frozen=True, gc=False):
    """The first differing token of one item. A token of None is the end of the sequence;
    an index of None means neither run holds token data to locate it."""

    item_id: str
    index: int | None
    a_token: str | None
    b_token: str | None
    a_id: int | None
    b_id: int | None
    alignment: str  # ENGINE_IDS, ENGINE_TEXTS, RETOKENIZED_IDS or NO_TOKENS


class Divergence(msgspec.Struct, frozen=True, gc=False):
    item_id: str
    token: Point  # first differing token
    # The two items themselves: the report's view of a divergence splits their texts, and holding
    # them (not slices of their texts, nor their ids to look up again) costs a divergence nothing
    # of its own; at 300,000 divergences the copies and the second look-ups were ~1 s and ~0.1 GB.
    # None until first read where ``source`` can make them: two lean reads and the position
    # (``servediff.records.lean``). A Markdown report reads the items of the 1,000 divergences it
    # shows; made for all 300,000 of a million-item shadow compare they were 0.13 GB and 0.3 s.
    items: tuple[Item, Item] | None
    source: tuple[LeanItems, LeanItems, int] | None = None

    @property
    def pair(self) -> tuple[Item, Item]:
        """The two items, kept once made."""
        if self.items is None:
            msgspec.structs.force_setattr(self, "items", self.made())
        assert self.items is not None
        return self.items

    def made(self) -> tuple[Item, Item]:
        """The two items, made from ``source`` if not kept (and then not kept: a reader passing
        over every divergence once need not hold them all)."""
        if self.items is not None:
            return self.items
        assert self.source is not None
        a, b, i = self.source
        return a.item(i), b.item(i)

    @property
    def a(self) -> Item:
        return self.pair[0]

    @property
    def b(self) -> Item:
        return self.pair[1]

    @property
    def token_index(self) -> int | None:
        return self.token.index

    @property
    def char_index(self) -> int:
        """The first differing character (the shorter text's length if one is a prefix): found
        when asked, as a report asks for the divergences it shows (a shadow compare holds
        300,000 and a Markdown report shows 1,000)."""
        return first_char_difference(self.a.text, self.b.text)

    @property
    def a_tokens(self) -> int | None:
        return self.a.n_tokens

    @property
    def b_tokens(self) -> int | None:
        return self.b.n_tokens

    @property
    def prefix_tail(self) -> str:
        """The last CONTEXT_CHARS characters both texts share."""
        c = self.char_index
        return self.a.text[max(0, c - CONTEXT_CHARS) : c]

    @property
    def a_next(self) -> str:
        """What A says next."""
        c = self.char_index
        return self.a.text[c : c + CONTEXT_CHARS]

    @property
    def b_next(self) -> str:
        c = self.char_index
        return self.b.text[c : c + CONTEXT_CHARS]


def first_difference(a: Sequence[object], b: Sequence[object]) -> int:
    """Index of the first position where a and b differ; len(shorter) if one prefixes the other.
    Compared in C (a generator took ~2 µs a pair of token lists: 0.6 s for 300,000 divergences)."""
    n = min(len(a), len(b))
    return next(compress(range(n), map(ne, a, b)), n)


def first_char_difference(a: str, b: str) -> int:
    """Like first_difference, but fast for long strings: the lowest set bit of the XOR of the two
    texts' UTF-8 bytes is their first differing byte, found in C (a bisection by slices took ~5 µs
    a pair: 1.5 s for the 300,000 divergences of a million-item shadow compare)."""
    if a == b:
        return len(a)
    try:
        ab, bb = a.encode(), b.encode()
    except UnicodeEncodeError:  # a lone surrogate (a JSON escape can make one): no UTF-8 form
        return _bisect_difference(a, b)
    n = min(len(ab), len(bb))
    x = int.from_bytes(ab[:n], "little") ^ int.from_bytes(bb[:n], "little")
    k = n if x == 0 else ((x & -x).bit_length() - 1) // 8  # bytes both share
    if len(ab) == len(a) and len(bb) == len(b):
        return k  # ASCII: a byte is a character
    # The characters wholly within the shared bytes (a character cut at k is not shared).
    return len(ab[:k].decode("utf-8", "ignore"))


def _bisect_difference(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    # Invariant: a[:lo] == b[:lo]. Bisection costs O(n log n) in C instead of an O(n) Python loop.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def token_texts(item: Item) -> list[str] | None:
    """The engine's own token texts: from the logprobs when recorded (always the generated
    tokens), else ``tokens``. Retokenized ids are not texts of generation."""
    if item.logprobs is not None:
        return [lp[0] for lp in item.logprobs]
    return item.tokens


def first_token(item_id: str, a: Item, b: Item) -> Point | None:
    """None when the texts are identical. Engine ids beat engine texts beat retokenized ids."""
    if a.text == b.text:
        return None
    ta, tb = token_texts(a), token_texts(b)
    engine_ids = a.token_source == b.token_source == "engine"
    if engine_ids and a.token_ids is not None and b.token_ids is not None:
        i, how = first_difference(a.token_ids, b.token_ids), ENGINE_IDS
    elif ta is not None and tb is not None:
        i, how = first_difference(ta, tb), ENGINE_TEXTS
    elif a.token_ids is not None and b.token_ids is not None:
        i, how = first_difference(a.token_ids, b.token_ids), RETOKENIZED_IDS
    else:
        # Shadow traffic: where the answers part as the candidate's tokenizer splits both, noted
        # when they were recorded (a lean read does not read the token ids it was taken from);
        # or, without that, nowhere.
        return recorded_point(item_id, recorded_first_token(a), ta, tb)

    ids_ok = engine_ids or how == RETOKENIZED_IDS
    a_id, b_id = (_at(a.token_ids, i), _at(b.token_ids, i)) if ids_ok else (None, None)
    return Point(item_id, i, _at(ta, i), _at(tb, i), a_id, b_id, how)


def recorded_point(
    item_id: str,
    placed: tuple[int, int | None, int | None] | None,
    ta: Sequence[str] | None = None,
    tb: Sequence[str] | None = None,
) -> Point:
    """The point a recorded "first_token" gives (``placement``), or no position where there is
    none; ``ta``/``tb``: the two items' token texts, where they have them."""
    if placed is None:
        return Point(item_id, None, None, None, None, None, NO_TOKENS)
    i, a_id, b_id = placed
    return Point(item_id, i, _at(ta, i), _at(tb, i), a_id, b_id, RETOKENIZED_IDS)


def recorded_first_token(item: Item) -> tuple[int, int | None, int | None] | None:
    """The item's "first_token" (shadow.recorder): [token index, its own token id there, the
    other side's]; None where it has none."""
    return placement(item.metadata.get("first_token") if item.metadata else None)


def placement(placed: object) -> tuple[int, int | None, int | None] | None:
    """A recorded "first_token" value, or None where it is of another shape (nothing to place
    a divergence by)."""
    if type(placed) is not list or len(placed) != 3:
        return None
    i, own, other = placed
    # Checked by type, not isinstance (a bool is no token index): 300,000 of them at a million
    # shadow items.
    if (
        type(i) is int
        and i >= 0
        and (own is None or type(own) is int)
        and (other is None or type(other) is int)
    ):
        return i, own, other
    return None


def _at(seq: Sequence[Any] | None, i: int) -> Any:
    return seq[i] if seq is not None and i < len(seq) else None


def find_divergence(item_id: str, a: Item, b: Item) -> Divergence | None:
    """None when the texts are byte-identical; otherwise where and how they part."""
    point = first_token(item_id, a, b)
    if point is None:
        return None
    return Divergence(item_id, point, (a, b))


def survival_time(a: Item, b: Item, p: Point | None) -> tuple[int, bool] | None:
    """(tokens at risk, diverged), or None when the record has no token count to use."""
    if p is not None:
        return None if p.index is None else (p.index + 1, True)
    n = a.n_tokens if a.n_tokens is not None else len(token_texts(a) or a.token_ids or []) or None
    return None if n is None else (n, False)


def divergence_points(a_run: Run, b_run: Run) -> list[tuple[Point, Item, Item]]:
    """The first differing token of every item both runs finished, where it has a position."""
    out = []
    for item_id in a_run.header.suite.item_ids:
        ia, ib = a_run.items.get(item_id), b_run.items.get(item_id)
        if ia is None or ib is None or ia.error or ib.error:
            continue
        p = first_token(item_id, ia, ib)
        if p is not None and p.index is not None:
            out.append((p, ia, ib))
    return out
