"""The audit laid out: the verdict line, the evidence, and JUnit for CI.

    servediff audit --base-url URL --control-url URL --junit audit.xml --md audit.md

Everything here is formatted from ``compare.audit.AuditAnalysis``; nothing is computed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from servediff.compare.audit import AuditAnalysis, Divergence, Side
from servediff.compare.binomial import Bound, Ratio
from servediff.report import junit


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


def _side_md(s: Side) -> list[str]:
    lines = [f"### {s.role}: {s.label}", "", f"{bound_text(s.bound)}.", ""]
    lines += [
        "| workload | concurrency | trials | diverged | needle trials | needle diverged | tokens/s, rounds |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for lv in s.levels:
        rates = ", ".join(f"{x:.1f}" for x in lv.tokens_per_s) or "—"
        conc = "1 (alone, repeat)" if lv.level == 1 else str(lv.level)
        lines.append(f"| {lv.workload} | {conc} | {lv.trials} | {lv.divergent} | {lv.needle_trials} | "
                     f"{lv.needle_divergent} | {rates} |")  # fmt: skip
    lp = (
        f"logprobs bit-equal in {s.logprob_bit_equal} of {s.logprob_trials} identical trials"
        + (f", largest difference {s.max_logprob_diff:.3g} nats" if s.max_logprob_diff is not None else "")
        if s.logprob_trials
        else "no logprobs to compare"
    )
    basis = ", ".join(s.basis) or "—"
    lines += ["", f"Compared by {basis}; most distinct outputs of one prompt: {s.distinct_max}; {lp}; "
              f"{s.errors} errored request(s).", ""]  # fmt: skip
    several = len({w for w, _, _, _ in s.per_prompt}) > 1
    shown = ", ".join(f"{f'{w}/' if several else ''}{k} {d} of {n}" for w, k, n, d in s.per_prompt)
    lines += [f"Distinct outputs per prompt: {shown}.", ""]
    for d in s.divergences[:10]:
        lines.append(f"- {divergence_text(d)}")
    if len(s.divergences) > 10:
        lines.append(f"- … and {len(s.divergences) - 10} more (in the records)")
    return lines


def markdown(a: AuditAnalysis) -> str:
    out = ["# servediff audit", "", verdict_line(a), ""]
    out += _side_md(a.promise)
    if a.control is not None:
        out += ["", *_side_md(a.control)]
    out += ["", "Records: " + ", ".join(a.promise.records + (a.control.records if a.control else ())), ""]
    return "\n".join(out)


def summary(a: AuditAnalysis) -> dict[str, Any]:
    """The analysis as JSON (``--json``)."""
    d = dataclasses.asdict(a)
    d["exit_code"] = a.exit_code
    d["verdict_line"] = verdict_line(a)
    return d


def write_junit(a: AuditAnalysis, path: Path) -> None:
    """Two cases: the promise (failure when it diverged) and the negative control (an error when
    it did not diverge: the audit tested nothing)."""
    p = a.promise
    promise_outcome = "failure" if a.verdict == "fail" else "error" if a.verdict == "error" else None
    cases = [junit.Case("promise", promise_outcome, a.verdict, verdict_line(a))]
    if a.control is None and a.verdict == "fail":
        cases.append(junit.Case("negative-control", "skipped", "not needed", "not run: the promise diverged"))
    elif a.control is None:
        cases.append(junit.Case("negative-control", "error", "missing", "no negative control was run"))
    else:
        c = a.control
        weak = "error" if c.divergent == 0 else None
        text = f"{c.label}: {c.divergent} of {c.trials} trials diverged (it must: else nothing was tested)"
        cases.append(junit.Case("negative-control", weak, "too weak" if weak else "diverged", text))
    junit.write_cases(f"servediff audit {p.label}", "servediff.audit", cases, path)
