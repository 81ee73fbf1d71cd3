"""Quality: accuracy of each scored run with its intervals (Wilson, CLT, clustered by subject),
each pair's paired 2×2 test (McNemar, Newcombe's Δ, non-inferiority, items needed) and every
scored item that changed correctness, with the HTML's accuracy and per-subject plots.

    servediff compare runs/mmlu-*.jsonl --md report.md --html report.html --margin 0.01

Every number is a field of ``compare.quality.Quality`` (or a property of its dataclasses).
"""

from __future__ import annotations

from servediff.compare.quality import Accuracy, Changed, PairQuality, Quality
from servediff.report import figures, fmt
from servediff.report.document import (
    Block,
    Bullets,
    Cell,
    Figure,
    Heading,
    Item,
    Paragraph,
    Spans,
    Table,
    Tone,
    cell,
    code,
    spans,
    strong,
)
from servediff.report.model import Report
from servediff.report.sections.verdicts import QUALITY_TONE

INTRO = (
    "Accuracy per configuration. Errored (or not yet run) items are excluded and counted, never scored "
    "wrong; a reply with no extractable answer is scored wrong and counted."
)
CHANCE = (
    "this model cannot answer these questions, so the comparison exercises the paired machinery rather "
    "than measuring a quality difference."
)
ACCURACY_PLOT = (
    "Accuracy per configuration run and benchmark; error bars are 95 % Wilson intervals. Errored items "
    "are left out, never counted as wrong."
)
SUBJECT_PLOT = "Per subject: share of items where both configurations extracted the same answer."
ACCURACIES = (
    "suite",
    "configuration",
    "accuracy",
    "95 % CI (Wilson)",
    "± CLT 95 %",
    "± clustered 95 %",
    "errored or missing (excluded)",
    "no answer",
)
PAIRS = (
    "suite",
    "A",
    "B",
    "kind",
    "n",
    "same answer",
    "identical text",
    "b / c",
    "McNemar p",
    "Δ (95 % CI)",
    "verdict",
    "items needed: paired / unpaired",
    "left out",
)
CHANGED = ("suite", "item", "subject", "gold", "A", "A answer", "B", "B answer", "right under")


def blocks(r: Report) -> tuple[Block, ...]:
    q = r.quality
    if q is None:
        return ()
    out: list[Block] = [
        Heading(2, spans("Quality"), "quality"),
        Paragraph(spans(INTRO)),
        Figure("accuracy", figures.later(figures.accuracy_svg, q.accuracies), ACCURACY_PLOT),
        Table(ACCURACIES, tuple(_accuracy(a) for a in q.accuracies)),
    ]
    if q.chance:  # once per configuration and suite, however many of its repeats it holds for
        out.append(Bullets(tuple(_chance(*c) for c in dict.fromkeys(q.chance))))
    if q.pairs:
        out.append(Paragraph(spans(paired_intro(q.margin))))
        out.append(Table(PAIRS, tuple(_pair(p) for p in q.pairs)))
        out.append(Bullets(tuple(Item(pair_sentence(p)) for p in q.pairs)))
    out += [
        Figure(
            f"subjects-{s.suite}-{s.a}-{s.b}", figures.later(figures.subject_agreement_svg, s), SUBJECT_PLOT
        )
        for s in q.subjects
    ]
    return (*out, *_changed(q))


def _accuracy(a: Accuracy) -> tuple[Cell, ...]:
    clustered = (
        "n/a"
        if a.cluster_half_width is None
        else f"±{fmt.pp(a.cluster_half_width)} pp ({a.clusters} subjects)"
    )
    return (
        cell(a.suite),
        cell(code(a.label), f" #{a.repeat}"),
        cell(strong(f"{fmt.pp(a.accuracy)} %"), f" ({a.correct}/{a.n})"),
        cell(f"{fmt.pp(a.ci.low)}–{fmt.pp(a.ci.high)} %"),
        cell(f"±{fmt.pp(a.clt)} pp"),
        cell(clustered),
        cell(str(a.errors)),
        cell(str(a.unanswered)),
    )


def _chance(label: str, suite: str, chance: float) -> Item:
    return Item(
        spans(code(label), f" on {suite} is not distinguishable from chance ({fmt.pp(chance)} %): {CHANCE}")
    )


def paired_intro(margin: float) -> str:
    m = fmt.pp(margin)
    return (
        "Paired comparison on the items scored in both runs. b: A right, B wrong; c: A wrong, B right; "
        "Δ = accuracy(B) − accuracy(A) with Newcombe's paired 95 % CI; verdict: non-inferiority of B at a "
        f"{m} pp margin; items needed to detect δ = {m} pp at 80 % power, α = 0.05."
    )


def _pair(q: PairQuality) -> tuple[Cell, ...]:
    t = q.table
    paired = "n/a (ψ < δ)" if q.n_paired is None else fmt.count(q.n_paired)
    unpaired = "n/a" if q.n_unpaired is None else fmt.count(q.n_unpaired)
    same = f"{q.same_answer}/{t.n} ({fmt.pp(q.same_answer_ci.low)}–{fmt.pp(q.same_answer_ci.high)} %)"
    return (
        cell(q.suite),
        cell(code(q.a), f" #{q.a_repeat}"),
        cell(code(q.b), f" #{q.b_repeat}"),
        cell(q.kind),
        cell(str(t.n)),
        cell(same),
        cell(f"{q.identical}/{t.n}"),
        cell(f"{t.b} / {t.c}"),
        cell(fmt.pvalue(q.p_mcnemar)),
        cell(f"{fmt.spp(t.delta)} pp [{fmt.spp(q.delta_ci.low)}, {fmt.spp(q.delta_ci.high)}]"),
        cell(q.verdict, tone=QUALITY_TONE[q.verdict]),
        cell(f"{paired} / {unpaired}"),
        cell(str(q.errors)),
    )


def pair_sentence(q: PairQuality) -> Spans:
    t, m = q.table, fmt.pp(q.margin)
    text = (
        f" ({q.suite}): Δ = {fmt.spp(t.delta)} pp, 95 % CI [{fmt.spp(q.delta_ci.low)}, "
        f"{fmt.spp(q.delta_ci.high)}]; McNemar p = {fmt.pvalue(q.p_mcnemar)} "
        f"(b = {t.b}, c = {t.c} of {t.n}); at a {m} pp margin: {q.verdict}."
    )
    if q.n_paired is not None and q.n_unpaired is not None:
        text += (
            f" To detect a {m} pp difference with 80 % power at α = 0.05, the paired design needs "
            f"{fmt.count(q.n_paired)} items (observed discordance {fmt.pp(t.discordance)} %), an unpaired "
            f"one {fmt.count(q.n_unpaired)} per configuration."
        )
    elif q.n_unpaired is not None:
        text += (
            f" Only {fmt.pp(t.discordance)} % of items are discordant, fewer than the {m} pp to detect: at "
            "this discordance such a difference cannot occur (an unpaired design would need "
            f"{fmt.count(q.n_unpaired)} items per configuration to look for it)."
        )
    return spans(code(q.a), " vs ", code(q.b), text)


def _changed(q: Quality) -> tuple[Block, ...]:
    head = Heading(3, spans("Every scored item that changed correctness"), "changed")
    if not q.changed:
        none = "None: every item scored under both configurations kept its correctness."
        return head, Paragraph(spans(none))
    return head, Table(CHANGED, tuple(_changed_row(c) for c in q.changed))


def _changed_row(c: Changed) -> tuple[Cell, ...]:
    """The answer that was right is toned good, the wrong one bad (the HTML colours them)."""
    right: Tone = "good"
    wrong: Tone = "bad"
    return (
        cell(c.suite),
        cell(code(c.item_id)),
        cell(c.subject or ""),
        cell(c.gold or ""),
        cell(code(c.a)),
        cell(c.a_answer or "no answer", tone=right if c.a_correct else wrong),
        cell(code(c.b)),
        cell(c.b_answer or "no answer", tone=wrong if c.a_correct else right),
        cell("A" if c.a_correct else "B"),
    )
