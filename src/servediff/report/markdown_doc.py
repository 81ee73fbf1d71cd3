"""The Markdown backend of the document tree: layout and escaping, nothing else.

    servediff report runs/*.jsonl --md report.md

Every span of text is escaped for where it goes (``mdtext.cell`` in prose and cells,
``mdtext.code`` in code spans), so no label, token or error from a record becomes markup.
Figures are HTML only: Markdown leaves them out. Of a ``PerFormat`` block Markdown takes its
Markdown part; cards, columns and folded blocks show their blocks one after the other.
"""

from __future__ import annotations

import json

from servediff.report import mdtext
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
        return mdtext.code("end of sequence" if s.text is None else json.dumps(s.text, ensure_ascii=False))
    text = "" if s.text is None else s.text
    if s.style == "code":
        return mdtext.code(text)
    if s.style == "strong":
        return f"**{mdtext.cell(text)}**"
    if s.style == "badge":
        return f"[{mdtext.cell(text)}]"
    return mdtext.cell(text)


def line(text: Spans) -> str:
    return "".join(span(s) for s in text)


def block(b: Block) -> str:
    if isinstance(b, Heading):
        return f"{'#' * b.level} {line(b.text)}"
    if isinstance(b, Paragraph):
        return f"> {line(b.text)}" if b.look in ("warn", "note") else line(b.text)
    if isinstance(b, Bullets):
        return "\n".join(f"- {line(i.text)}" for i in b.items)
    if isinstance(b, Table):
        head = f"| {' | '.join(mdtext.cell(h) for h in b.header)} |\n|{'---|' * len(b.header)}"
        rows = (f"| {' | '.join(line(c.text) for c in row)} |" for row in b.rows)
        return "\n".join([head, *rows])
    if isinstance(b, Preformatted):
        return mdtext.fenced("".join("" if s.text is None else s.text for s in b.text))
    if isinstance(b, Folded):
        return render((Paragraph(b.summary), *b.body))
    if isinstance(b, Columns):
        return render(tuple(x for _, column in b.columns for x in column))
    if isinstance(b, Card):
        return render(b.blocks)
    if isinstance(b, PerFormat):
        return render(b.markdown)
    assert isinstance(b, Figure)
    return ""


def render(blocks: tuple[Block, ...]) -> str:
    """Blocks separated by one blank line (a figure leaves nothing)."""
    return "\n\n".join(text for text in map(block, blocks) if text)
