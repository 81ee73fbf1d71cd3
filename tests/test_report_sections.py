"""The report's sections as a document tree: both backends lay out the same blocks, escape what
they print, and each ported section shows its part of the model (constructed study)."""

from __future__ import annotations

import json
from pathlib import Path

from servediff.compare.loader import load
from servediff.report import html_doc, markdown_doc, render, sections
from servediff.report.assembly import build
from servediff.report.document import (
    Bullets,
    Card,
    Columns,
    Folded,
    Heading,
    Item,
    Paragraph,
    PerFormat,
    Preformatted,
    Table,
    badge,
    cell,
    code,
    mark,
    spans,
    strong,
    token,
)
from tests.report_fixtures import LABEL_PAYLOAD, write_study


def test_both_backends_lay_out_one_tree_and_escape_it() -> None:
    blocks = (
        Heading(2, spans("Title <b>"), "t"),
        Paragraph(spans("a ", code("x`y"), " ", strong("*b*"), " ", token(" \n"), " ", token(None)), "warn"),
        Bullets((Item(spans("one|two"), "bad"),)),
        Table(("h", "v"), ((cell("<i>"), cell("1", tone="good")),)),
    )
    md, page = markdown_doc.render(blocks), str(html_doc.render(blocks))
    assert md.startswith('## Title &lt;b&gt;\n\n> a ``x`y`` **\\*b\\*** `" \\n"` `end of sequence`')
    assert "- one\\|two" in md and "| &lt;i&gt; | 1 |" in md
    assert '<h2 id="t">Title &lt;b&gt;</h2>' in page and '<p class="warn">' in page
    assert '<li class="tone-bad">one|two</li>' in page and '<td class="tone-good">1</td>' in page
    assert "<i>" not in page.replace("&lt;i&gt;", "")


def test_cards_fold_and_mark_their_text_and_each_format_takes_its_own_part() -> None:
    text = "```<script>x</script>"
    card = Card(
        "divergence",
        'q"1',
        (
            Heading(4, spans("item 1 ", badge("near-tie flip"))),
            Folded(spans("prefix"), (Preformatted(spans(text)),)),
            Columns("sides", (("a", (Preformatted(spans(mark("<A>"), " rest")),)), ("b", ()))),
        ),
    )
    blocks = (PerFormat((Paragraph(spans("dense")),), (card,)),)
    md, page = markdown_doc.render(blocks), str(html_doc.render(blocks))
    assert md == "dense"  # Markdown takes only its part
    assert markdown_doc.render((card,)).count("````") == 2  # a fence longer than the text's backticks
    assert '<article class="divergence" data-item="q&#34;1">' in page
    assert '<span class="badge near-tie-flip">near-tie flip</span>' in page
    assert "<details><summary>prefix</summary><pre>```&lt;script&gt;x&lt;/script&gt;</pre></details>" in page
    side_a = '<div class="a"><pre><mark class="first">&lt;A&gt;</mark> rest</pre></div>'
    assert f'<div class="sides">{side_a}' in page
    assert "dense" not in page and "<script>" not in page


def test_every_divergence_is_a_row_in_markdown_and_a_card_in_html(tmp_path: Path) -> None:
    report = build(*load(write_study(tmp_path / "runs")))
    md, page = render.markdown(report), render.html(report)
    n = sum(len(c.divergences) for c in report.comparisons)
    assert page.count('<article class="divergence"') == n
    rows = md[md.index("## Every divergence") : md.index("## Why the text diverges")]
    assert sum(1 for line in rows.splitlines() if line.startswith("| `")) == n
    pair = next(c for c in report.pairs if c.b == "tuned")
    assert f"(prompts, pair): {len(pair.divergences)} of {pair.total}" in rows


def test_why_gives_each_divergence_its_class_and_sources_in_both_formats(tmp_path: Path) -> None:
    report = build(*load(write_study(tmp_path / "runs")))
    md, page = render.markdown(report), render.html(report)
    start = md.index("## Why the text diverges")
    why_md = md[start : md.index("\n## ", start)]
    why_html = page[page.index('<h2 id="measured">') :]
    for c in report.comparisons:
        for d in c.divergences:
            cls = f"{d.cls} ({d.note})" if d.note else d.cls
            assert why_md.count(f" | {cls} | ") >= 1
    rows = [line for line in why_md.splitlines() if line.startswith("| `")]
    assert len(rows) == sum(len(c.divergences) for c in report.comparisons)
    assert why_html.count("<li><b>Hazard:</b>") == len(report.comparisons)


def test_runs_section_counts_what_the_records_hold(tmp_path: Path) -> None:
    paths = write_study(tmp_path / "runs")
    report = build(*load(paths))
    rows = {(r.label, r.repeat): r for r in report.runs}
    assert len(rows) == len(paths) == 4
    for path in paths:
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        head, items = lines[0], lines[1:]
        row = rows[(head["label"], head["repeat"])]
        assert row.items == len(items) and row.errors == sum(1 for i in items if i.get("error"))
        assert row.output_tokens == sum(i.get("n_tokens") or 0 for i in items if not i.get("error"))
    md, page = render.markdown(report), render.html(report)
    assert "## Runs" in md and '<h2 id="runs">Runs</h2>' in page
    assert md.index("## Runs") < md.index("## What this study does not establish")
    assert "| `stock` | prompts | #2 |" in md


def test_the_verdict_table_opens_the_report(tmp_path: Path) -> None:
    report = build(*load(write_study(tmp_path / "runs")))
    md = render.markdown(report)
    assert md.index("## Verdicts") < md.index("## Summary")
    table = next(b for b in sections.slot("top", report) if isinstance(b, Table))
    assert [c.text[0].text for c, *_ in table.rows] == [v.label for v in report.verdicts]
    assert LABEL_PAYLOAD in [v.label for v in report.verdicts]
    # each byte-identity cell is toned by what it says: a pair that changed output is a warning
    tuned = next(row for row in table.rows if row[0].text[0].text == "tuned")
    assert tuned[3].tone == "warn" and "prompts 1/4" in (tuned[3].text[0].text or "")


def _timed_run(path: Path, label: str, suite: str, repeat: int, seconds: float) -> None:
    """A run of 8 items of 10 tokens each, one request at a time, each taking ``seconds``."""
    from servediff.records import item_line, make_header, make_item
    from servediff.types import Completion, SamplingParams
    from tests.helpers.records import suite_info

    ids = [f"{suite}-{i}" for i in range(8)]
    header = make_header(
        label=label,
        repeat=repeat,
        engine={"kind": "llamacpp", "model": "test-model.gguf"},
        sampling=SamplingParams(max_tokens=10),
        suite=suite_info(suite, ids),
        concurrency=1,
    )
    lines = [header.model_dump_json() + "\n"]
    at = 1_000.0 * repeat + (100.0 if label == "tuned" else 0.0)
    for i in ids:
        at += seconds
        c = Completion(
            i, text=f"{i} {label}", n_tokens=10, finish_reason="length", latency_s=seconds, finished_at=at
        )
        lines.append(item_line(make_item(c, i, None, {})))
    path.write_text("".join(lines), encoding="utf-8")


def test_a_pooled_speedup_over_suites_that_moved_opposite_ways_says_so(tmp_path: Path) -> None:
    # tuned is twice as fast on "short" and half as fast on "long": pooled, about 0.8x, which
    # alone would read as "a little slower everywhere"
    for suite, tuned in (("short", 0.5), ("long", 2.0)):
        for r, jitter in ((1, 1.0), (2, 1.02)):
            _timed_run(tmp_path / f"stock.{suite}.r{r}.jsonl", "stock", suite, r, 1.0 * jitter)
            _timed_run(tmp_path / f"tuned.{suite}.r{r}.jsonl", "tuned", suite, r, tuned / jitter)
    report = build(*load(sorted(tmp_path.glob("*.jsonl"))))
    tuned_v = next(v for v in report.verdicts if v.label == "tuned")
    assert {s for s, _ in tuned_v.split} == {"short", "long"}
    table = next(b for b in sections.slot("top", report) if isinstance(b, Table))
    speed = next(row for row in table.rows if row[0].text[0].text == "tuned")[2]
    text = speed.text[0].text or ""
    assert speed.tone == "warn" and "the suites differ:" in text
    assert "short 2× [" in text and "long 0.51× [" in text, text

    # both suites faster: one number says it, no note
    for r, jitter in ((1, 1.0), (2, 1.02)):
        _timed_run(tmp_path / f"tuned.long.r{r}.jsonl", "tuned", "long", r, 0.5 / jitter)
    report = build(*load(sorted(tmp_path.glob("*.jsonl"))))
    assert next(v for v in report.verdicts if v.label == "tuned").split == ()
