"""The report's sentences, written once for both renderers.

    servediff report runs/*.jsonl --md report.md --html report.html

Plain text from the model's numbers, formatted by ``report.fmt``: the Markdown template escapes
each sentence as Markdown text, the HTML template as HTML. Structure and emphasis live in the
templates; the words and numbers live here.
"""

from __future__ import annotations

from servediff.compare.mechanism import Precision
from servediff.compare.quality import PairQuality
from servediff.report import fmt
from servediff.report.gate_model import GateReport
from servediff.report.model import Claim, Comparison

STATUS_NOTE = {
    "NOT ENGAGED": "this configuration did not test the feature it claims",
    "NOT CONFIGURED": "the server does not have the feature configured",
}


def flag_note(status: str) -> str:
    return STATUS_NOTE.get(status, "")


def flag_line(c: Claim) -> str:
    return (
        f"{c.label} claims {c.claim} — {c.status} ({c.suite} #{c.repeat}: {c.detail}); {flag_note(c.status)}"
    )


def no_control() -> str:
    return (
        "No control: no configuration was run twice, so a difference between configurations cannot be "
        "told apart from run-to-run noise."
    )


def class_counts(c: Comparison) -> str:
    return ", ".join(f"{n} {cls}" for cls, n in c.classes if n or cls != "not measured")


def verification_note() -> str:
    return (
        "Counters are read from the engine's /metrics before and after each run (vLLM: "
        "vllm:spec_decode_num_drafts, …_num_draft_tokens, …_num_accepted_tokens, "
        "…_num_accepted_tokens_per_pos, vllm:prefix_cache_queries/_hits). Acceptance length = 1 + "
        'accepted / drafts; acceptance rate = accepted / drafted tokens. "not verified" means the '
        "engine exposes nothing that could confirm the feature either way."
    )


def quality_intro() -> str:
    return (
        "Accuracy per configuration. Errored (or not yet run) items are excluded and counted, never scored "
        "wrong; a reply with no extractable answer is scored wrong and counted."
    )


def chance_note() -> str:
    return (
        "this model cannot answer these questions, so the comparison exercises the paired machinery rather "
        "than measuring a quality difference."
    )


def paired_intro(margin: float) -> str:
    m = fmt.pp(margin)
    return (
        "Paired comparison on the items scored in both runs. b: A right, B wrong; c: A wrong, B right; "
        "Δ = accuracy(B) − accuracy(A) with Newcombe's paired 95 % CI; verdict: non-inferiority of B at a "
        f"{m} pp margin; items needed to detect δ = {m} pp at 80 % power, α = 0.05."
    )


def needed(q: PairQuality) -> str:
    paired = "n/a (ψ < δ)" if q.n_paired is None else fmt.count(q.n_paired)
    unpaired = "n/a" if q.n_unpaired is None else fmt.count(q.n_unpaired)
    return f"{paired} / {unpaired}"


def pair_sentence(q: PairQuality) -> str:
    t, m = q.table, fmt.pp(q.margin)
    text = (
        f"{q.a} vs {q.b} ({q.suite}): Δ = {fmt.spp(t.delta)} pp, 95 % CI [{fmt.spp(q.delta_ci.low)}, "
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
    return text


def measured_intro() -> str:
    return (
        "At each divergence: both configurations' top-2 next tokens after prompt + common prefix, the "
        "top-1 − top-2 gap (nats), and the shift of A's and B's tokens' logprobs from A to B. \"run\": "
        'logprobs recorded during the run (the logits that chose the token); "probe": asked afterwards '
        "(servediff probe), an estimate whose method is listed."
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
    return f"{head}. P(an L-token completion diverges): {p}{tail}."


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


def sweep_intro() -> str:
    return (
        "The same configuration, the same prompts at temperature 0, repeated at each concurrency: how many "
        "distinct completions does each prompt get across the repeats?"
    )


# --- gate (servediff gate) ---


def gate_verdict(g: GateReport) -> str:
    m = fmt.pp(g.margin)
    return {
        "pass": f"the confidence sequence lies above −{m} pp: the candidate is not worse by more "
        "than the margin.",
        "fail": f"the confidence sequence lies below −{m} pp: the candidate is worse by more than "
        "the margin.",
        "inconclusive": f"the item budget ran out while the sequence still contained −{m} pp.",
    }[g.verdict]


def gate_method() -> str:
    return (
        "Bounds on Δ = accuracy(B) − accuracy(A) that hold at every number of items at once "
        "(diversified-Kelly betting confidence sequence, Waudby-Smith and Ramdas 2023), so the gate "
        "may look after every batch and stop early without raising its error rate."
    )
