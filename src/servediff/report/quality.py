"""The report's "Quality" section and the ``quality`` key of ``compare --json``.

    servediff compare runs/mmlu-stock.jsonl runs/mmlu-tuned.jsonl --margin 0.01

Rendered from ``compare.quality`` (records only). Empty when no run is scored.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from servediff.compare.quality import Accuracy, PairQuality, Quality, quality
from servediff.compare.stats import wilson
from servediff.compare.study import Study
from servediff.report.mdtext import cell, code

CHANCE = {"mmlu": 0.25}  # four options


def pp(x: float, signed: bool = False) -> str:
    return f"{x * 100:+.1f}" if signed else f"{x * 100:.1f}"


def pvalue(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def _accuracy_row(a: Accuracy) -> str:
    clustered = "n/a" if a.cluster_se is None else f"±{pp(1.96 * a.cluster_se)} pp ({a.clusters} subjects)"
    return (
        f"| {cell(a.suite)} | {code(a.label)} #{a.repeat} | **{pp(a.accuracy)} %** ({a.correct}/{a.n}) | "
        f"{pp(a.ci.low)}–{pp(a.ci.high)} % | ±{pp(a.clt)} pp | {clustered} | {a.errors} | {a.unanswered} |"
    )


def _needed(q: PairQuality) -> str:
    paired = "n/a (ψ < δ)" if q.n_paired is None else f"{q.n_paired:,}"
    unpaired = "n/a" if q.n_unpaired is None else f"{q.n_unpaired:,}"
    return f"{paired} / {unpaired}"


def _pair_row(q: PairQuality) -> str:
    t = q.table
    return (
        f"| {cell(q.suite)} | {code(q.a)} #{q.a_repeat} | {code(q.b)} #{q.b_repeat} | {q.kind} | {t.n} | "
        f"{q.same_answer}/{t.n} ({pp(q.same_answer_ci.low)}–{pp(q.same_answer_ci.high)} %) | "
        f"{q.identical}/{t.n} | {t.b} / {t.c} | {pvalue(q.p_mcnemar)} | "
        f"{pp(t.delta, True)} pp [{pp(q.delta_ci.low, True)}, {pp(q.delta_ci.high, True)}] | "
        f"{q.verdict} | {_needed(q)} | {q.errors} |"
    )


def _pair_sentence(q: PairQuality) -> str:
    t, m = q.table, pp(q.margin)
    text = (
        f"- {code(q.a)} vs {code(q.b)} ({cell(q.suite)}): Δ = {pp(t.delta, True)} pp, 95 % CI "
        f"[{pp(q.delta_ci.low, True)}, {pp(q.delta_ci.high, True)}]; McNemar p = {pvalue(q.p_mcnemar)} "
        f"(b = {t.b}, c = {t.c} of {t.n}); at a {m} pp margin: **{q.verdict}**."
    )
    if q.n_paired is not None and q.n_unpaired is not None:
        text += (
            f" To detect a {m} pp difference with 80 % power at α = 0.05, the paired design needs "
            f"{q.n_paired:,} items (observed discordance {pp(t.discordance)} %), an unpaired one "
            f"{q.n_unpaired:,} per configuration."
        )
    elif q.n_unpaired is not None:
        text += (
            f" Only {pp(t.discordance)} % of items are discordant, fewer than the {m} pp to detect: at "
            f"this discordance such a difference cannot occur (an unpaired design would need "
            f"{q.n_unpaired:,} items per configuration to look for it)."
        )
    return text


def _chance_notes(q: Quality) -> list[str]:
    out = []
    for a in q.accuracies:
        chance = CHANCE.get(a.suite)
        if chance is not None and a.n and wilson(a.correct, a.n).low <= chance:
            out.append(
                f"- {code(a.label)} on {cell(a.suite)} is not distinguishable from chance "
                f"({pp(chance)} %): this "
                "model cannot answer these questions, so the comparison exercises the paired "
                "machinery rather than measuring a quality difference."
            )
    return out


def section(study: Study) -> list[str]:
    q = quality(study)
    if not q.accuracies:
        return []
    out = [
        "## Quality",
        "",
        "Accuracy per configuration. Errored (or not yet run) items are excluded and counted, never "
        "scored wrong; a reply with no extractable answer is scored wrong and counted.",
        "",
        "| suite | configuration | accuracy | 95 % CI (Wilson) | ± CLT 95 % | ± clustered 95 % "
        "| errored or missing (excluded) | no answer |",
        "|---|---|---|---|---|---|---|---|",
        *(_accuracy_row(a) for a in q.accuracies),
        "",
    ]
    notes = _chance_notes(q)
    out += [*notes, ""] if notes else []
    if q.pairs:
        out += [
            "Paired comparison on the items scored in both runs. b: A right, B wrong; c: A wrong, B "
            f"right; Δ = accuracy(B) − accuracy(A) with Newcombe's paired 95 % CI; verdict: "
            f"non-inferiority of B at a {pp(q.margin)} pp margin; items needed to detect "
            f"δ = {pp(q.margin)} pp at 80 % power, α = 0.05.",
            "",
            "| suite | A | B | kind | n | same answer | identical text | b / c | McNemar p | Δ (95 % CI) "
            "| verdict | items needed: paired / unpaired | left out |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *(_pair_row(p) for p in q.pairs),
            "",
            *(_pair_sentence(p) for p in q.pairs),
        ]
    return [*out, ""]


def _finite(x: Any) -> Any:
    # JSON has no NaN: an empty run has no accuracy.
    return None if isinstance(x, float) and math.isnan(x) else x


def summary(study: Study) -> dict[str, Any]:
    """The ``quality`` key of ``compare --json``: the same numbers as the section."""
    q = quality(study)

    def flat(obj: Any) -> dict[str, Any]:
        return {k: _finite(v) for k, v in dataclasses.asdict(obj).items()}

    accuracies = [{**flat(a), "accuracy": _finite(a.accuracy)} for a in q.accuracies]
    pairs = [
        {**flat(p), "delta": p.table.delta, "n": p.table.n, "discordance": p.table.discordance}
        for p in q.pairs
    ]
    return {"margin": q.margin, "accuracies": accuracies, "pairs": pairs}
