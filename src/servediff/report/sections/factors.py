"""Which factor changes the output: a factor design's combinations against the control, what
each factor does alone and what its removal prevents, and each diverging item's smallest
reproducing factor set (settled, or an upper bound with the sets that would settle it).

    servediff experiment examples/tuned-factors.toml      # report.md, report.html: Which factor

Every number is a field of ``report.rows.factor_table.FactorTable``.
"""

from __future__ import annotations

from servediff.report import fmt
from servediff.report.document import (
    Block,
    Bullets,
    Cell,
    Heading,
    Item,
    Paragraph,
    Table,
    cell,
    code,
    spans,
    strong,
)
from servediff.report.model import Report
from servediff.report.rows.factor_table import CauseRow, FactorCell, FactorRow, FactorTable

CELLS = (
    "configuration",
    "factors on",
    "identical",
    "hazard per 1,000 tokens (95 % CI)",
    "prompt tokens from the KV cache",
    "Δ accuracy vs control (95 % CI)",
)
ROWS = (
    "factor",
    "alone: identical",
    "alone: hazard per 1,000 tokens",
    "all but it: identical",
    "its removal prevents",
    "established sole cause of",
)
ITEMS = ("item", "diverges under", "smallest factor set that reproduces it", "also on, yet identical")


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.attribution:
        return ()
    out: list[Block] = [Heading(2, spans("Which factor changes the output?"), "factors")]
    for a in r.attribution:
        out += _suite(a)
    return tuple(out)


def _suite(a: FactorTable) -> list[Block]:
    out: list[Block] = [
        Heading(3, spans(f"{a.suite}: {', '.join(a.factors)}")),
        Paragraph(spans(intro(a))),
    ]
    if caveat := control_caveat(a):
        out.append(Paragraph(spans(strong(caveat))))
    out += [
        Table(CELLS, tuple(_cell(c) for c in a.cells)),
        Table(ROWS, tuple(_row(f) for f in a.rows)),
        Bullets(tuple(Item(spans(factor_sentence(f))) for f in a.rows)),
    ]
    if a.items:
        out.append(Table(ITEMS, tuple(_item(i) for i in a.items)))
    else:
        out.append(Paragraph(spans("No combination diverged from the control on this suite.")))
    return [*out, Bullets(_notes(a))]


def factor_set(on: tuple[str, ...]) -> str:
    return " + ".join(on) if on else "none"


def intro(a: FactorTable) -> str:
    design = "An all-factors" if a.design == "all" else f"A {a.design}"
    settled = (
        f"Of the {len(a.items)} diverging item(s), {a.settled} settled and {a.upper_bounds} upper bound(s)."
        if a.items
        else "No item diverged."
    )
    return (
        f"{design} design over {len(a.factors)} factor(s) ({', '.join(a.factors)}), each a named change "
        f"to the control {a.control}: every combination that ran is compared with the control's first run "
        "on the same items. A factor's removal prevents a divergence when the item diverges with every "
        "factor on and not with all but that one. An item's smallest factor set is settled (established) "
        "when every set one factor smaller was run and left it identical to the control; otherwise it is "
        "an upper bound, and the sets that would settle it were not run (servediff experiment FILE "
        f"--bisect runs them). {settled}"
    )


def control_caveat(a: FactorTable) -> str:
    if a.control_deterministic is None:
        return (
            f"The control {a.control} was not repeated on {a.suite}: a divergence may be run-to-run noise "
            "rather than a factor's effect."
        )
    if not a.control_deterministic:
        return (
            f"The control {a.control} did NOT reproduce itself on {a.suite}: divergences cannot be "
            "attributed to factors with confidence."
        )
    return ""


def _identical(c: FactorCell | None) -> str:
    if c is None:
        return "not run"
    return fmt.ratio(c.identical, c.total) + (f" ({c.errors} left out)" if c.errors else "")


def _cell(c: FactorCell) -> tuple[Cell, ...]:
    h, q = c.hazard, c.quality
    cached = (
        "not recorded"
        if c.cached_tokens is None
        else f"{fmt.count(c.cached_tokens)} of {fmt.count(c.prompt_tokens)}"
    )
    return (
        cell(code(c.label)),
        cell(factor_set(c.on)),
        cell(_identical(c)),
        cell(f"{fmt.rate(h.per_1000)} ({fmt.rate(h.low_1000)}–{fmt.rate(h.high_1000)})" if h else "n/a"),
        cell(cached),
        cell(
            f"{fmt.spp(q.table.delta)} pp [{fmt.spp(q.delta_ci.low)}, {fmt.spp(q.delta_ci.high)}]"
            if q
            else "not scored"
        ),
    )


def _row(f: FactorRow) -> tuple[Cell, ...]:
    alone = f.alone.hazard if f.alone else None
    return (
        cell(f.factor),
        cell(fmt.ratio(f.alone.identical, f.alone.total) if f.alone else "not run"),
        cell(fmt.rate(alone.per_1000) if alone else "n/a"),
        cell(fmt.ratio(f.without.identical, f.without.total) if f.without else "not run"),
        cell("n/a" if f.prevents is None else fmt.ratio(f.prevents, f.diverging_with_all or 0)),
        cell(str(len(f.sole))),
    )


def factor_sentence(f: FactorRow) -> str:
    parts = []
    if f.alone is not None:
        parts.append(f"alone it leaves {fmt.ratio(f.alone.identical, f.alone.total)} completions identical")
    if f.prevents is not None and f.diverging_with_all is not None:
        parts.append(
            f"removing it from all factors prevents {f.prevents} of the {f.diverging_with_all} divergences"
        )
    if f.sole:
        parts.append(f"it alone is established to cause {len(f.sole)} item(s): {', '.join(f.sole)}")
    return f"{f.factor}: " + ("; ".join(parts) if parts else "not run alone or removed") + "."


def cause(i: CauseRow) -> str:
    sets = " or ".join(factor_set(s) for s in i.smallest)
    if i.established:
        together = any(len(s) > 1 for s in i.smallest)
        return f"{sets} ({'needs them together; ' if together else ''}settled)"
    return f"{sets} at most (upper bound; not run: {'; '.join(factor_set(s) for s in i.untried)})"


def _item(i: CauseRow) -> tuple[Cell, ...]:
    return (
        cell(code(i.item_id)),
        cell(", ".join(i.diverges_under)),
        cell(cause(i)),
        cell(", ".join(i.masked) or "—"),
    )


def _notes(a: FactorTable) -> tuple[Item, ...]:
    notes = []
    for factors, items in a.interactions:
        only = (
            f" {len(items)} item(s) diverge only with {factor_set(factors)} on together: {', '.join(items)}."
        )
        notes.append(Item(spans(strong("Interaction:"), only)))
    if not notes:
        notes.append(Item(spans("No divergence was established to need two factors together.")))
    notes += [
        Item(spans(strong("Not run:"), f" the combination {factor_set(s)} has no record here."))
        for s in a.missing
    ]
    return tuple(notes)
