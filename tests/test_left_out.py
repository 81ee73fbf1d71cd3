"""Item comparisons left out: a run that stopped before an item is not an engine error.

A run cut short (killed, or stopped at a deadline) has no line for the items it did not reach;
the report must say so and how to finish it, not blame the engine."""

from __future__ import annotations

import json
from pathlib import Path

from servediff.compare.loader import load
from servediff.compare.study import compare_runs
from servediff.records import read_run
from servediff.report.sections.summary import _left_out

RECORDS = Path(__file__).parent / "data" / "reference" / "constructed"


def _cut(src: Path, dst: Path, keep: int) -> Path:
    """The record as a run stopped after ``keep`` items leaves it: the header and its first lines."""
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    dst.write_text("".join(lines[: 1 + keep]), encoding="utf-8")
    return dst


def _errored(src: Path, dst: Path, n: int) -> Path:
    """The same record with its first ``n`` items failed, as the engine records a failure."""
    lines = src.read_text(encoding="utf-8").splitlines()
    out = [lines[0]]
    for i, line in enumerate(lines[1:]):
        item = json.loads(line)
        if i < n:
            item["error"] = "HTTP 500: engine failed"
        out.append(json.dumps(item))
    dst.write_text("\n".join(out) + "\n", encoding="utf-8")
    return dst


def test_an_unfinished_run_is_counted_apart_from_engine_errors(tmp_path: Path) -> None:
    a = read_run(RECORDS / "stock-1.jsonl")
    n = len(a.header.suite.item_ids)
    cut = read_run(_cut(RECORDS / "tuned-1.jsonl", tmp_path / "tuned-1.jsonl", n - 2))
    pair = compare_runs(a, cut, "pair")
    assert (pair.errors, pair.missing) == (2, 2)
    assert pair.total == n - 2


def test_an_engine_error_is_not_counted_as_missing(tmp_path: Path) -> None:
    a = read_run(RECORDS / "stock-1.jsonl")
    failed = read_run(_errored(RECORDS / "tuned-1.jsonl", tmp_path / "tuned-1.jsonl", 1))
    pair = compare_runs(a, failed, "pair")
    assert (pair.errors, pair.missing) == (1, 0)


def test_the_summary_says_which() -> None:
    assert _left_out(3, 0) == "3 item comparison(s) left out because a run recorded an engine error."
    assert _left_out(42, 42) == (
        "42 item comparison(s) left out: 42 not yet answered by one run "
        "(it stopped before them: run it again to finish)."
    )
    both = _left_out(3, 2)
    assert "2 not yet answered" in both and "1 because a run recorded an engine error" in both


def test_the_count_reaches_summary_json(tmp_path: Path) -> None:
    cut = _cut(RECORDS / "tuned-1.jsonl", tmp_path / "tuned-1.jsonl", 1)
    study, _ = load([RECORDS / "stock-1.jsonl", cut])
    assert [p.missing for p in study.pairs] == [len(study.pairs[0].a_run.header.suite.item_ids) - 1]
