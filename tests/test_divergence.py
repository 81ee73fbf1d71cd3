"""First-difference logic on constructed pairs, and properties of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servediff.compare.divergence import find_divergence, first_char_difference, first_difference
from servediff.records import Item, sha256_text


def side(text: str, ids: list[int] | None = None, tokens: list[str] | None = None) -> Item:
    return Item(
        id="i",
        input="p",
        text=text,
        sha256=sha256_text(text),
        n_tokens=len(tokens) if tokens else None,
        token_ids=ids,
        tokens=tokens,
        token_source="engine" if ids else None,
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
    assert find_divergence("x", side("same"), side("same")) is None


def test_token_index_from_ids_and_from_text() -> None:
    a = side("The cat sat", ids=[1, 2, 3], tokens=["The", " cat", " sat"])
    b = side("The dog sat", ids=[1, 9, 3], tokens=["The", " dog", " sat"])
    d = find_divergence("i", a, b)
    assert d is not None
    assert (d.char_index, d.token_index, d.token.alignment) == (4, 1, "token ids (engine)")
    assert (d.token.a_token, d.token.b_token, d.token.a_id, d.token.b_id) == (" cat", " dog", 2, 9)
    assert (d.prefix_tail, d.a_next, d.b_next) == ("The ", "cat sat", "dog sat")
    d2 = find_divergence("i", side(a.text, tokens=a.tokens), side(b.text, tokens=b.tokens))
    assert d2 is not None and (d2.token_index, d2.token.alignment) == (1, "token text (engine)")
    # One alignment for every consumer: without token data on both sides there is no token.
    d3 = find_divergence("i", side(a.text, tokens=a.tokens), side(b.text))
    assert d3 is not None and d3.token_index is None and d3.token.alignment == "none"


def test_prefix_case() -> None:
    d = find_divergence("i", side("abc"), side("abcdef"))
    assert d is not None and d.char_index == 3 and d.a_next == "" and d.b_next == "def"


@given(st.text(alphabet=st.characters(), min_size=0), st.text(alphabet=st.characters()), st.text())
def test_first_char_difference_with_lone_surrogates_and_wide_characters(p: str, x: str, y: str) -> None:
    # A JSON escape such as "\ud800" decodes to a lone surrogate, which has no UTF-8 form.
    a, b = p + "\ud800" + x, p + "é" + y
    assert first_char_difference(a, b) == first_difference(a, b)
    assert first_char_difference("a€b", "a€c") == 2 and first_char_difference("€x", "₤x") == 0
