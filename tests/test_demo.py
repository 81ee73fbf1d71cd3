"""`servediff demo`, shortened: runs, control, tuned, MMLU, probes, and every report file."""

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
    # Re-running resumes: nothing is generated again, the records stay byte-identical.
    before = {p.name: p.read_bytes() for p in (out / "runs").glob("*.jsonl")}
    assert main(args) == 0
    assert {p.name: p.read_bytes() for p in (out / "runs").glob("*.jsonl")} == before
