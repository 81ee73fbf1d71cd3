"""summary.json and ``compare --json`` are written a slice of divergences at a time: one JSON
document, laid out as the whole summary encoded at once, whatever the slice."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from servediff.cli import main
from servediff.compare.loader import load
from servediff.report import render
from servediff.report.assembly import build
from tests.report_fixtures import write_study
from tests.test_record_blocks import write as write_shadow_records


@pytest.mark.parametrize("size", [1, 2, 5_000])
def test_the_summary_written_in_slices_is_the_summary_encoded_whole(tmp_path: Path, size: int) -> None:
    study = write_study(tmp_path / "study")  # a control with no divergence, pairs with some
    (tmp_path / "shadow").mkdir()
    shadow = list(write_shadow_records(tmp_path / "shadow"))  # texts beyond ASCII, quotes, "\"
    for paths in (study, shadow):
        report = build(*load(paths))
        comparisons = [*report.controls, *report.pairs]
        assert any(c.divergences for c in comparisons)
        plain = render.summary(report)
        got = render.summary_json(report, size)
        assert got == msgspec.json.format(msgspec.json.encode(plain), indent=2)
        assert json.loads(got) == json.loads(json.dumps(plain))
    assert [len(c.divergences) for c in build(*load(study)).controls] == [0]
    assert "bé".encode() in got and b"\\u2028" not in got  # UTF-8, not escaped


def test_compare_json_prints_the_summary_and_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = write_study(tmp_path / "study")
    assert main(["compare", *map(str, paths), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(render.summary_json(build(*load(paths))))
    assert printed["pairs"] and printed["pairs"][0]["divergences"]
