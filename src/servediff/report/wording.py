"""The report's sentences, written once for both renderers.

    servediff report runs/*.jsonl --md report.md --html report.html

Plain text from the model's numbers, formatted by ``report.fmt``: the Markdown template escapes
each sentence as Markdown text, the HTML template as HTML. Structure and emphasis live in the
templates; the words and numbers live here.
"""

from __future__ import annotations

from servediff.compare.comparison import Comparison
from servediff.compare.machine_load import Load
from servediff.compare.reruns import Speedup
from servediff.compare.sampled import Sampled, SampledPair
from servediff.compare.sampled_divergence import FirstDivergences
from servediff.compare.stats.sample_size import Sizing, VarianceParts
from servediff.gate.result import GateReport
from servediff.report import fmt
from servediff.report.model import (
    Claim,
    ReplicaCheck,
)

STATUS_NOTE = {
    "NOT ENGAGED": "this configuration did not test the feature it claims",
    "NOT CONFIGURED": "the server does not have the feature configured",
}


def flag_note(status: str) -> str:
    return STATUS_NOTE.get(status, "")


def flag_line(c: Claim) -> str:
    claim = (c.claim or "").replace("_", " ")
    return f"{c.label} claims {claim} — {c.status} ({c.suite} #{c.repeat}: {c.detail}); {flag_note(c.status)}"


def no_control() -> str:
    return (
        "No control: no configuration was run twice, so a difference between configurations cannot be "
        "told apart from run-to-run noise."
    )


def class_counts(c: Comparison) -> str:
    # The greedy classes are listed even at 0 (a 0 is a finding); in sampled runs they cannot occur.
    optional = ("not measured", "sampled draw") if not c.sampled else tuple(cls for cls, _ in c.classes)
    return ", ".join(f"{n} {cls}" for cls, n in c.classes if n or cls not in optional)


def verification_note() -> str:
    return (
        "Counters are read from the engine's /metrics before and after each run (vLLM: "
        "vllm:spec_decode_num_drafts, …_num_draft_tokens, …_num_accepted_tokens, "
        "…_num_accepted_tokens_per_pos, vllm:prefix_cache_queries/_hits; llama-server: each "
        "response's timings draft_n/draft_n_accepted and cache_n summed over the run, /slots, and "
        "/metrics busy slots per decode call). Acceptance length = 1 + "
        'accepted / drafts; acceptance rate = accepted / drafted tokens. "not verified" means the '
        "engine exposes nothing that could confirm the feature either way."
    )


# --- speed ------------------------------------------------------------------------------------
ONE_RUN_EACH = "one run each: the interval covers item sampling only; repeat to compare"


def speedup_interval(s: Speedup) -> str:
    """A speedup's interval and what it covers: "[0.9×, 1.3×] over 2 and 2 runs" (run-to-run
    variance included), or the item bootstrap's alone (``ONE_RUN_EACH`` says what it covers)."""
    shown = f"[{fmt.speedup(s.low)}, {fmt.speedup(s.high)}]"
    return shown if s.basis == "items" else f"{shown} over {s.runs[0]} and {s.runs[1]} runs"


def load_note(load: Load, a: str, b: str) -> str:
    """Why a measured speedup gets no interval: the machine, not the configuration, may explain it."""
    why = (
        "the machine was oversubscribed" if load.verdict == "oversubscribed" else "the machine's load changed"
    )

    def per_core(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    return (
        f"NOT COMPARABLE: {why} (1-min load per usable core {per_core(load.a)} under {a}, "
        f"{per_core(load.b)} under {b}); measure again on a quiet machine"
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


# --- sampled runs (temperature > 0) -----------------------------------------------------------
def not_reproduced(c: Comparison, most: int = 10) -> str:
    """The draws of a sampled control whose texts differed, for the Summary line."""
    ids = [d.item_id for d in c.divergences]
    if not ids:
        return ""
    more = f" and {len(ids) - most} more" if len(ids) > most else ""
    return f" (not: {', '.join(ids[:most])}{more})"


def sampled_intro(s: Sampled) -> str:
    return (
        "Sampled runs (temperature above 0) draw each item k times; draw s of item i gets a seed fixed by "
        "the "
        "run's base seed, i and s, the same under every configuration. The pass rate is an item's "
        "share of right draws; pass@k the chance that at least one of k draws is right (Chen et al. "
        "2021, unbiased); pass^k that all k are. Each is a mean over items with its 95 % interval "
        "over items (the item is the cluster: its draws share its difficulty). A failed draw is "
        "left out, never scored as wrong; an item with fewer than k scored draws is left out of "
        f"pass@k and pass^k. Differences are B − A, paired over items, non-inferior at a "
        f"{fmt.pp(s.margin)} pp margin when the interval's lower bound is above −margin."
    )


def coupled_identity(p: SampledPair) -> str:
    """How many draws two sampled runs agree on, text for text, with the same seeds."""
    if not p.same_seeds:
        return "not coupled: the runs' base seeds or draws per item differ"
    what = "the same configuration twice" if p.kind == "control" else "same seed, two configurations"
    return f"{fmt.ratio(p.identical, p.compared)} draws byte-identical ({what})"


def first_divergence_intro() -> str:
    return (
        "Where coupled draws first differ: for each pair of runs, the token at which a draw's text "
        "under B first leaves its text under A with the same seed, over all draws both completed. "
        "The control (one configuration twice, same seeds) is the baseline: with seeds honoured it "
        "never diverges. A configuration that leaves every step's distribution alone would not "
        "either; one that changes it moves the sampler's choice at some token, and from there the "
        "texts part."
    )


def first_divergence_spread(f: FirstDivergences) -> str:
    """Median first differing token with its quartiles, over the draws that diverged."""
    q = f.quartiles
    if q is None:
        return "none diverged"
    unknown = f"; {f.unknown} at an unknown token" if f.unknown else ""
    return f"{q[1]:g} [{q[0]:g}, {q[2]:g}]{unknown}"


def sizing_intro(s: Sampled) -> str:
    """What the items × draws table means (Miller's variance with k draws per item)."""
    return (
        f"Items needed for a non-inferiority verdict at a {fmt.pp(s.margin)} pp margin (true Δ = 0, "
        "80 % power, the 95 % interval's lower bound above −margin), from Miller's variance of a mean "
        "over n items with k draws each, (Var(x) + E[σ²]/k)/n, estimated from these runs' draws. "
        "Paired: the same items under both configurations, each draw's difference taken with its "
        "coupled seed; unpaired: separate items (or uncoupled draws), n per configuration. More draws "
        "shrink only the within-item term."
    )


def sizing_parts(z: Sizing) -> str:
    """The estimated terms behind the sizes: between-item spread and within-item noise."""

    def parts(v: VarianceParts) -> str:
        return f"Var(x) {v.between:.3g}, E[σ²] {v.within:.3g}"

    return f"B − A per draw: {parts(z.paired)}; A: {parts(z.a)}; B: {parts(z.b)}"


def items_count(n: int | None, draws: int | None) -> str:
    """Items, and in brackets the draws they take (items × k) per configuration."""
    return "any (no variance seen)" if n is None or draws is None else f"{fmt.count(n)} ({fmt.count(draws)})"


def replica_line(c: ReplicaCheck) -> str:
    """The replica check of one configuration, in one line (report and the CLI's flags)."""
    if not c.heterogeneous:
        return f"{c.label} ({c.suite}): {c.replicas} replicas agree on all {c.items} shared item(s)"
    which = ", ".join(f"#{i}" for i in c.disagree)
    return (
        f"{c.label} ({c.suite}): replicas disagree — {which} differ on {len(c.differing)} of "
        f"{c.items} shared item(s); identical configurations should give identical greedy output, "
        "so the replicas are not interchangeable"
    )
