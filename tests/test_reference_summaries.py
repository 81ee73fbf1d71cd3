"""The numbers do not move: each reference study's summary.json, as built now, equals the one kept
in tests/data/reference (made by scripts/reference_summaries.py before the report was restructured).

New fields may appear; an existing number or text may change only where ``CHANGED`` says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.reference import CHANGED, STUDIES, ReferenceStudy, as_intended, differences, summary_of


@pytest.mark.parametrize("study", STUDIES, ids=[s.name for s in STUDIES])
def test_summary_equals_the_reference(study: ReferenceStudy, tmp_path: Path) -> None:
    reference = as_intended(json.loads(study.summary_path.read_text(encoding="utf-8")))
    now = json.loads(json.dumps(summary_of(study, tmp_path)))  # tuples → lists, as in the file
    assert differences(reference, now) == []


def test_a_moved_number_is_found() -> None:
    reference = {"pairs": [{"identical": 3, "table": {"b": 1}, "source": "x"}], "suites": [{"source": "a"}]}
    moved = {
        "pairs": [{"identical": 3, "table": {"b": 2}, "new": 1, "source": "y"}],
        "suites": [{"source": "b"}],
    }
    assert ".suites.source" in CHANGED  # a deliberate change is allowed where CHANGED names it, only there
    assert differences(reference, moved) == [".pairs[0].table.b: 1 → 2", ".pairs[0].source: 'x' → 'y'"]
    assert differences({"pairs": reference["pairs"]}, {"pairs": []}) == [".pairs: 1 entries, now 0"]
    assert differences({"x": 0.1 + 0.2}, {"x": 0.3}) == []  # the last bit of a sum's order
    assert differences({"x": 0.3}, {"x": 0.3001}) == [".x: 0.3 → 0.3001"]
