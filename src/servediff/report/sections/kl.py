"""Teacher-forced divergence (KL) of scoring runs: per pair of runs, the mean, the tail and the
predicted flip rate, with the per-position distribution as a plot.

    servediff report runs/score-*.jsonl --md report.md --html report.html

Every number is a field of ``compare.kl_runs.KlRow``.
"""

from __future__ import annotations

from servediff.compare.kl_runs import KlRow
from servediff.report import figures, fmt
from servediff.report.document import Block, Cell, Figure, Heading, Paragraph, Table, cell, code, spans
from servediff.report.model import Report

INTRO = (
    "Both configurations scored the same fixed token sequences (teacher forcing: nothing "
    "generated); at every position KL(A‖B) is taken over the tokens in both top-k lists, the "
    "rest of each side's probability pooled into one tail bucket, which makes it a lower bound "
    "of the full-vocabulary KL. Same top-1 = share of positions where both argmaxes agree; on "
    "an on-policy corpus (the control's own completions) 1 − same top-1 is the predicted flip "
    "rate of greedy decoding. Δp = p_B − p_A of the text's next token; ln(PPL_B/PPL_A) over "
    "all positions. Intervals are 95 % percentile bootstraps over sequences (seeded), not over "
    "tokens: the positions of one sequence are correlated. A control row (a configuration "
    "against its own repeat) is the noise floor."
)
PLOT = (
    "Per-position KL(A‖B) of each pair of scoring runs (top-k + tail, a lower bound of the "
    "full-vocabulary KL): share of positions per log-spaced bin; dashed: the median, dotted: the "
    "99th percentile. The first bin holds every smaller value, 0 included. All percentiles are in "
    "the table below."
)
HEADER = (
    "suite",
    "A",
    "B",
    "kind",
    "checkpoints (A / B)",
    "top-k",
    "sequences (positions)",
    "mean KLD [95 % CI]",
    "max KLD",
    "KLD p99.9 / p99 / p95 / p90 / p50 / p10 / p5 / p1 / p0.1",
    "same top-1 % [95 % CI]",
    "predicted flip rate %",
    "Δp mean [95 % CI]",
    "Δp RMS",
    "ln(PPL_B/PPL_A) [95 % CI]",
)


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.kl:
        return ()
    return (
        Heading(2, spans("Teacher-forced divergence (KL)"), "kl"),
        Paragraph(spans(INTRO)),
        Figure("kl-distribution", figures.later(figures.kl_distribution_svg, r.kl), PLOT),
        Table(HEADER, tuple(_row(k) for k in r.kl)),
    )


def _row(k: KlRow) -> tuple[Cell, ...]:
    return (
        cell(k.suite),
        cell(code(k.a)),
        cell(code(k.b)),
        cell(k.kind),
        cell(code(k.checkpoint_a), " / ", code(k.checkpoint_b)),
        cell(str(k.top_k)),
        cell(f"{k.sequences} ({fmt.count(k.positions)})"),
        cell(fmt.interval(k.kl_mean, fmt.kld)),
        cell(fmt.kld(k.kl_max)),
        cell(" / ".join(fmt.kld(v) for _, v in k.kl_percentiles)),
        cell(fmt.interval(k.same_top1, fmt.pp)),
        cell(fmt.pp(k.predicted_flip_rate)),
        cell(fmt.interval(k.dp_mean, fmt.kld)),
        cell(fmt.kld(k.dp_rms)),
        cell(fmt.interval(k.ln_ppl_ratio, fmt.kld)),
    )
