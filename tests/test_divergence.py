"""First-difference logic on constructed pairs, and properties of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servediff.compare.divergence import (
    Side,
    find_divergence,
    first_char_difference,
    first_difference,
    token_index_from_text,
)


@given(st.text(), st.text())
def test_first_char_difference_matches_the_obvious_loop(a: str, b: str) -> None:
    assert first_char_difference(a, b) == first_difference(a, b)


@given(st.text(min_size=1), st.text(), st.text())
def test_common_prefix_is_shared_and_next_chars_differ(p: str, x: str, y: str) -> None:
    a, b = p + x, p + y
    i = first_char_difference(a, b)
    assert a[:i] == b[:i] and i >= len(p)
    assert i == min(len(a), len(b)) or a[i] != b[i]


def test_identical_is_none() -> None:
    assert find_divergence("x", Side("same"), Side("same")) is None


def test_token_index_from_ids_and_from_text() -> None:
    a = Side("The cat sat", token_ids=[1, 2, 3], tokens=["The", " cat", " sat"], n_tokens=3)
    b = Side("The dog sat", token_ids=[1, 9, 3], tokens=["The", " dog", " sat"], n_tokens=3)
    d = find_divergence("i", a, b)
    assert d is not None
    assert (d.char_index, d.token_index, d.token_source) == (4, 1, "token_ids")
    assert (d.prefix_tail, d.a_next, d.b_next) == ("The ", "cat sat", "dog sat")
    d2 = find_divergence("i", Side(a.text, tokens=a.tokens), Side(b.text))
    assert d2 is not None and (d2.token_index, d2.token_source) == (1, "tokens (one side)")
    assert find_divergence("i", Side(a.text), Side(b.text)).token_index is None  # type: ignore[union-attr]


def test_prefix_case_and_token_of_char() -> None:
    d = find_divergence("i", Side("abc"), Side("abcdef"))
    assert d is not None and d.char_index == 3 and d.a_next == "" and d.b_next == "def"
    assert token_index_from_text(["ab", "cd", "e"], 0) == 0
    assert token_index_from_text(["ab", "cd", "e"], 2) == 1
    assert token_index_from_text(["ab", "cd", "e"], 9) == 3
