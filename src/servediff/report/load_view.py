"""The "Under load" block: the sentences and cells of ``compare.load`` (each sweep's levels).

    servediff experiment examples/llama-server-gpu.toml      # OUT/report.md, "Under load"

Every number comes from ``compare.load``; this module only words it, once for both formats.
"""

from __future__ import annotations

from servediff.compare.load import LoadLevel, LoadSweep
from servediff.report import fmt


def intro(s: LoadSweep) -> str:
    return (
        f"Every level of {s.label} on {s.suite} against one base run, {s.base} (at the base level, its "
        "other repeats are its control). Divergences are classified from the top-k logprobs recorded "
        "during the run itself: a probe at batch 1 cannot replay the batch that chose the token. "
        f"Near-tie: both sides rank the same two tokens on top and the base's gap is below "
        f"{s.threshold:g} nat. The step is a level's output tokens/s over the level before it."
    )


def identity(level: LoadLevel) -> str:
    return f"{fmt.ratio(level.identical, level.compared)}" if level.compared else "n/a"


def hazard(level: LoadLevel) -> str:
    h = level.hazard
    if h is None:
        return "n/a"
    rate, low, high = h.per_1000()
    if h.upper_bound_only:
        return f"0 (≤ {fmt.rate(high)})"
    return f"{fmt.rate(rate)} ({fmt.rate(low)}–{fmt.rate(high)})"


def mechanism(level: LoadLevel) -> str:
    if not level.mechanism:
        return "—"
    return ", ".join(f"{cls} {n}" for cls, n in level.mechanism)


def step(level: LoadLevel) -> str:
    return "—" if level.step is None else f"{level.step:.2f}×"


def throughput(level: LoadLevel) -> str:
    t = level.tokens_per_s
    return "n/a" if t is None else f"{fmt.per_s(t.value)} [{fmt.per_s(t.low)}, {fmt.per_s(t.high)}]"


def latency(level: LoadLevel) -> str:
    return " / ".join(fmt.seconds(x.value) for x in level.latency) or "n/a"


def accuracy(level: LoadLevel) -> str:
    a = level.accuracy
    if a is None:
        return "not scored"
    return f"{fmt.ratio(a.correct, a.n)} ({fmt.pp(a.accuracy)} %)"


def quality(s: LoadSweep) -> str | None:
    """The paired sentence: the highest level against the base, item by item."""
    q = s.quality
    if q is None:
        return None
    t = q.table
    return (
        f"Accuracy under load: {q.b} against {q.a} on the same {t.n} items: Δ = {fmt.spp(t.delta)} pp, "
        f"95 % CI [{fmt.spp(q.delta_ci.low)}, {fmt.spp(q.delta_ci.high)}]; McNemar p = "
        f"{fmt.pvalue(q.p_mcnemar)} (right only at the base: {t.b}, right only under load: {t.c}); "
        f"the same extracted answer on {q.same_answer}/{t.n}, byte-identical on {q.identical}/{t.n}."
    )
