"""The analysis commands make numpy's arrays without the huge-page request (servediff.memory),
unless NUMPY_MADVISE_HUGEPAGE says what the user wants."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from servediff.memory import numpy_without_huge_pages

multiarray = np._core.multiarray


@pytest.fixture(autouse=True)
def numpy_as_it_was() -> Iterator[None]:
    before = multiarray._get_madvise_hugepage()
    yield
    multiarray._set_madvise_hugepage(before)


def test_turned_off_unless_the_user_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    multiarray._set_madvise_hugepage(True)
    assert numpy_without_huge_pages() is True
    assert multiarray._get_madvise_hugepage() is False
    multiarray._set_madvise_hugepage(True)
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")  # the user's choice stands
    assert numpy_without_huge_pages() is False
    assert multiarray._get_madvise_hugepage() is True
