"""Why the text diverges, measured: per comparison, the class of each divergence (near-tie flip,
rank change, unexplained, or not measured where no top-k was recorded or probed), the gaps, the
drift on the shared prefix, the hazard per token, how far a probe is from the run, the logits'
precision.

    servediff compare runs/*.jsonl --md report.md --html report.html

Every number is a field of ``report.model.Comparison``; this module only words it.
"""

from __future__ import annotations

from servediff.compare.comparison import Comparison, DivergenceView, Side, TopK
from servediff.compare.precision import Precision
from servediff.compare.stats.hazard import HORIZONS
from servediff.report import fmt, wording
from servediff.report.document import (
    Block,
    Bullets,
    Cell,
    Heading,
    Item,
    Paragraph,
    Spans,
    Table,
    cell,
    code,
    spans,
    strong,
    token,
)
from servediff.report.model import Report
from servediff.report.sections.divergences import ROWS

HEADER = (
    "item",
    "token",
    "A top-2",
    "B top-2",
    "gap A",
    "gap B",
    "shift A tok / B tok",
    "class",
    "A from",
    "B from",
)
INTRO = (
    "At each divergence: both configurations' top-2 next tokens after prompt + common prefix, the "
    "top-1 − top-2 gap (nats), and the shift of A's and B's tokens' logprobs from A to B. \"run\": "
    'logprobs recorded during the run (the logits that chose the token); "probe": asked afterwards '
    "(servediff probe), an estimate whose method is listed."
)
SAMPLED = (
    "sampled runs: a draw, not an argmax, chose each token, so the greedy classes do not apply; see "
    "where coupled draws first differ"
)


def blocks(r: Report) -> tuple[Block, ...]:
    out: list[Block] = [
        Heading(2, spans("Why the text diverges — measured"), "measured"),
        Paragraph(spans(INTRO)),
    ]
    for c in r.comparisons:
        out += _comparison(c)
    return tuple(out)


def _comparison(c: Comparison) -> list[Block]:
    out: list[Block] = [
        Heading(3, spans(code(c.a), " vs ", code(c.b), f" ({c.suite}, {c.kind})")),
        Bullets(tuple(Item(x) for x in _facts(c))),
    ]
    if c.divergences:
        out.append(Table(HEADER, tuple(_row(d) for d in c.divergences[:ROWS])))
        if len(c.divergences) > ROWS:
            total = fmt.count(len(c.divergences))
            out.append(
                Paragraph(
                    spans(f"The first {fmt.count(ROWS)} rows; the counts above are over all {total}."),
                    "muted",
                )
            )
        out += [
            Paragraph(spans(f"[{n}] {source} — an estimate: not the run's own computation."), "muted")
            for n, source in enumerate(c.probe_sources, start=1)
        ]
    return out


def _facts(c: Comparison) -> list[Spans]:
    out: list[Spans] = []
    if c.divergences:
        gaps = ""
        if c.gap_median is not None:
            median, most = fmt.nats(c.gap_median), fmt.nats(c.gap_max)
            gaps = f"; A's top-2 gap at the divergence: median {median}, max {most} nats"
        why = f" ({SAMPLED})" if c.sampled else f" (near-tie threshold {c.threshold} nats)"
        head = strong(f"{len(c.divergences)} divergence(s):")
        out.append(spans(head, f" {wording.class_counts(c)}{gaps}{why}."))
    out.append(spans(strong("Drift on the shared prefix:"), f" {drift(c)}"))
    out.append(spans(strong("Hazard:"), f" {hazard(c)}"))
    for p in c.probe_checks:
        diff = "0 nats (bit-identical)" if p.max_gap_diff == 0 else f"{fmt.small(p.max_gap_diff)} nats"
        out.append(
            spans(
                strong("Probe vs run:"),
                " ",
                code(p.label),
                f" at {p.n} divergence(s) with both, the probe's gap differs from the recorded one by at "
                f"most {diff}; its top-1 differs at {p.top1_differs}.",
            )
        )
    if c.divergences:
        out.append(spans(strong("Precision:"), f" {precision(c.precision)}"))
    return out


def _top2(s: Side | None) -> Cell:
    if s is None:
        return cell("—")
    return cell(*_pairs(s.top[:2]))


def _pairs(top: TopK) -> Spans:
    out: list[Spans] = [spans(token(t), f" {fmt.logprob(v)}") for t, v in top]
    return tuple(x for n, pair in enumerate(out) for x in (spans(", ") if n else ()) + pair)


def _row(d: DivergenceView) -> tuple[Cell, ...]:
    shift = f"{fmt.signed(d.shift_a)} / {fmt.signed(d.shift_b)}"
    if d.shift_a is None and d.shift_b is None:
        shift = "—"
    return (
        cell(code(d.item_id)),
        cell("n/a" if d.token_index is None else str(d.token_index)),
        _top2(d.a),
        _top2(d.b),
        cell(fmt.gap(d.a)),
        cell(fmt.gap(d.b)),
        cell(shift),
        cell(f"{d.cls} ({d.note})" if d.note else d.cls),
        cell(d.a.cite if d.a else "none"),
        cell(d.b.cite if d.b else "none"),
    )


def drift(c: Comparison) -> str:
    d = c.drift
    if d is None:
        return "not measured (needs logprobs recorded in both runs)."
    return (
        f"|Δ logprob| of the chosen token between {c.a} and {c.b} over "
        f"{fmt.count(d.n)} shared tokens: median {fmt.small(d.median)}, p99 {fmt.small(d.p99)}, max "
        f"{fmt.small(d.max)} nats."
    )


def hazard(c: Comparison) -> str:
    h = c.hazard
    if c.unlocated:
        return f"not given: {unplaced(c)}"
    if h is None:
        return "no token counts in these records, so no per-token rate."
    if h.upper_bound_only:
        head = (
            f"no divergence in {fmt.count(h.exposure)} tokens: rate < {fmt.rate(h.high_1000)} per 1,000 "
            f"tokens (one-sided {h.confidence:.0%} upper bound)"
        )
        p = ", ".join(f"L={x.length}: < {fmt.prob(x.high)}" for x in h.horizons)
    else:
        head = (
            f"{h.events} divergence(s) in {fmt.count(h.exposure)} tokens at risk: {fmt.rate(h.per_1000)} "
            f"per 1,000 tokens (exact Poisson {h.confidence:.0%} CI "
            f"{fmt.rate(h.low_1000)}–{fmt.rate(h.high_1000)})"
        )
        p = ", ".join(
            f"L={x.length}: {fmt.prob(x.p)} ({fmt.prob(x.low)}–{fmt.prob(x.high)})" for x in h.horizons
        )
    tail = f"; {c.no_token_data} item(s) without token counts left out" if c.no_token_data else ""
    if h.longest is not None and h.longest < HORIZONS[-1]:  # the horizons stop where the data do
        tail += f"; L stops at {fmt.count(h.longest)} tokens, the longest any pair was compared over"
    return f"{head}. P(an L-token completion diverges): {p}{tail}."


def unplaced(c: Comparison) -> str:
    """Why a pair has no hazard and no survival curve although it diverged."""
    return (
        f"{fmt.count(c.unlocated)} of {fmt.count(len(c.divergences))} divergences cannot be "
        "placed at a token (a side's record holds neither token ids nor token texts), and a rate "
        "without them would count the identical items' tokens but not those divergences."
    )


def precision(p: Precision) -> str:
    ties = f"{p.exact_ties} exact top-1/top-2 tie(s) in {fmt.count(p.positions)} recorded positions"
    if p.positions == 0:
        return (
            "no recorded top-k, so the logits' resolution is unknown; with bf16 logits (typical "
            "on GPUs) a 0.1-nat threshold is only 1–3 rounding steps."
        )
    if not p.coarse:
        what = p.dtype or "fine-grained logits (no sign of a coarse grid)"
        return (
            f"{what}; {ties}. Gaps here are exact to far below 0.001 nats, so the threshold is a "
            "real margin. With bf16 logits (typical on GPUs) logprobs sit on a grid of about 1/32–1/8 nat "
            "and a fixed 0.1-nat threshold misclassifies many ties."
        )
    step = f"{p.smallest_step:.3g}" if p.smallest_step else "unknown"
    return (
        f"coarse logits (bf16-like): {ties}; smallest non-zero step {step} nats. Gaps are also "
        "given in these steps: a gap of 0–2 steps is a tie within rounding, whatever the threshold says."
    )
