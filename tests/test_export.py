"""servediff export: one row per (item, configuration run), the same in CSV and Parquet."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from servediff.cli import main
from tests.report_fixtures import SCRIPT, write_study


def test_export_csv_and_parquet(tmp_path: Path) -> None:
    runs = write_study(tmp_path / "runs")
    out_csv, out_pq = tmp_path / "items.csv", tmp_path / "items.parquet"
    assert main(["export", *map(str, runs), "--csv", str(out_csv), "--parquet", str(out_pq)]) == 0
    with out_csv.open(newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 4 * 4  # four runs (stock twice) × four items
    by = {(r["label"], r["repeat"], r["item_id"]): r for r in table}
    q1 = by[("tuned", "1", "q1")]
    assert (q1["identical_to_reference"], q1["first_diff_char"], q1["first_diff_token"]) == (
        "False",
        "14",
        "3",
    )
    assert SCRIPT in q1["text"] and q1["correct"] == "False" and q1["subject"] == "elementary_mathematics"
    assert {by[("stock", "2", i)]["identical_to_reference"] for i in ("q1", "q2", "q3", "q4")} == {"True"}
    assert by[("tuned", "1", "q2")]["correct"] == "True"  # a divergence that kept its answer
    frame = pq.read_table(out_pq).to_pylist()
    assert len(frame) == len(table)
    row = next(r for r in frame if (r["label"], r["repeat"], r["item_id"]) == ("tuned", 1, "q1"))
    assert row["identical_to_reference"] is False and row["first_diff_token"] == 3 and row["correct"] is False
    assert [r["text"] for r in frame] == [r["text"] for r in table]


def test_export_needs_a_target_and_says_what_parquet_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = write_study(tmp_path / "runs")
    assert main(["export", *map(str, runs)]) == 2
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if pyarrow were not installed
    assert main(["export", *map(str, runs), "--parquet", str(tmp_path / "x.parquet")]) == 2
    assert "servediff[parquet]" in capsys.readouterr().err
