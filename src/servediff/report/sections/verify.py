"""``servediff verify`` as a document tree: the verdict line, the signals used, the plan and the
evidence of a shift, laid out by the report's Markdown and HTML backends.

    servediff verify --reference ref1.jsonl ref2.jsonl --base-url URL --md verify.md

Everything here is worded from ``compare.verify_result.VerifyResult`` (the file ``--out``
writes); nothing is computed. ``blocks`` lays out one result (``servediff verify --md``, a page of
its own, as the audit's); ``section`` lays out those a report was given
(``servediff report runs/*.jsonl --verify verify.json``), registered in ``sections``.
"""

from __future__ import annotations

from servediff.compare.verify_result import Evidence, Plan, Signal, VerifyResult
from servediff.report import fmt
from servediff.report.document import Block, Bullets, Cell, Heading, Item, Paragraph, Table, Tone, cell, spans
from servediff.report.model import Report


def section(report: Report) -> tuple[Block, ...]:
    """The verify results given to ``servediff report``, one after another."""
    return tuple(b for r in report.verify for b in blocks(r))


def blocks(r: VerifyResult) -> tuple[Block, ...]:
    out: list[Block] = [
        Heading(2, spans("Is the endpoint serving the reference configuration?"), anchor="verify"),
        Paragraph(spans(r.line), look="note"),
        Paragraph(spans(_setting(r))),
        *(Paragraph(spans(f"Warning: {w}."), look="warn") for w in r.warnings),
        Heading(3, spans("Signals")),
        Bullets(tuple(_signal(s) for s in r.signals)),
        *_evidence(r.evidence),
        Heading(3, spans("Plan (from the reference's calibration alone)")),
        *_plan(r.plan),
    ]
    return tuple(out)


def _setting(r: VerifyResult) -> str:
    if r.answers:
        where = f"the endpoint's answers recorded in {r.answers} (model {r.model}), nothing sent"
    elif r.endpoint:
        where = f"endpoint {r.endpoint} (model {r.model})"
    else:
        where = "no endpoint (plan only)"
    budget = ""
    if r.budget is not None:
        b = r.budget
        budget = (
            f"; {'read' if r.answers else 'sent'} {b.requests_sent} of {b.requests} requests, "
            f"{b.tokens_reserved} of {b.tokens} "
            f"tokens reserved ({b.tokens_generated} generated)"
        )
    return (
        f"Reference {r.reference_label!r} ({', '.join(r.reference_files)}): {r.calibration_pairs} "
        f"calibration pairs; {where}; α {r.alpha:g}, δ {r.delta:g} nat/token, power {r.power:g}"
        f"{budget}."
    )


def _signal(s: Signal) -> Item:
    tone: Tone | None
    if not s.reference:
        state, tone = "unavailable (the reference's runs do not record it)", None
    elif s.endpoint is False:
        state, tone = "unavailable (the endpoint did not give it)", None
    else:
        state, tone = "used" if s.endpoint else "available", "good"
    note = f" — {s.note}" if s.note else ""
    role = "" if s.tested else " (evidence only, not tested)"
    return Item(spans(f"{s.statistic}: {s.what}: {state}{role}{note}"), tone=tone)


def _evidence(e: Evidence | None) -> list[Block]:
    if e is None:
        return []
    rows = (
        ("requests tested", str(e.requests)),
        ("identical greedy texts", fmt.ratio(e.identical, e.requests)),
        ("prompt token counts that differ", fmt.ratio(e.prompt_mismatches, e.prompt_compared)),
        (
            "median first divergence (tokens)",
            "—" if e.first_divergence_median is None else f"{e.first_divergence_median:g}",
        ),
        ("tokens compared (shared prefix)", str(e.tokens_compared)),
        ("mean shift d, first tokens (nats)", fmt.signed(e.shift_early)),
        ("mean shift d, later tokens (nats)", fmt.signed(e.shift_late)),
        ("mean shift d, all (≈ per-token KL)", fmt.signed(e.shift_mean)),
        ("mean |d| (nats)", fmt.nats(e.distance_mean)),
        ("the shift looks like", e.shape or "—"),
    )
    table = Table(("evidence", "value"), tuple((cell(a), cell(b)) for a, b in rows))
    return [Heading(3, spans("Evidence")), table]


def _plan(p: Plan) -> list[Block]:
    rows: list[tuple[Cell, ...]] = []
    for row in p.rows:
        rows.append(
            (
                cell(f"{row.delta:g}"),
                cell("—" if row.requests is None else str(row.requests)),
                cell("—" if row.tokens is None else str(row.tokens)),
                cell(f"{row.rejected_at_horizon:.1%}"),
            )
        )
    note = (
        f"{p.runs} simulated audits per row, up to {p.horizon} requests each, at α {p.alpha:g}; "
        f"false alarms with no shift: {p.false_alarms:.1%} (each audit sending the "
        f"{p.false_alarm_requests} held-out items once); "
        f"{p.tokens_per_request:.0f} tokens per request on average. — : power {p.power:g} not "
        f"reached within {p.horizon} requests."
    )
    header = ("δ (nat/token)", f"requests for power {p.power:g}", "tokens", f"detected within {p.horizon}")
    return [Table(header, tuple(rows)), Paragraph(spans(note))]
