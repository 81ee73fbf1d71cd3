"""The report's renderers without a browser: escaping in both formats, self-containment, and the
model's views and statistics on a constructed study."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scipy.stats import gamma

from servediff.cli import main
from servediff.compare.loader import load
from servediff.compare.report_options import ReportOptions
from servediff.compare.stats import hazard as hz
from servediff.report import figures, render
from servediff.report.assembly import build
from servediff.report.model import Report
from tests.helpers.records import Line, write_run
from tests.report_fixtures import SCRIPT, write_study


@pytest.fixture
def study_files(tmp_path: Path) -> list[Path]:
    return write_study(tmp_path / "runs")


@pytest.fixture
def report(study_files: list[Path]) -> Report:
    return build(*load(study_files))


def test_html_escapes_every_payload_and_fetches_nothing(report: Report) -> None:
    page = render.html(report)
    lowered = page.lower()
    assert "<script" not in lowered and "<img" not in lowered
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page  # shown, as text
    assert "onerror=&#34;window.__label_pwned" in page  # the label, escaped in HTML
    # ... and inside the SVG plots, where matplotlib writes the label as XML text.
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) >= 5 and any("third&lt;img" in s for s in svgs)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_markdown_keeps_every_payload_inert(report: Report) -> None:
    text = render.markdown(report)
    # Outside code spans no raw tag survives; inside a code span CommonMark shows it literally.
    outside = re.sub(r"(`+)(?:(?!\1).)*?\1", "", text)
    assert "<" not in outside and ">" not in outside
    assert '`third<img src=y onerror="window.__label_pwned = 1">$x$`' in text
    # A backtick in a label cannot close its code span: the fence is longer than any run in it.
    assert render.code("x`<img src=x onerror=alert(9)>`y") == "``x`<img src=x onerror=alert(9)>`y``"
    assert render.code("a|b\nc") == "`a\\|b\\nc`"
    assert render.md("*x* <b>|y_ [l](u)") == "\\*x\\* &lt;b&gt;\\|y\\_ \\[l\\](u)"


def test_report_cli_writes_html_and_markdown(study_files: list[Path], tmp_path: Path) -> None:
    out_html, out_md = tmp_path / "out" / "r.html", tmp_path / "out" / "r.md"
    args = ["report", *map(str, study_files), "--html", str(out_html), "--md", str(out_md)]
    assert main(args) == 0
    assert out_html.read_text().startswith("<!DOCTYPE html>")
    assert "## Every divergence" in out_md.read_text()
    assert main(["report", str(tmp_path / "missing.jsonl"), "--html", str(out_html)]) == 2


def test_divergence_view_splits_at_the_first_differing_token(study_files: list[Path]) -> None:
    study, options = load(study_files)
    pair = next(c for c in build(study, options).pairs if (c.a, c.b) == ("stock", "tuned"))
    v = pair.divergences[0]
    assert (v.item_id, v.token_index, v.prefix, v.a_first) == ("q1", 3, "The answer is", " 4")
    assert v.b_first == " " + SCRIPT and v.a_rest == "."
    assert v.a is not None and v.a.gap == pytest.approx(0.31 - 0.12)  # tuned's token is stock's runner-up
    assert v.cls == "rank change"  # 0.19 nats is above the default 0.1 threshold
    assert v.a.source == "recorded during the run" and v.a.cite == "run"
    wider = build(study, ReportOptions(near_tie=0.2))
    assert next(c for c in wider.pairs if c.b == "tuned").divergences[0].cls == "near-tie flip"


def test_kaplan_meier_and_hazard_by_hand() -> None:
    # Items that diverged at tokens 2, 5 and 8 (at risk for 3, 6, 9), one identical for 5 tokens.
    times = [(3, True), (5, False), (6, True), (9, True)]
    xs, ys = hz.kaplan_meier(times)
    assert xs == [0, 3, 6, 9]
    assert ys == pytest.approx([1, 3 / 4, 3 / 8, 0])
    events, exposure = hz.survival(times)
    assert exposure == 3 + 5 + 6 + 9
    h = hz.estimate(events, exposure)
    assert h.rate == pytest.approx(3 / 23)
    # Exact Poisson limits through the gamma distribution (Garwood 1936), another route.
    assert h.lower == pytest.approx(gamma.ppf(0.025, 3) / 23)
    assert h.upper == pytest.approx(gamma.ppf(0.975, 4) / 23)


def test_hazard_and_survival_curve_share_their_input(report: Report) -> None:
    for c in report.comparisons:
        assert c.hazard is not None
        events, exposure = hz.survival(c.times)
        assert (c.hazard.events, c.hazard.exposure) == (events, exposure)
        assert events == sum(1 for d in c.divergences if d.token_index is not None)


def test_quality_numbers_from_records(report: Report) -> None:
    q = report.quality
    assert q is not None
    acc = {(a.label, a.repeat): (a.correct, a.n) for a in q.accuracies}
    assert acc[("stock", 1)] == (4, 4) and acc[("tuned", 1)] == (2, 4)  # q2 diverged but kept "Paris"
    p = next(x for x in q.pairs if (x.a, x.b) == ("stock", "tuned"))
    assert (p.table.n, p.table.b, p.table.c) == (4, 2, 0)
    assert p.table.delta == pytest.approx(-0.5) and p.delta_ci.low < -0.5 < p.delta_ci.high
    assert sorted(c.item_id for c in q.changed if (c.a, c.b) == ("stock", "tuned")) == ["q1", "q3"]
    rows = {r.subject: r for r in q.subjects[0].rows}
    assert rows["geography"].n == 2 and rows["logic"].same_answer == 1
    (m,) = report.matrices
    assert m.identical[0][0] == 1.0  # the control
    assert m.identical[0][1] == pytest.approx(1 / 4)


@pytest.mark.parametrize(("n", "right"), [(10, True), (30, True), (50, False), (3, False)])
def test_html_report_draws_a_perfect_or_a_zero_score(n: int, right: bool, tmp_path: Path) -> None:
    """All right at n = 10 or 30, all wrong at n = 50: the Wilson bound came out a hair inside
    the estimate and matplotlib refused the negative error bar, so `report --html` exited 2."""
    lines = [Line(f"q{i}", "#### 4", answer="4", gold="4" if right else "5", correct=right) for i in range(n)]
    runs = [write_run(tmp_path / f"{label}.jsonl", label, lines, suite="gsm8k") for label in ("a", "b")]
    out = tmp_path / "r.html"
    assert main(["report", *map(str, runs), "--html", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    accuracy = re.search(r'<figure class="plot" id="plot-accuracy">(.*?)</figure>', page, flags=re.S)
    assert accuracy is not None and accuracy.group(1).startswith("<svg")
    assert "Figure not drawn" not in page


def test_a_figure_that_fails_is_a_note_in_the_page_not_the_end_of_the_report() -> None:
    # No curves at all: matplotlib's figure code raises (max() of nothing) where it would draw.
    # Every section draws through figures.drawn (and the template's figures through svg_figures).
    for note in (figures.drawn(figures.survival_svg, []), render.svg_figures.survival_svg([])):
        assert note.startswith('<p class="muted figure-failed">Figure not drawn (ValueError: ')
        assert "<svg" not in note
