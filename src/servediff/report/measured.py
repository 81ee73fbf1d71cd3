"""The report section "Why the text diverges — measured", rendered from records (runs + probes).

servediff compare runs/*.jsonl runs/probes.jsonl --md report.md
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from typing import Any

from servediff.compare.hazard import HORIZONS, Hazard
from servediff.compare.mechanism import (
    NEAR_TIE,
    RANK_CHANGE,
    RECORDED,
    UNEXPLAINED,
    Distribution,
    Explanation,
    PairMechanism,
    Precision,
    measure_pair,
)
from servediff.compare.study import Study
from servediff.report.mdtext import cell, code


def _top2(d: Distribution | None) -> str:
    if d is None:
        return "—"
    return cell(", ".join(f"{t!r} {v:.3f}" for t, v in d.top[:2]))


def _gap(g: float | None, p: Precision) -> str:
    if g is None:
        return "—"
    if g == 0:
        return "0 (exact tie)"
    if p.coarse and p.smallest_step:
        return f"{g:.4f} ({g / p.smallest_step:.0f} steps)"
    return f"{g:.4f}"


def _shift(e: Explanation) -> str:
    if e.shift_a_token is None and e.shift_b_token is None:
        return "—"
    return f"{_signed(e.shift_a_token)} / {_signed(e.shift_b_token)}"


def _signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def _source(d: Distribution | None, legend: dict[str, int]) -> str:
    if d is None:
        return "none"
    if d.source == RECORDED:
        return "run"
    n = legend.setdefault(d.source, len(legend) + 1)
    return f"probe [{n}]"


def hazard_line(h: Hazard | None, left_out: int) -> str:
    if h is None:
        return "- **Hazard:** no token counts in these records, so no per-token rate."
    p = ", ".join(f"L={n}: {_pct(h.p_within(n), h.upper_bound_only)}" for n in HORIZONS)
    rate, lo, hi = h.per_1000()
    if h.upper_bound_only:
        head = (
            f"no divergence in {h.exposure:,} tokens: rate < {hi:.3g} per 1,000 tokens "
            f"(one-sided {h.confidence:.0%} upper bound)"
        )
    else:
        head = (
            f"{h.events} divergence(s) in {h.exposure:,} tokens at risk: {rate:.3g} per 1,000 tokens "
            f"(exact Poisson {h.confidence:.0%} CI {lo:.3g}–{hi:.3g})"
        )
    tail = f"; {left_out} item(s) without token counts left out" if left_out else ""
    return f"- **Hazard:** {head}. P(an L-token completion diverges): {p}{tail}."


def _pct(p: tuple[float, float, float], bound_only: bool) -> str:
    if bound_only:
        return f"< {p[2]:.2%}"
    return f"{p[0]:.2%} ({p[1]:.2%}–{p[2]:.2%})"


def drift_line(m: PairMechanism) -> str:
    d = m.drift
    if d is None:
        return "- **Drift on the shared prefix:** not measured (needs logprobs recorded in both runs)."
    return (
        "- **Drift on the shared prefix:** |Δ logprob| of the chosen token between "
        f"{code(m.a)} and {code(m.b)} "
        f"over {d.n:,} shared tokens: median {d.median:.2g}, p99 {d.p99:.2g}, max {d.max:.2g} nats."
    )


def precision_line(m: PairMechanism) -> str:
    p = m.precision
    ties = f"{p.exact_ties} exact top-1/top-2 tie(s) in {p.positions:,} recorded positions"
    if p.positions == 0:
        return (
            "- **Precision:** no recorded top-k, so the logits' resolution is unknown; with bf16 logits "
            "(typical on GPUs) a 0.1-nat threshold is only 1–3 rounding steps."
        )
    if not p.coarse:
        what = p.dtype or "fine-grained logits (no sign of a coarse grid)"
        return (
            f"- **Precision:** {what}; {ties}. Gaps here are exact to far below 0.001 nats, so the "
            "threshold is a real margin. With bf16 logits (typical on GPUs) logprobs sit on a grid "
            "of about 1/32–1/8 nat and a fixed 0.1-nat threshold misclassifies many ties."
        )
    step = f"{p.smallest_step:.3g}" if p.smallest_step else "unknown"
    return (
        f"- **Precision:** coarse logits (bf16-like): {ties}; smallest non-zero step {step} nats. "
        "Gaps are also given in these steps: a gap of 0–2 steps is a tie within rounding, whatever "
        "the threshold says."
    )


def _table(m: PairMechanism) -> list[str]:
    legend: dict[str, int] = {}
    out = [
        "| item | token | A top-2 | B top-2 | gap A | gap B | shift A tok / B tok | class "
        "| A from | B from |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in m.explanations:
        cls = e.cls + (f" ({cell(e.note)})" if e.note else "")
        out.append(
            f"| {cell(e.point.item_id)} | {'n/a' if e.point.index is None else e.point.index} | "
            f"{_top2(e.a)} | {_top2(e.b)} | {_gap(e.gap_a, m.precision)} | {_gap(e.gap_b, m.precision)} | "
            f"{_shift(e)} | {cls} | {_source(e.a, legend)} | {_source(e.b, legend)} |"
        )
    out.append("")
    out += [f"[{n}] {cell(src)} — an estimate: not the run's own computation." for src, n in legend.items()]
    return [*out, ""] if legend else out


def _counts(m: PairMechanism) -> str:
    c = Counter(e.cls for e in m.explanations)
    gaps = sorted(e.gap_a for e in m.explanations if e.gap_a is not None)
    parts = [f"{c[k]} {k}" for k in (NEAR_TIE, RANK_CHANGE, UNEXPLAINED)]
    line = f"- **{len(m.explanations)} divergence(s):** " + ", ".join(parts)
    if gaps:
        mid, top = statistics.median(gaps), gaps[-1]  # an even count: the mean of the middle two
        line += f"; A's top-2 gap at the divergence: median {mid:.3f}, max {top:.3f} nats"
    return line + f" (near-tie threshold {m.threshold:g} nats)."


def _probe_check(m: PairMechanism) -> list[str]:
    out = []
    for side, label in (("a", m.a), ("b", m.b)):
        pairs = [(getattr(e, f"{side}_probe"), getattr(e, side)) for e in m.explanations]
        diffs = [abs(p.gap - r.gap) for p, r in pairs if p and r and p.gap is not None and r.gap is not None]
        flips = sum(1 for p, r in pairs if p and r and p.top[0][0] != r.top[0][0])
        if diffs:
            out.append(
                f"- **Probe vs run, {code(label)}:** at {len(diffs)} divergence(s) with both, "
                "the probe's gap "
                f"differs from the recorded one by at most {_nats(max(diffs))}; its top-1 differs at {flips}."
            )
    return out


def _nats(x: float) -> str:
    return "0 nats (bit-identical)" if x == 0 else f"{x:.2g} nats"


def measured(study: Study) -> list[str]:
    out = [
        "## Why the text diverges — measured",
        "",
        "At each divergence: both configurations' top-2 next tokens after prompt + common prefix, "
        "the top-1 − top-2 gap (nats), and the shift of A's and B's tokens' logprobs from A to B. "
        "`run`: logprobs recorded during the run (the logits that chose the token); `probe`: "
        "asked afterwards (`servediff probe`), an estimate whose method is listed.",
        "",
    ]
    for pair in [*study.controls, *study.pairs]:
        m = measure_pair(pair, study.probes, study.near_tie)
        out += [f"### {code(m.a)} vs {code(m.b)} ({cell(m.suite)}, {m.kind})", ""]
        if m.explanations:
            out += [_counts(m), "", *_table(m)]
        out += [drift_line(m), hazard_line(m.hazard, m.no_token_data)]
        out += _probe_check(m)
        if m.explanations:
            out.append(precision_line(m))
        out.append("")
    return out


def _dist(d: Distribution | None) -> dict[str, Any] | None:
    return None if d is None else {"top": [list(t) for t in d.top], "gap": d.gap, "source": d.source}


def mechanism_json(study: Study) -> list[dict[str, Any]]:
    """The measured section for ``compare --json``: one entry per control and pair."""
    out = []
    for pair in [*study.controls, *study.pairs]:
        m = measure_pair(pair, study.probes, study.near_tie)
        h = m.hazard
        out.append(
            {
                "suite": m.suite,
                "a": m.a,
                "b": m.b,
                "kind": m.kind,
                "near_tie_nats": m.threshold,
                "divergences": [
                    {
                        "item_id": e.point.item_id,
                        "token_index": e.point.index,
                        "alignment": e.point.alignment,
                        "a_token": e.point.a_token,
                        "b_token": e.point.b_token,
                        "class": e.cls,
                        "note": e.note,
                        "a": _dist(e.a),
                        "b": _dist(e.b),
                        "a_probe": _dist(e.a_probe),
                        "b_probe": _dist(e.b_probe),
                        "shift_a_token": e.shift_a_token,
                        "shift_b_token": e.shift_b_token,
                    }
                    for e in m.explanations
                ],
                "drift": None if m.drift is None else dataclasses.asdict(m.drift),
                "hazard": None
                if h is None
                else {
                    "events": h.events,
                    "exposure_tokens": h.exposure,
                    "rate": h.rate,
                    "lower": h.lower,
                    "upper": h.upper,
                    "confidence": h.confidence,
                    "upper_bound_only": h.upper_bound_only,
                    "p_within": {str(n): h.p_within(n) for n in HORIZONS},
                },
                "tokens_without_counts": m.no_token_data,
                "precision": dataclasses.asdict(m.precision),
                "probe_record": m.probe_path,
            }
        )
    return out
