"""Does the configuration change the output: every control and pair, identical items over the
items compared; then where the completions part (survival, gaps, agreement), as plots in HTML.

    servediff compare runs/*.jsonl --html report.html
"""

from __future__ import annotations

from servediff.compare.comparison import Comparison
from servediff.report import figures, fmt
from servediff.report.document import Block, Cell, Figure, Heading, Paragraph, Table, cell, code, spans
from servediff.report.model import Report
from servediff.report.sections.why import unplaced

HEADER = ("suite", "A", "B", "kind", "identical", "errors left out")
SURVIVAL = (
    "Share of items whose completions are still identical after x generated tokens, per configuration "
    "pair and suite (Kaplan–Meier; identical items are censored at their length), with the constant-hazard "
    "fit exp(−λx) and its exact Poisson 95 % band, each drawn only as far as that pair's longest completion."
)
MATRIX = (
    "Share of byte-identical completions for every pair of configurations; the diagonal is the control "
    "(a configuration against its own repeat), blank where there was none."
)
NO_GAPS = (
    "No gap histogram: no divergence has logprobs recorded or probed at the first differing token "
    "(run with --top-logprobs 5, or servediff probe)."
)


def blocks(r: Report) -> tuple[Block, ...]:
    rows = tuple(
        (
            cell(c.suite),
            cell(code(c.a), f" #{c.a_repeat}"),
            cell(code(c.b), f" #{c.b_repeat}"),
            cell(c.kind),
            cell(fmt.ratio(c.identical, c.total)),
            cell(str(c.errors)),
        )
        for c in r.comparisons
    )
    return (Heading(2, spans("Does the configuration change the output?"), "identity"), Table(HEADER, rows))


def parts(r: Report) -> tuple[Block, ...]:
    """Where and how the completions part: the survival curves with their hazard table, the gap
    histogram and the agreement matrices."""
    out: list[Block] = [Heading(2, spans("Where and how the completions part"), "plots")]
    curves = [c for c in r.pairs if c.times]
    if curves:
        out.append(Figure("survival", figures.later(figures.survival_svg, curves), SURVIVAL))
        lasts = {c.hazard.horizons[-1].length for c in curves if c.hazard}
        # P(divergence) only up to the longest completion each pair compared: one length for the
        # column where they agree, else each cell names its own.
        named = len(lasts) > 1
        length = (
            "an L-token completion (L: the longest compared)"
            if named
            else f"a {max(lasts, default=300)}-token completion"
        )
        header: tuple[str, ...] = (
            "pair",
            "items",
            "divergences",
            "tokens at risk",
            "hazard per 1,000 tokens [95 % CI]",
        )
        header += (f"P({length} diverges)", "left out (no token data)")
        out.append(Table(header, tuple(_curve(c, named) for c in curves)))
    elif not any(c.unlocated for c in r.pairs):  # else the paragraphs below say why
        out.append(Paragraph(spans("No survival curve: no pair of configurations has token data."), "muted"))
    out += [
        Paragraph(
            spans(
                "No hazard or survival curve for ",
                code(c.a),
                " vs ",
                code(c.b),
                f" ({c.suite}): ",
                unplaced(c),
            ),
            "muted",
        )
        for c in r.pairs
        if c.unlocated
    ]
    if r.gapped:
        caption = (
            f"A's top-1 − top-2 logprob gap at the first differing token, by class ({r.gapped} divergences "
            f"with logprobs; threshold {r.near_tie} nats). Where each number comes from is given with its "
            "divergence below."
        )
        out.append(Figure("gaps", figures.later(figures.gap_histogram_svg, r.pairs, r.near_tie), caption))
    else:
        out.append(Paragraph(spans(NO_GAPS), "muted"))
    out += [
        Figure(f"matrix-{m.suite}", figures.later(figures.agreement_matrix_svg, m), MATRIX)
        for m in r.matrices
    ]
    return tuple(out)


def _curve(c: Comparison, named: bool) -> tuple[Cell, ...]:
    """One pair's row; ``named``: the pairs reached different lengths, each cell says its L."""
    h = c.hazard
    if h is None:
        rate = risk = "n/a"
    elif h.upper_bound_only:
        rate = f"< {fmt.rate(h.high_1000)} (no divergence; one-sided 95 %)"
        risk = f"< {fmt.prob(h.horizons[-1].high)}"
    else:
        last = h.horizons[-1]
        rate = f"{fmt.rate(h.per_1000)} [{fmt.rate(h.low_1000)}, {fmt.rate(h.high_1000)}]"
        risk = f"{fmt.prob(last.p)} ({fmt.prob(last.low)}–{fmt.prob(last.high)})"
    if h is not None and named:
        risk = f"L={h.horizons[-1].length}: {risk}"
    return (
        cell(code(c.a), " vs ", code(c.b), f" ({c.suite})"),
        cell(str(len(c.times))),
        cell(str(h.events if h else 0)),
        cell(fmt.count(h.exposure) if h else "0"),
        cell(rate),
        cell(risk),
        cell(str(c.no_token_data)),
    )
