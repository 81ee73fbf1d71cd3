"""The report as a small document tree: what a section says, before any format.

    servediff report runs/*.jsonl --md report.md --html report.html

A section (``report.sections``) turns its part of the analysis into blocks: headings, paragraphs,
bullet lists, tables of cells and figures, each made of spans of text with a style. The two
backends (``report.markdown_doc``, ``report.html_doc``) only lay the blocks out and escape the
text, so a sentence is written once for both formats and no number is formatted twice. A cell
may carry a tone (its verdict: good, bad, warn), which the HTML colours and Markdown ignores.

Where the two formats differ in room, a section says so once with ``PerFormat``: report.md is read
as text (pasted into a pull request), report.html has space for a card per divergence with the
completions side by side (``Card``, ``Columns``, ``Folded``, ``Preformatted``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

# mark: the first differing token inside a completion; badge: a class shown as a tag
Style = Literal["plain", "code", "strong", "token", "mark", "badge"]
Tone = Literal["good", "bad", "warn", "neutral"]
Look = Literal["plain", "muted", "warn", "note"]


@dataclass(frozen=True, slots=True)
class Span:
    text: str | None  # None: a token that is the end of sequence (shown as such)
    style: Style = "plain"


Spans = tuple[Span, ...]


def plain(text: object) -> Span:
    return Span(str(text))


def code(text: object) -> Span:
    return Span(str(text), "code")


def strong(text: object) -> Span:
    return Span(str(text), "strong")


def token(text: str | None) -> Span:
    return Span(text, "token")


def mark(text: str) -> Span:
    return Span(text, "mark")


def badge(text: str) -> Span:
    return Span(text, "badge")


def spans(*parts: Span | str) -> Spans:
    """Text and spans in order; a bare string is plain text."""
    return tuple(p if isinstance(p, Span) else Span(p) for p in parts)


@dataclass(frozen=True, slots=True)
class Heading:
    level: int  # 2: a section, 3: a subsection
    text: Spans
    anchor: str | None = None  # the HTML id (the navigation links to it)


@dataclass(frozen=True, slots=True)
class Paragraph:
    text: Spans
    look: Look = "plain"


@dataclass(frozen=True, slots=True)
class Item:
    text: Spans
    tone: Tone | None = None


@dataclass(frozen=True, slots=True)
class Bullets:
    items: tuple[Item, ...]


@dataclass(frozen=True, slots=True)
class Cell:
    text: Spans
    tone: Tone | None = None


def cell(*parts: Span | str, tone: Tone | None = None) -> Cell:
    return Cell(spans(*parts), tone)


@dataclass(frozen=True, slots=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True, slots=True)
class Figure:
    """A plot: SVG in HTML (drawn by ``report.figures``, which escapes its own text); Markdown
    shows only the caption's pointer to the HTML report. ``draw`` makes the SVG when the HTML is
    written: Markdown alone never draws (at a million items the survival curve alone took a
    second, and importing matplotlib another half)."""

    name: str
    draw: Callable[[], str]
    caption: str


@dataclass(frozen=True, slots=True)
class Preformatted:
    """Text whose whitespace is content (a completion, a common prefix), shown as it is."""

    text: Spans


@dataclass(frozen=True, slots=True)
class Folded:
    """Shown on demand: a click opens it in HTML (``<details>``); Markdown shows it all."""

    summary: Spans
    body: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class Columns:
    """Blocks side by side (A beside B) in HTML; one after the other in Markdown. Each column's
    name is its HTML class (the style sheet colours A's and B's marks apart)."""

    name: str
    columns: tuple[tuple[str, tuple[Block, ...]], ...]


@dataclass(frozen=True, slots=True)
class Card:
    """One record shown as a unit (a divergence): an ``<article>`` whose class is its kind and
    whose ``data-item`` is its key, so a reader's tools can find it; Markdown shows its blocks."""

    kind: str
    key: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class PerFormat:
    """One content laid out for each format: a dense form for Markdown, a roomy one for HTML."""

    markdown: tuple[Block, ...]
    html: tuple[Block, ...]


Block = Heading | Paragraph | Bullets | Table | Figure | Preformatted | Folded | Columns | Card | PerFormat
