"""Sampled generation: pass rates over k draws per item, the paired Δ pass rate, coupled
identity, where coupled draws first differ, and the items × draws a verdict needs.

    servediff experiment examples/embedded-sampled.toml

Every number is a field of ``compare.sampled.Sampled`` (quartiles and within-t shares included).
"""

from __future__ import annotations

from servediff.compare.sampled import PassRates, Sampled, SampledPair
from servediff.report import figures, fmt, wording
from servediff.report.document import (
    Block,
    Bullets,
    Cell,
    Figure,
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

RATES = (
    "suite",
    "configuration",
    "k",
    "draws scored",
    "pass rate (95 % CI)",
    "pass@k",
    "pass^k",
    "items short of k",
)
PAIRS = (
    "suite",
    "A",
    "B",
    "kind",
    "coupled identity",
    "Δ pass rate, B − A (95 % CI, paired over items)",
    "items",
    "verdict",
)
SIZES = (
    "suite",
    "A",
    "B",
    "k (draws per item)",
    "paired: items (draws per configuration)",
    "unpaired: items per configuration (draws)",
)
PLOT = (
    "Share of coupled draws (same seed) whose texts have diverged within the first x generated tokens, "
    "per pair of runs; the control is the same configuration twice."
)


def blocks(r: Report) -> tuple[Block, ...]:
    sv = r.sampled
    if sv is None:
        return ()
    out: list[Block] = [
        Heading(2, spans("Sampled generation: pass rates over draws"), "sampled"),
        Paragraph(spans(wording.sampled_intro(sv))),
    ]
    if sv.rates:
        out.append(Table(RATES, tuple(_rate(a) for a in sv.rates)))
    if sv.pairs:
        out.append(Table(PAIRS, tuple(_pair(p) for p in sv.pairs)))
    out += _first(sv)
    out += _sizes(sv)
    return tuple(out)


def _rate(a: PassRates) -> tuple[Cell, ...]:
    return (
        cell(a.suite),
        cell(code(a.label), f" #{a.repeat}"),
        cell(str(a.k)),
        cell(str(a.draws)),
        cell(strong(fmt.estimate(a.pass_rate)), f" ({a.pass_rate.n} items)"),
        cell(fmt.estimate(a.pass_at_k)),
        cell(fmt.estimate(a.pass_all_k)),
        cell(str(a.short)),
    )


def _pair(p: SampledPair) -> tuple[Cell, ...]:
    return (
        *_names(p),
        cell(p.kind),
        cell(wording.coupled_identity(p)),
        cell(fmt.sestimate(p.delta)),
        cell(str(p.delta.n) if p.delta else "not scored"),
        cell(p.verdict or "n/a"),
    )


def _names(p: SampledPair) -> tuple[Cell, Cell, Cell]:
    return cell(p.suite), cell(code(p.a)), cell(code(p.b))


def _first(sv: Sampled) -> list[Block]:
    coupled = [p for p in sv.pairs if p.first]
    if not coupled:
        return []
    by_tokens = [t for t, _ in coupled[0].first.within] if coupled[0].first else []
    header: tuple[str, ...] = (
        "suite",
        "A",
        "B",
        "kind",
        "diverged / draws",
        "first differing token: median [quartiles]",
    )
    header += tuple(f"within {t} token{'s' if t > 1 else ''}" for t in by_tokens)
    rows = []
    for p in coupled:
        f = p.first
        assert f is not None
        shares = tuple(cell("n/a" if x is None else f"{fmt.pp(x)} %") for _, x in f.within)
        rows.append(
            (
                *_names(p),
                cell(p.kind),
                cell(f"{f.diverged}/{f.compared}"),
                cell(wording.first_divergence_spread(f)),
                *shares,
            )
        )
    out: list[Block] = [Paragraph(spans(wording.first_divergence_intro())), Table(header, tuple(rows))]
    if any(p.first and p.first.positions for p in coupled):
        out.append(Figure("sampled-divergence", figures.later(figures.first_divergence_svg, coupled), PLOT))
    return out


def _sizes(sv: Sampled) -> list[Block]:
    sized = [p for p in sv.pairs if p.sizing]
    if not sized:
        return []
    rows = tuple(
        (
            *_names(p),
            cell(str(d.k)),
            cell(wording.items_count(d.paired, d.paired_draws)),
            cell(wording.items_count(d.unpaired, d.unpaired_draws)),
        )
        for p in sized
        if p.sizing
        for d in p.sizing.sizes
    )
    notes = tuple(
        Item(spans(code(p.b), " vs ", code(p.a), f" ({p.suite}): {wording.sizing_parts(p.sizing)}"))
        for p in sized
        if p.sizing
    )
    return [Paragraph(spans(wording.sizing_intro(sv))), Table(SIZES, rows), Bullets(notes)]
