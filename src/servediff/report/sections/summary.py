"""The Summary: warnings and flags first, then each control, each pair and each scored pair in
one line (the verdict table above it gives one row per configuration).

    servediff compare runs/*.jsonl --md report.md
"""

from __future__ import annotations

from servediff.compare.comparison import Comparison
from servediff.compare.quality import PairQuality
from servediff.report import fmt, wording
from servediff.report.document import Block, Bullets, Heading, Item, Paragraph, Spans, code, spans, strong
from servediff.report.model import Claim, Report

AT_MOST = 50  # divergence positions listed in a pair's summary line


def blocks(r: Report) -> tuple[Block, ...]:
    out: list[Block] = [Heading(2, spans("Summary"), "summary")]
    out += [Paragraph(spans(strong("Warning:"), f" {w}"), "warn") for w in r.warnings]
    out += [Paragraph(_flag(c), "warn") for c in r.flagged]
    items = [Item(_control(c)) for c in r.controls]
    if r.uncontrolled:
        items.append(Item(spans(wording.no_control())))
    items += [Item(_pair(c)) for c in r.pairs]
    items += [Item(_scored(q)) for q in (r.quality.pairs if r.quality else ()) if q.kind == "pair"]
    if r.errors_left_out:
        items.append(Item(spans(_left_out(r.errors_left_out, r.missing_left_out))))
    if items:
        out.append(Bullets(tuple(items)))
    return tuple(out)


def _left_out(total: int, missing: int) -> str:
    """Why item comparisons were left out: an engine error is not a run that stopped early."""
    errors = total - missing
    if not missing:
        return f"{total} item comparison(s) left out because a run recorded an engine error."
    why = f"{missing} not yet answered by one run (it stopped before them: run it again to finish)"
    if errors:
        why += f", {errors} because a run recorded an engine error"
    return f"{total} item comparison(s) left out: {why}."


def _flag(c: Claim) -> Spans:
    claim = (c.claim or "").replace("_", " ")
    return spans(
        strong("Flag:"),
        " ",
        code(c.label),
        f" claims {claim} — ",
        strong(c.status),
        f" ({c.suite} #{c.repeat}: {c.detail}); {wording.flag_note(c.status)}",
    )


def _control(c: Comparison) -> Spans:
    shown = strong(fmt.ratio(c.identical, c.total))
    if c.sampled:
        rest = f" samples identical{wording.not_reproduced(c)} — {c.verdict}."
        return spans("Control ", code(c.a), f" ({c.suite}): per-request seeds reproduce: ", shown, rest)
    return spans("Control ", code(c.a), f" ({c.suite}): ", shown, f" identical across repeats — {c.verdict}.")


def _pair(c: Comparison) -> Spans:
    head = spans(code(c.a), " vs ", code(c.b), f" ({c.suite}): ", strong(fmt.ratio(c.identical, c.total)))
    if not c.divergences:
        return (*head, *spans(" byte-identical."))
    # A summary line, not a table: past AT_MOST positions (shadow traffic has 100,000s) it says so.
    at = ", ".join(str(d.char_index) for d in c.divergences[:AT_MOST])
    more = f" and {len(c.divergences) - AT_MOST:,} more" if len(c.divergences) > AT_MOST else ""
    counts = wording.class_counts(c)
    tail = f" byte-identical; divergences: {counts}; first differences at characters {at}{more}."
    return (*head, *spans(tail))


def _scored(q: PairQuality) -> Spans:
    t = q.table
    return spans(
        f"{q.suite}: {t.changed} of {t.n} scored items changed correctness between ",
        code(q.a),
        " and ",
        code(q.b),
        f" ({t.b} right only under ",
        code(q.a),
        f", {t.c} only under ",
        code(q.b),
        f"; exact McNemar p = {fmt.pvalue(q.p_mcnemar)}); Δ {fmt.spp(t.delta)} pp "
        f"[{fmt.spp(q.delta_ci.low)}, {fmt.spp(q.delta_ci.high)}]: ",
        strong(q.verdict),
        f" at a {fmt.pp(q.margin)} pp margin.",
    )
