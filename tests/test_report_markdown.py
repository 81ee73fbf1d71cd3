"""The Markdown report escapes what it interpolates: a label, item id, token or suite name from a
record cannot close its code span or table cell, nor become HTML, in report.md."""

from __future__ import annotations

import re
from pathlib import Path

from servediff.compare.loader import load
from servediff.report import render
from servediff.report.assembly import build
from tests.helpers.records import Line, write_run

BREAKOUT = "x`<img src=x onerror=alert(9)>`y|z"
ITEM = "q`1|<b>bold</b>&amp;"
TOKEN = "<img src=t onerror=alert(8)>`|"


def outside_code_spans(line: str) -> str:
    """The parts of a Markdown line a CommonMark renderer reads as markup (6.1: a run of n
    backticks opens a code span closed by the next run of exactly n; a backslash escapes)."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\":
            out.append(line[i : i + 2])
            i += 2
            continue
        if line[i] != "`":
            out.append(line[i])
            i += 1
            continue
        n = len(re.match(r"`+", line[i:])[0])  # type: ignore[index]
        close = re.compile(rf"(?<!`)`{{{n}}}(?!`)").search(line, i + n)
        if close is None:
            out.append("`" * n)
            i += n
        else:
            i = close.end()
    return "".join(out)


def test_labels_items_and_tokens_stay_inside_their_spans_and_cells(tmp_path: Path) -> None:
    a = [Line(ITEM, "The answer is 4.", ["The", " answer", " is", " 4", "."])]
    b = [Line(ITEM, f"The answer is {TOKEN}", ["The", " answer", " is", " " + TOKEN])]
    runs = [
        write_run(tmp_path / "a1.jsonl", "stock", a),
        write_run(tmp_path / "a2.jsonl", "stock", a, repeat=2),
        write_run(tmp_path / "b.jsonl", BREAKOUT, b),
    ]
    report = build(*load(runs))
    lines = render.markdown(report).splitlines()
    assert any("<img" in line for line in lines)  # the payload is shown, inside code spans
    for line in lines:
        assert not re.search(r"<[A-Za-z/!?]", outside_code_spans(line)), line  # never raw HTML
    for table in re.findall(r"(?:^\|.*\n)+", "\n".join(lines) + "\n", flags=re.M):
        widths = {len(re.findall(r"(?<!\\)\|", outside_code_spans(row))) for row in table.splitlines()}
        assert len(widths) == 1, table  # no row split by a pipe from the data
    # The HTML report, from the same model, shows the label and the item id whole, escaped.
    page = render.html(report)
    assert "<img" not in page and "<code>x`&lt;img src=x onerror=alert(9)&gt;`y|z</code>" in page
    assert "q`1|&lt;b&gt;bold&lt;/b&gt;&amp;amp;" in page  # the item id, as written


def test_the_hazard_table_does_not_extrapolate_past_the_answers() -> None:
    """The demo's reference records (embedded llama.cpp: 48-token prompts, MMLU answers of a few
    tokens): each pair's P(divergence) stops at the longest completion it compared, and the
    column says so; no "300-token completion" is printed for answers that never got near it."""
    reference = Path(__file__).resolve().parent / "data" / "reference" / "demo"
    s, options = load(sorted(reference.glob("runs/**/*.jsonl")) + sorted(reference.glob("probes/*.jsonl")))
    r = build(s, options)
    longest = {(c.suite, c.a, c.b): c.hazard.longest for c in r.pairs if c.hazard}
    assert longest and all(n is not None and n < 300 for n in longest.values())
    text = render.markdown(r)
    assert "300-token" not in text and "L=300" not in text
    mmlu = next(c for c in r.pairs if c.suite == "mmlu" and c.hazard)
    assert mmlu.hazard is not None and mmlu.hazard.horizons[-1].length == mmlu.hazard.longest <= 16
    assert f"L stops at {mmlu.hazard.longest} tokens, the longest any pair was compared over" in text
