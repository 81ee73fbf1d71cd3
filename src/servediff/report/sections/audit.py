"""The audit as a document tree: the verdict line, then each side's evidence (the promise, the
negative control), laid out by the report's Markdown and HTML backends.

    servediff audit --base-url URL --control-url URL --junit audit.xml --md audit.md

Everything here is worded from ``compare.audit.AuditAnalysis``; nothing is computed. The audit is
its own page, not a part of a comparison's report, so ``blocks`` takes the audit's analysis.
"""

from __future__ import annotations

from servediff.compare.audit import AuditAnalysis, Divergence, Level, LevelCost, Side
from servediff.compare.stats.binomial import Bound, Ratio
from servediff.report.document import Block, Bullets, Cell, Heading, Item, Paragraph, Table, cell, spans

LEVELS = (
    "workload",
    "concurrency",
    "trials",
    "diverged",
    "needle trials",
    "needle diverged",
    "logprobs differ",
    "tokens/s, rounds",
)
COSTS_NOTE = (
    "The promise's throughput against the control's at each concurrency (every workload's timing "
    "rounds pooled; geometric means, Welch's interval on log throughput):"
)
COSTS = ("concurrency", "promise tokens/s", "control tokens/s", "promise ÷ control", "rounds")
LISTED = 10  # divergences listed per side; the records hold the rest


def pct(x: float) -> str:
    return f"{100 * x:.2g} %" if x < 0.01 else f"{100 * x:.1f} %"


def bound_text(b: Bound | None) -> str:
    if b is None:
        return "no trials"
    conf = f"{100 * b.confidence:g} %"
    if b.k == 0:
        rate = f"divergence rate ≤ {pct(b.high)} (one-sided {conf}, exact binomial)"
        return f"no divergence in {b.n} trials: {rate}"
    return f"{b.k} of {b.n} trials diverged ({pct(b.rate)}; rate ≤ {pct(b.high)}, one-sided {conf})"


def cost_text(a: AuditAnalysis) -> str:
    r: Ratio | None = a.cost
    if r is None:
        return "throughput cost: not measured (needs two timing rounds on both sides at one level)"
    return (
        f"throughput with the promise {r.ratio:.2f}× the control's at concurrency {a.cost_level} "
        f"({100 * r.confidence:g} % CI {r.low:.2f}–{r.high:.2f}×, {r.rounds_a} vs {r.rounds_b} rounds)"
    )


def divergence_text(d: Divergence) -> str:
    g = d.agreement
    unit = "byte" if g.basis == "text bytes" else "token"
    where = f"{unit} {g.first_diff}"
    tokens = f", {g.ref_token!r} alone vs {g.trial_token!r}" if g.ref_token is not None else ""
    gap = f", logprob gap {g.gap:.4f} nats" if g.gap is not None else ""
    drift = f", largest logprob drift before it {g.max_logprob_diff:.3g}" if g.max_logprob_diff else ""
    needle = " (needle)" if d.needle else ""
    trial = f"trial {d.item} at concurrency {d.level}, prompt {d.prompt}{needle}"
    return f"{trial}: first differs at {where}{tokens}{gap}{drift}"


def verdict_line(a: AuditAnalysis) -> str:
    p = a.promise
    head = f"{a.verdict.upper()}: {p.label}: {bound_text(p.bound)}"
    if a.verdict == "fail" and p.divergences:
        head += f"; first: {divergence_text(p.divergences[0])}"
    if a.control is None:
        head += "; negative control not run"
    else:
        head += f"; negative control {a.control.label}: {a.control.divergent} of {a.control.trials} diverged"
        head += f"; {cost_text(a)}"
    # pass and fail say it all above; the other verdicts say why nothing was decided
    return f"{head}." if a.verdict in ("pass", "fail") else f"{head}. {a.reason}."


def blocks(a: AuditAnalysis) -> tuple[Block, ...]:
    out: list[Block] = [Heading(1, spans("servediff audit")), Paragraph(spans(verdict_line(a)))]
    if len(a.costs) > 1:  # one level: the verdict line said it all
        out += [
            Paragraph(spans(COSTS_NOTE)),
            Table(COSTS, tuple(_cost_row(c) for c in a.costs)),
        ]
    out += _side(a.promise)
    if a.control is not None:
        out += _side(a.control)
    records = a.promise.records + (a.control.records if a.control else ())
    return (*out, Paragraph(spans("Records: " + ", ".join(records))))


def _cost_row(c: LevelCost) -> tuple[Cell, ...]:
    r = c.ratio
    ratio = f"{r.ratio:.2f}× [{r.low:.2f}, {r.high:.2f}]" if r is not None else "— (one round)"
    rounds = f"{r.rounds_a} vs {r.rounds_b}" if r is not None else "—"
    speeds = (f"{c.promise_tokens_per_s:,.0f}", f"{c.control_tokens_per_s:,.0f}")
    return (cell(str(c.level)), *(cell(x) for x in speeds), cell(ratio), cell(rounds))


def _level(x: Level) -> tuple[Cell, ...]:
    rates = ", ".join(f"{r:.1f}" for r in x.tokens_per_s) or "—"
    level = "1 (alone, repeat)" if x.level == 1 else str(x.level)
    counts = (x.trials, x.divergent, x.needle_trials, x.needle_divergent, x.logprobs_differ)
    return (cell(x.workload), cell(level), *(cell(str(n)) for n in counts), cell(rates))


def _side(s: Side) -> list[Block]:
    lp = (
        f"logprobs bit-equal in {s.logprob_bit_equal} of {s.logprob_trials} identical trials"
        + (f", largest difference {s.max_logprob_diff:.3g} nats" if s.max_logprob_diff is not None else "")
        if s.logprob_trials
        else "no logprobs to compare"
    )
    basis = ", ".join(s.basis) or "—"
    several = len({w for w, _, _, _ in s.per_prompt}) > 1
    shown = ", ".join(f"{f'{w}/' if several else ''}{k} {d} of {n}" for w, k, n, d in s.per_prompt)
    out: list[Block] = [
        Heading(3, spans(f"{s.role}: {s.label}")),
        Paragraph(spans(f"{bound_text(s.bound)}.")),
        Table(LEVELS, tuple(_level(x) for x in s.levels)),
        Paragraph(
            spans(
                f"Compared by {basis}; most distinct outputs of one prompt: {s.distinct_max}; {lp}; "
                f"{s.errors} errored request(s)."
            )
        ),
        Paragraph(spans(f"Distinct outputs per prompt: {shown}.")),
    ]
    if s.logprobs_differ_per_prompt:
        moved = ", ".join(
            f"{f'{w}/' if several else ''}{k} {d} of {n}" for w, k, d, n in s.logprobs_differ_per_prompt
        )
        out.append(
            Paragraph(spans(f"Identical trials whose logprobs were not bit-equal, per prompt: {moved}."))
        )
    items = [Item(spans(divergence_text(d))) for d in s.divergences[:LISTED]]
    if len(s.divergences) > LISTED:
        items.append(Item(spans(f"… and {len(s.divergences) - LISTED} more (in the records)")))
    return [*out, Bullets(tuple(items))] if items else out
