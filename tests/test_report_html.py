"""The HTML report's pieces without a browser: escaping, self-containment, and its statistics."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scipy.stats import gamma

from servediff.cli import main
from servediff.compare.study import build_study
from servediff.record import read_run
from servediff.report import evidence, html, markup, scores
from servediff.report.markdown import cell
from tests.report_fixtures import SCRIPT, write_study


@pytest.fixture
def study_files(tmp_path: Path) -> list[Path]:
    return write_study(tmp_path / "runs")


def test_html_escapes_every_payload_and_fetches_nothing(study_files: list[Path]) -> None:
    page = html.render(build_study([read_run(p) for p in study_files]))
    lowered = page.lower()
    assert "<script" not in lowered and "<img" not in lowered
    assert html.esc(SCRIPT) in page  # shown, as text
    assert "onerror=&quot;window.__label_pwned" in page  # the label, escaped in HTML
    # ... and inside the SVG plots, where matplotlib writes the label as XML text.
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) >= 5 and any("third&lt;img" in s for s in svgs)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_report_cli_writes_html_and_markdown(study_files: list[Path], tmp_path: Path) -> None:
    out_html, out_md = tmp_path / "out" / "r.html", tmp_path / "out" / "r.md"
    args = ["report", *map(str, study_files), "--html", str(out_html), "--md", str(out_md)]
    assert main(args) == 0
    assert out_html.read_text().startswith("<!DOCTYPE html>")
    assert "## Every divergence" in out_md.read_text()
    assert main(["report", str(tmp_path / "missing.jsonl"), "--html", str(out_html)]) == 2


def test_divergence_view_splits_at_the_first_differing_token(study_files: list[Path]) -> None:
    study = build_study([read_run(p) for p in study_files])
    pair = next(p for p in study.pairs if (p.a, p.b) == ("stock", "tuned"))
    v = evidence.views(pair)[0]
    assert (v.item_id, v.token_index, v.prefix, v.a_first) == ("q1", 3, "The answer is", " 4")
    assert v.b_first == " " + SCRIPT and v.a_rest == "."
    assert v.gap == pytest.approx(0.31 - 0.12)  # tuned's token is stock's runner-up
    assert v.klass == "rank change"  # 0.19 nats is above the default 0.1 threshold
    assert v.a_source == v.b_source == "recorded during the run"
    wider = evidence.views(pair, threshold=0.2)[0]
    assert wider.klass == "near-tie flip"


def test_kaplan_meier_and_hazard_by_hand() -> None:
    # Items that diverged at tokens 2, 5 and 8, and one identical for 5 tokens (censored).
    s = evidence.Survival("x", (2, 5, 5, 8), (True, False, True, True), 0)
    xs, ys = evidence.kaplan_meier(s)
    assert xs.tolist() == [0, 3, 6, 9]
    assert ys.tolist() == pytest.approx([1, 3 / 4, 3 / 8, 0])
    assert s.exposure == 3 + 5 + 6 + 9
    h = evidence.hazard(s)
    assert h is not None and h.rate == pytest.approx(3 / 23)
    # Exact Poisson limits through the gamma distribution (Garwood 1936), another route.
    assert h.lower == pytest.approx(gamma.ppf(0.025, 3) / 23)
    assert h.upper == pytest.approx(gamma.ppf(0.975, 4) / 23)
    assert evidence.hazard(evidence.Survival("none", (), (), 2)) is None


def test_quality_numbers_from_records(study_files: list[Path]) -> None:
    study = build_study([read_run(p) for p in study_files])
    acc = {a.label: (a.correct, a.n) for a in scores.accuracies(study)}
    assert acc["stock"] == (4, 4) and acc["tuned"] == (2, 4)  # q2 diverged but kept "Paris"
    q = next(x for x in scores.paired_all(study) if (x.a, x.b) == ("stock", "tuned"))
    assert (q.n, q.a_only, q.b_only) == (4, 2, 0)
    assert q.delta == pytest.approx(-0.5) and q.delta_low < -0.5 < q.delta_high
    assert sorted(c.item_id for c in q.changed) == ["q1", "q3"]
    rows = {r.subject: r for r in scores.subject_agreement(study.pairs[0])}
    assert rows["geography"].n == 2 and rows["logic"].same_answer == 1
    (m,) = scores.agreement_matrices(study)
    assert m.identical[0][0] == 1.0  # the control
    assert m.identical[0][1] == pytest.approx(1 / 4)


def test_markdown_sections_carry_over_escaped() -> None:
    row = f"| `x` | {cell(SCRIPT + ' | pipe')} |"
    flag = "> **Flag:** `tuned` " + cell(SCRIPT)
    lines = ["## Is it what it claims?", "", flag, "", "| a | b |", "|---|---|", row, "", "- one", "- two"]
    out = markup.to_html(lines)
    assert "<script" not in out and html.esc(SCRIPT) in out
    assert "<td><code>x</code></td>" in out and "| pipe" in out
    assert "<h2>Is it what it claims?</h2>" in out and "<b>Flag:</b>" in out and out.count("<li>") == 2
