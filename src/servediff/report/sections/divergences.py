"""Every divergence: where each pair of completions first parts, item by item.

    servediff compare runs/*.jsonl --md report.md --html report.html

report.md gets one dense table per comparison (prefix, both continuations, token counts);
report.html one card per divergence: the class as a badge, the common prefix folded away, both
completions side by side with the first differing token marked, and each side's top-k there.
Every value is a field of ``report.model.DivergenceView``.
"""

from __future__ import annotations

from servediff.compare.comparison import Comparison, DivergenceView, Side
from servediff.report import fmt
from servediff.report.document import (
    Block,
    Card,
    Cell,
    Columns,
    Folded,
    Heading,
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
from servediff.report.model import Report

HEADER = ("item", "char", "token", "…common prefix", "A next", "B next", "A tokens", "B tokens")
TOP_K = ("token", "logprob", "chosen by")
SHOWN = 60  # characters of prefix and continuation in the Markdown table
NONE = "None: every compared completion was byte-identical."
# Shadow traffic reaches 100,000s of divergences: past this many rows a table is no longer read.
# The counts, classes and gaps stay over all of them (and summary.json lists them all).
ROWS = 1000


def blocks(r: Report) -> tuple[Block, ...]:
    out: list[Block] = [Heading(2, spans("Every divergence"), "divergences")]
    diverged = [c for c in r.comparisons if c.divergences]
    out += [b for c in diverged for b in _comparison(c)]
    if not diverged:
        out.append(Paragraph(spans(NONE)))
    return tuple(out)


def _comparison(c: Comparison) -> tuple[Block, ...]:
    title = spans(code(c.a), " vs ", code(c.b), f" ({c.suite}, {c.kind}): {len(c.divergences)} of {c.total}")
    shown = c.divergences[:ROWS]
    table = Table(HEADER, tuple(_row(d) for d in shown))
    cards = tuple(_card(c, d) for d in shown)
    if len(c.divergences) <= ROWS:
        return Heading(3, title), PerFormat((table,), cards)
    more = Paragraph(
        spans(
            f"The first {fmt.count(ROWS)} of {fmt.count(len(c.divergences))} divergences,"
            " in the records' order."
        ),
        "muted",
    )
    return Heading(3, title), PerFormat((table, more), (*cards, more))


def _where(d: DivergenceView) -> str:
    return "n/a" if d.token_index is None else str(d.token_index)


def _count(n: int | None) -> str:
    return "n/a" if n is None else str(n)


def _row(d: DivergenceView) -> tuple[Cell, ...]:
    return (
        cell(code(d.item_id)),
        cell(str(d.char_index)),
        cell(_where(d)),
        cell(token(d.prefix[-SHOWN:])),
        cell(token((d.a_first + d.a_rest)[:SHOWN])),
        cell(token((d.b_first + d.b_rest)[:SHOWN])),
        cell(_count(d.a_tokens)),
        cell(_count(d.b_tokens)),
    )


def _card(c: Comparison, d: DivergenceView) -> Card:
    known = d.a is not None and d.a.gap is not None
    gap = f"{fmt.gap(d.a)} nats (A's top-1 − top-2)" if known else "not observed"
    first = spans(
        f"first difference at character {d.char_index}, token {_where(d)}: ",
        token(d.a_first),
        " vs ",
        token(d.b_first),
        f"; gap {gap}",
    )
    out: list[Block] = [Heading(4, spans(f"item {d.item_id} ", badge(d.cls))), Paragraph(first, "muted")]
    if d.note:
        out.append(Paragraph(spans(d.note), "muted"))
    prefix = Folded(spans(f"common prefix ({d.prefix_length} characters)"), (Preformatted(spans(d.prefix)),))
    sides = (
        ("a", _side(("A", c.a), d.a_first, d.a_rest, d.a, d)),
        ("b", _side(("B", c.b), d.b_first, d.b_rest, d.b, d)),
    )
    return Card("divergence", d.item_id, (*out, prefix, Columns("sides", sides)))


def _side(
    who: tuple[str, str], first: str, rest: str, s: Side | None, d: DivergenceView
) -> tuple[Block, ...]:
    """One side of a card (its letter and label): its completion from the first differing token,
    and its top-k there."""
    name, label = who
    source = s.source if s else "no logprobs recorded or probed"
    out: list[Block] = [
        Paragraph(spans(strong(f"{name}: "), code(label))),
        Preformatted(spans(mark(first), rest)),
        Paragraph(spans(f"top-k at token {_where(d)}: {source}"), "muted"),
    ]
    if s is None:
        return (*out, Paragraph(spans("no top-k recorded at this position"), "muted"))
    rows = tuple((cell(token(t)), cell(fmt.nats(lp)), cell(_chosen(t, d))) for t, lp in s.top)
    return (*out, Table(TOP_K, rows))


def _chosen(t: str, d: DivergenceView) -> str:
    return " ".join(side for side, chose in (("A", d.a_token), ("B", d.b_token)) if chose == t)
