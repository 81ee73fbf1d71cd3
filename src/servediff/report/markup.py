"""Markdown section lines (as the Markdown report's sections return them) → escaped HTML.

    servediff experiment examples/llamacpp-flash.toml     # report.html carries the experiment's tables

The HTML report has its own views of the study; sections that exist only in Markdown (an
experiment's verification table, its load sweep) are carried over through this small subset:
headings, tables, block quotes, list items, paragraphs, ``code`` and **bold**. Every piece of
text is unescaped once (Markdown cells already carry ``&lt;``) and then escaped again, so nothing
in a record can become markup.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

# A backslash escape, a code span (a fence of n backticks closed by exactly n, CommonMark 6.1),
# or **bold**, in the order they can appear in a line; everything else is text.
INLINE = re.compile(r"\\([!-/:-@\[-`{-~])|(?<!`)(`+)(?!`)(.+?)(?<!`)\2(?!`)|\*\*(.+?)\*\*")


def inline(text: str) -> str:
    """Escape, then turn `code` and **bold** spans into elements; read what ``mdtext`` wrote
    back as a Markdown renderer would (escapes and entities outside code, literal inside)."""
    out, pos = [], 0
    for m in INLINE.finditer(text):
        out.append(_text(text[pos : m.start()]))
        if m[1] is not None:
            out.append(html.escape(m[1]))
        elif m[2] is not None:
            out.append(f"<code>{html.escape(_code(m[3]))}</code>")
        else:
            out.append(f"<b>{inline(m[4])}</b>")
        pos = m.end()
    return "".join(out) + _text(text[pos:])


def _text(s: str) -> str:
    return html.escape(html.unescape(s))


def _code(s: str) -> str:
    s = s.replace("\\|", "|")  # GFM: the table's escape, not the code's
    if len(s) >= 2 and s[0] == s[-1] == " " and s.strip():
        s = s[1:-1]
    return s


def cells(row: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", row.strip())
    return [p.strip() for p in parts[1:-1]]


def _table(rows: list[str]) -> str:
    head, body = cells(rows[0]), [cells(r) for r in rows[2:]]
    th = "".join(f"<th>{inline(c)}</th>" for c in head)
    trs = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in body)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def to_html(lines: Sequence[str]) -> str:
    out: list[str] = []
    table: list[str] = []
    items: list[str] = []
    for line in [*lines, ""]:
        if table and not line.startswith("|"):
            out.append(_table(table))
            table = []
        if items and not line.startswith("- "):
            out.append("<ul>" + "".join(f"<li>{inline(x)}</li>" for x in items) + "</ul>")
            items = []
        if line.startswith("|"):
            table.append(line)
        elif line.startswith("- "):
            items.append(line[2:])
        elif m := re.match(r"(#{1,4}) (.*)", line):
            level = min(len(m[1]), 4)
            out.append(f"<h{level}>{inline(m[2])}</h{level}>")
        elif line.startswith("> "):
            out.append(f"<p class='warn'>{inline(line[2:])}</p>")
        elif line.strip():
            out.append(f"<p>{inline(line)}</p>")
    return "\n".join(out)
