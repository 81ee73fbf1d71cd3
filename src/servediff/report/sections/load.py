"""Under load: what each step of concurrency buys in throughput and costs in determinism, per
load sweep: a table of its levels and, in HTML, one figure of every sweep.

    servediff experiment examples/llama-server-gpu.toml      # OUT/report.md, "Under load"

Every number is a field of ``compare.concurrency.LoadSweep`` (the hazard per 1,000 tokens included).
"""

from __future__ import annotations

from servediff.compare.concurrency import LoadLevel, LoadSweep
from servediff.report import figures, fmt
from servediff.report.document import Block, Cell, Figure, Heading, Paragraph, Table, cell, code, spans
from servediff.report.model import Report

HEADER = (
    "concurrency",
    "repeats",
    "items",
    "items with >1 distinct output (max)",
    "identical to the base",
    "divergences per 1,000 tokens (95 % CI)",
    "mechanism (in-run logprobs)",
    "median gap at divergence",
    "output tokens/s [95 % CI]",
    "step",
    "latency p50 / p90 / p99",
    "accuracy (first repeat)",
)
PLOT = (
    "Each level of each load sweep: output tokens/s (x) against divergences per 1,000 tokens from the "
    "sweep's base run (y), both with 95 % intervals; each point is labelled with its concurrency."
)


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.load:
        return ()
    out: list[Block] = [
        Heading(2, spans("Under load: throughput against determinism"), "load"),
        Figure("load", figures.later(figures.load_svg, r.load), PLOT),
    ]
    for s in r.load:
        out += [Heading(3, spans(code(s.label), f" on {s.suite}")), Paragraph(spans(intro(s)))]
        out.append(Table(HEADER, tuple(_level(x) for x in s.levels)))
        if s.quality is not None:
            out.append(Paragraph(spans(quality(s))))
    return tuple(out)


def intro(s: LoadSweep) -> str:
    return (
        f"Every level of {s.label} on {s.suite} against one base run, {s.base} (at the base level, its "
        "other repeats are its control). Divergences are classified from the top-k logprobs recorded "
        "during the run itself: a probe at batch 1 cannot replay the batch that chose the token. "
        f"Near-tie: both sides rank the same two tokens on top and the base's gap is below "
        f"{s.threshold:g} nat. The step is a level's output tokens/s over the level before it."
    )


def _level(x: LoadLevel) -> tuple[Cell, ...]:
    return (
        cell(str(x.concurrency)),
        cell(str(x.repeats)),
        cell(str(x.items)),
        cell(f"{x.varied} ({x.distinct_max})"),
        cell(fmt.ratio(x.identical, x.compared) if x.compared else "n/a"),
        cell(_hazard(x)),
        cell(", ".join(f"{cls} {n}" for cls, n in x.mechanism) or "—"),
        cell(fmt.nats(x.gap_median)),
        cell(_throughput(x)),
        cell("—" if x.step is None else f"{x.step:.2f}×"),
        cell(" / ".join(fmt.seconds(t.value) for t in x.latency) or "n/a"),
        cell(_accuracy(x)),
    )


def _hazard(x: LoadLevel) -> str:
    h = x.hazard
    if h is None:
        return "n/a"
    if h.upper_bound_only:
        return f"0 (≤ {fmt.rate(h.high_1000)})"
    return f"{fmt.rate(h.rate_1000)} ({fmt.rate(h.low_1000)}–{fmt.rate(h.high_1000)})"


def _throughput(x: LoadLevel) -> str:
    t = x.tokens_per_s
    return "n/a" if t is None else f"{fmt.per_s(t.value)} [{fmt.per_s(t.low)}, {fmt.per_s(t.high)}]"


def _accuracy(x: LoadLevel) -> str:
    a = x.accuracy
    return "not scored" if a is None else f"{fmt.ratio(a.correct, a.n)} ({fmt.pp(a.accuracy)} %)"


def quality(s: LoadSweep) -> str:
    """The paired sentence: the highest level against the base, item by item."""
    q = s.quality
    assert q is not None
    t = q.table
    return (
        f"Accuracy under load: {q.b} against {q.a} on the same {t.n} items: Δ = {fmt.spp(t.delta)} pp, "
        f"95 % CI [{fmt.spp(q.delta_ci.low)}, {fmt.spp(q.delta_ci.high)}]; McNemar p = "
        f"{fmt.pvalue(q.p_mcnemar)} (right only at the base: {t.b}, right only under load: {t.c}); "
        f"the same extracted answer on {q.same_answer}/{t.n}, byte-identical on {q.identical}/{t.n}."
    )
