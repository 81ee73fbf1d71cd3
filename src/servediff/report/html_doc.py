"""The HTML backend of the document tree: layout and escaping, nothing else.

    servediff report runs/*.jsonl --html report.html

Every span is HTML-escaped (markupsafe); only a figure's SVG, drawn by matplotlib (which escapes
its own text), goes in as it is. A cell's or item's tone becomes a class the style sheet colours.
Of a ``PerFormat`` block HTML takes its HTML part.
"""

from __future__ import annotations

import json

from markupsafe import Markup, escape

from servediff.report.document import (
    Block,
    Bullets,
    Card,
    Columns,
    Figure,
    Folded,
    Heading,
    Paragraph,
    PerFormat,
    Preformatted,
    Span,
    Spans,
    Table,
)


def span(s: Span) -> str:
    if s.style == "token":
        shown = "end of sequence" if s.text is None else json.dumps(s.text, ensure_ascii=False)
        return f'<code class="tok">{escape(shown)}</code>'
    text = escape("" if s.text is None else s.text)
    if s.style == "code":
        return f"<code>{text}</code>"
    if s.style == "strong":
        return f"<b>{text}</b>"
    if s.style == "mark":
        return f'<mark class="first">{text}</mark>'
    if s.style == "badge":  # the class name from the text: "near-tie flip" → badge near-tie-flip
        return f'<span class="badge {text.replace(" ", "-")}">{text}</span>'
    return str(text)


def line(text: Spans) -> str:
    return "".join(span(s) for s in text)


def _class(name: str | None) -> str:
    return f' class="{escape(name)}"' if name else ""


def block(b: Block) -> str:
    if isinstance(b, Heading):
        anchor = f' id="{escape(b.anchor)}"' if b.anchor else ""
        return f"<h{b.level}{anchor}>{line(b.text)}</h{b.level}>"
    if isinstance(b, Paragraph):
        return f"<p{_class(None if b.look == 'plain' else b.look)}>{line(b.text)}</p>"
    if isinstance(b, Bullets):
        items = "".join(f"<li{_class(i.tone and f'tone-{i.tone}')}>{line(i.text)}</li>\n" for i in b.items)
        return f"<ul>\n{items}</ul>"
    if isinstance(b, Table):
        head = "".join(f"<th>{escape(h)}</th>" for h in b.header)
        rows = "".join(
            "<tr>"
            + "".join(f"<td{_class(c.tone and f'tone-{c.tone}')}>{line(c.text)}</td>" for c in row)
            + "</tr>\n"
            for row in b.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>\n{rows}</tbody></table>"
    if isinstance(b, Preformatted):
        return f"<pre>{line(b.text)}</pre>"
    if isinstance(b, Folded):
        return f"<details><summary>{line(b.summary)}</summary>{render(b.body)}</details>"
    if isinstance(b, Columns):
        inner = "".join(f"<div{_class(name)}>{render(column)}</div>" for name, column in b.columns)
        return f"<div{_class(b.name)}>{inner}</div>"
    if isinstance(b, Card):
        return f'<article{_class(b.kind)} data-item="{escape(b.key)}">\n{render(b.blocks)}</article>'
    if isinstance(b, PerFormat):
        return render(b.html)
    assert isinstance(b, Figure)
    caption = f"<figcaption>{escape(b.caption)}</figcaption>"
    return f'<figure class="plot" id="plot-{escape(b.name)}">{b.draw()}{caption}</figure>'


def render(blocks: tuple[Block, ...]) -> Markup:
    return Markup("\n".join(block(b) for b in blocks))
