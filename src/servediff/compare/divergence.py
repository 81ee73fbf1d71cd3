"""Where two completions of the same item part ways: first differing character and token.

Pure functions on strings and token lists; ``servediff compare`` calls them per item pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CONTEXT_CHARS = 60


@dataclass(frozen=True, slots=True)
class Divergence:
    item_id: str
    char_index: int  # first differing character (== len of the shorter text if one is a prefix)
    token_index: int | None  # first differing token; None when neither run has token data
    token_source: str | None  # "token_ids", "tokens" (aligned on token text), or None
    prefix_tail: str  # the last CONTEXT_CHARS characters both texts share
    a_next: str  # what A says next
    b_next: str
    a_tokens: int | None
    b_tokens: int | None


def first_difference(a: Sequence[object], b: Sequence[object]) -> int:
    """Index of the first position where a and b differ; len(shorter) if one prefixes the other."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def first_char_difference(a: str, b: str) -> int:
    """Like first_difference, but fast for long strings: compare halves before characters."""
    if a == b:
        return len(a)
    lo, hi = 0, min(len(a), len(b))
    # Invariant: a[:lo] == b[:lo]. Bisection costs O(n log n) in C instead of an O(n) Python loop.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def token_index_from_text(tokens: Sequence[str], char_index: int) -> int:
    """The token that contains character ``char_index`` when ``tokens`` concatenate to the text."""
    pos = 0
    for i, t in enumerate(tokens):
        pos += len(t)
        if pos > char_index:
            return i
    return len(tokens)


@dataclass(frozen=True, slots=True)
class Side:
    """One configuration's completion of an item, as much as the record holds."""

    text: str
    token_ids: Sequence[int] | None = None
    tokens: Sequence[str] | None = None
    n_tokens: int | None = None


def find_divergence(item_id: str, a: Side, b: Side) -> Divergence | None:
    """None when the texts are byte-identical; otherwise where and how they part."""
    if a.text == b.text:
        return None
    c = first_char_difference(a.text, b.text)
    t: int | None
    if a.token_ids is not None and b.token_ids is not None:
        t, source = first_difference(a.token_ids, b.token_ids), "token_ids"
    elif a.tokens is not None and b.tokens is not None:
        t, source = first_difference(a.tokens, b.tokens), "tokens"
    elif a.tokens is not None or b.tokens is not None:
        # One side has token text: the token that holds the first differing character.
        t, source = token_index_from_text(a.tokens or b.tokens or [], c), "tokens (one side)"
    else:
        t, source = None, None
    return Divergence(
        item_id=item_id,
        char_index=c,
        token_index=t,
        token_source=source,
        prefix_tail=a.text[max(0, c - CONTEXT_CHARS) : c],
        a_next=a.text[c : c + CONTEXT_CHARS],
        b_next=b.text[c : c + CONTEXT_CHARS],
        a_tokens=a.n_tokens,
        b_tokens=b.n_tokens,
    )
