"""The audit's report from the committed H200 audit records (docs/studies/gpu-h200-load/study.tar.xz):
``servediff audit --from`` lays the same document tree out as Markdown and as HTML, and each shows
the numbers of the analysis (``--json``)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from servediff.cli import main
from tests.helpers.reference import ROOT

STUDY = ROOT / "docs" / "studies" / "gpu-h200-load" / "study.tar.xz"


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("audit")
    with tarfile.open(STUDY) as tar:
        tar.extractall(
            out, members=[m for m in tar.getmembers() if m.name.startswith("audit/")], filter="data"
        )
    return out / "audit"


def test_markdown_and_html_show_the_analysis(
    audit_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    md, page = tmp_path / "audit.md", tmp_path / "audit.html"
    assert main(["audit", "--from", str(audit_dir), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert main(["audit", "--from", str(audit_dir), "--md", str(md), "--html", str(page)]) == 0
    text, html = md.read_text(encoding="utf-8"), page.read_text(encoding="utf-8")
    assert text.startswith(f"# servediff audit\n\n{s['verdict_line']}\n")  # '≤', '×': nothing to escape
    assert html.startswith("<!DOCTYPE html>") and "default-src 'none'" in html
    for side in (s["promise"], s["control"]):
        assert f"### {side['role']}: {side['label']}" in text
        assert f"<h3>{side['role']}: {side['label']}</h3>" in html
        for level in side["levels"]:
            counts = (level["trials"], level["divergent"], level["needle_trials"], level["needle_divergent"])
            row = " | ".join(map(str, counts))
            assert f" | {row} | " in text
            assert "".join(f"<td>{n}</td>" for n in counts) in html
    # the control diverged: its first divergences are listed, the same in both formats
    first = s["control"]["divergences"][0]
    assert f"- trial {first['item']} at concurrency {first['level']}" in text
    assert f"<li>trial {first['item']} at concurrency {first['level']}" in html
    assert s["promise"]["divergent"] == 0 and s["control"]["divergent"] == 23  # as committed
