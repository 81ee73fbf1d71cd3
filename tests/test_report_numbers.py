"""Every number a report shows is in its summary.json (or is a constant of the report's own text).

A number in report.md or report.html that summary.json cannot produce was computed while
rendering, where no reader of summary.json and no consistency test can see it. Each number on the
page must be a value of summary.json under one of the report's formats (``report.fmt``: digits,
percentage points, per-1,000 rates, significant figures), a number inside one of its strings
(labels, item ids, details), or a number written in the report's sentences and headers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servediff.compare.loader import load
from servediff.report import render
from servediff.report.assembly import build
from tests.helpers.reference import ROOT, STUDIES, ReferenceStudy
from tests.test_report_consistency import html_text, md_text

# A number standing on its own: not part of a word, a hash or a name (bf16, x86_64, a SHA prefix).
NUMBER = re.compile(r"(?<![A-Za-z_\d.])\d+(?:,\d{3})*(?:\.\d+)?(?:e[+-]\d+)?(?![A-Za-z_\d])")
TEXT_SOURCES = ("templates/report.md.j2", "templates/report.html.j2", "wording.py", "fmt.py", "sections")


def scalars(x: Any) -> Iterator[Any]:
    if isinstance(x, dict):
        for v in x.values():
            yield from scalars(v)
    elif isinstance(x, list):
        for v in x:
            yield from scalars(v)
    else:
        yield x


def lengths(x: Any) -> Iterator[int]:
    if isinstance(x, dict):
        for v in x.values():
            yield from lengths(v)
    elif isinstance(x, list):
        yield len(x)
        for v in x:
            yield from lengths(v)


def forms(v: float) -> set[str]:
    """How the report's formats can print v (its magnitude: the sign is not part of the digits)."""
    out = set()
    for x in (abs(v), abs(v) * 100, abs(v) * 1000):
        out |= {f"{x:.{n}f}" for n in range(5)} | {f"{x:.{n}g}" for n in range(1, 5)} | {f"{x:,.0f}"}
    return {s.replace(",", "") for s in out}


def producible(summary: dict[str, Any]) -> set[str]:
    out: set[str] = {str(n) for n in lengths(summary)}  # a count of entries is read off the file
    for v in scalars(summary):
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (int, float)):
            out |= forms(v)
        else:
            out |= {m.replace(",", "") for m in NUMBER.findall(str(v))}
    folder = ROOT / "src" / "servediff" / "report"
    for name in TEXT_SOURCES:
        for path in [folder / name] if (folder / name).is_file() else sorted((folder / name).glob("*.py")):
            out |= {m.replace(",", "") for m in NUMBER.findall(path.read_text(encoding="utf-8"))}
    return out


def unexplained_numbers(text: str, known: set[str]) -> list[str]:
    return sorted({m for m in (n.replace(",", "") for n in NUMBER.findall(text)) if m not in known})


def page_text(page: str) -> str:
    return html_text(re.sub(r"<(style|head)\b.*?</\1>", " ", page, flags=re.S))


STUDIED = [
    s
    for s in STUDIES
    if s.name in ("constructed", "demo", "sampled", "gate", "gpu-full", "gpu-kl", "gpu-factors")
]


@pytest.mark.parametrize("study", STUDIED, ids=[s.name for s in STUDIED])
def test_every_number_shown_is_in_the_summary(study: ReferenceStudy, tmp_path: Path) -> None:
    report = build(*load(study.files(tmp_path), title=study.title))
    summary = json.loads(json.dumps(render.summary(report)))
    known = producible(summary)
    assert unexplained_numbers(md_text(render.markdown(report)), known) == []
    assert unexplained_numbers(page_text(render.html(report)), known) == []


def test_a_number_computed_at_render_time_is_caught() -> None:
    known = producible({"identical": 3, "total": 20, "share": 0.15})
    assert unexplained_numbers("3/20 identical (15.0 %)", known) == []
    assert unexplained_numbers("3/20 identical, 17 differ", known) == ["17"]
