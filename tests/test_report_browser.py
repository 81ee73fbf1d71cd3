"""The HTML report in a real browser: headless Chromium (the system package) opens it from disk.

It must show every divergence view and every plot, fetch nothing, and run none of the markup
planted in completions and labels. Skipped only when no Chromium is installed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from servediff.cli import main
from servediff.compare.study import build_study
from servediff.records import read_run
from tests.report_fixtures import SCRIPT, write_study

CHROMIUM = (
    os.environ.get("SERVEDIFF_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
)
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)"
)


def test_report_in_chromium(tmp_path: Path) -> None:
    runs = write_study(tmp_path / "runs")
    report = tmp_path / "report.html"
    assert main(["report", *map(str, runs), "--html", str(report)]) == 0
    study = build_study([read_run(p) for p in runs])
    n_divergences = sum(len(p.divergences) for p in [*study.controls, *study.pairs])
    assert n_divergences == 9  # stock·tuned: q1 q2 q3; stock·third: q1 q4; tuned·third: all four
    screenshot = tmp_path / "report.png"
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("request", lambda r: requests.append(r.url))
        console: list[str] = []  # a blocked resource (the CSP) or a script error shows up here
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.goto(report.as_uri())
        page.wait_for_load_state("load")
        # Nothing planted ran: no global set, no script or img element made from a completion.
        for name in ("__pwned", "__img_pwned", "__label_pwned"):
            assert page.evaluate(f"typeof window.{name}") == "undefined", name
        assert page.locator("script").count() == 0
        assert page.locator("img").count() == 0
        assert page.locator("svg image").count() == 0  # plots are vectors: nothing the CSP would block
        # The payload is shown as text, in the tuned side of a divergence view.
        views = page.locator("article.divergence")
        assert views.count() == n_divergences
        q1 = page.locator("article.divergence[data-item='q1']").first
        assert SCRIPT in q1.locator(".b pre").inner_text()
        assert q1.locator("mark.first").count() == 2
        details = q1.locator("details")
        assert details.get_attribute("open") is None  # the common prefix starts collapsed
        assert not q1.locator("details pre").is_visible()
        q1.locator("details summary").click()
        assert q1.locator("details pre").is_visible()
        assert q1.locator("details pre").inner_text() == "The answer is"
        # Every plot is there and laid out with a real size.
        for plot_id in ("plot-survival", "plot-gaps", "plot-accuracy"):
            box = page.locator(f"#{plot_id} svg").bounding_box()
            assert box is not None and box["width"] > 300 and box["height"] > 100, plot_id
        assert page.locator("figure[id^='plot-matrix-'] svg").count() == 1
        assert page.locator("figure[id^='plot-subjects-'] svg").count() == len(study.pairs)
        assert page.locator("h3#changed + table tbody tr").count() >= 1
        page.screenshot(path=str(screenshot), full_page=True)
        browser.close()
    assert [u for u in requests if not u.startswith(("file:", "data:"))] == []
    assert console == []
    assert screenshot.stat().st_size > 20_000
    print(f"screenshot: {screenshot}")
