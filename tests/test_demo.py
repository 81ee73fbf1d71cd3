"""`servediff demo`, shortened: the built-in experiment — runs, control, tuned, MMLU, probes of
both sides at every divergence, and every report file; a re-run redoes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from servediff.cli import main


def test_demo_writes_the_whole_study(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    args = [
        "demo",
        "--limit",
        "3",
        "--max-tokens",
        "24",
        "--mmlu-limit",
        "6",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(args) == 0
    report = (out / "report.md").read_text()
    for heading in (
        "## Summary",
        "## Method",
        "## Quality",
        "## Why the text diverges — measured",
        "## What this study does not establish",
    ):
        assert heading in report
    assert "Control `stock` (prompts): **3/3** identical" in report
    summary = json.loads((out / "summary.json").read_text())
    control = summary["controls"][0]
    assert control["identical"] == control["total"] == 3
    assert {p["suite"] for p in summary["pairs"]} == {"prompts", "mmlu"}
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")
    # Every divergence was probed under stock and under tuned: one record per side and suite,
    # and the report's measured section shows both sides' probes against the recorded numbers.
    diverged = {p["suite"] for p in summary["pairs"] if p["divergences"]}
    assert diverged, "stock and tuned should diverge somewhere at 24 tokens"
    probes = sorted(q.name.split(".", 2)[2] for q in (out / "probes").glob("*.jsonl"))
    assert probes == sorted(f"stock-vs-tuned.{side}.jsonl" for _ in diverged for side in "ab")
    for side in ("stock", "tuned"):
        assert f"**Probe vs run:** `{side}`" in report
    assert " unexplained" in report and "0 unexplained" in report
    # Re-running resumes: nothing is generated or probed again, the records stay byte-identical.
    before = {p: p.read_bytes() for p in out.rglob("*.jsonl")}
    assert len([p for p in before if "runs" in p.parts]) == 6  # stock ×2, tuned, per suite
    assert main(args) == 0
    assert {p: p.read_bytes() for p in out.rglob("*.jsonl")} == before
