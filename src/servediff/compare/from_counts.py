"""The Quality section's statistics from counts the user already has, one dict per question.

    servediff stats ci --correct 81 --n 100
    servediff stats mcnemar --b 8 --c 0 --n 100 --a-correct 81
    servediff stats power --delta 0.02 --discordance 0.1

Pure functions over ``compare.stats``; counts that cannot describe one sample raise ValueError
with the flags to fix, before any statistic is computed.
"""

from __future__ import annotations

from servediff.compare import stats


def accuracy(correct: int, n: int) -> dict[str, object]:
    """Accuracy with its Wilson 95 % interval and the CLT half-width."""
    if not 0 <= correct <= n:
        raise ValueError("need 0 <= --correct <= --n")
    w = stats.wilson(correct, n)
    acc = correct / n
    return {
        "accuracy": acc,
        "wilson_low": w.low,
        "wilson_high": w.high,
        "clt_halfwidth": stats.clt_halfwidth(acc, n),
    }


def mcnemar(b: int, c: int, n: int | None, a_correct: int | None, margin: float) -> dict[str, object]:
    """Exact McNemar on the discordant counts; with n and A's correct count, also the paired
    interval on Δ and the non-inferiority verdict at ``margin``."""
    if (n is None) != (a_correct is None):
        raise ValueError("give --n and --a-correct together (the paired CI needs both), or neither")
    out: dict[str, object] = {"b": b, "c": c, "p_value": stats.mcnemar_exact(b, c)}
    if n is None or a_correct is None:
        return out
    both = a_correct - b
    t = stats.PairedCounts(both=both, b=b, c=c, neither=n - both - b - c)
    if min(t.both, t.neither) < 0:
        raise ValueError("inconsistent counts: need b <= --a-correct and b + c <= --n")
    ci = stats.paired_ci(t)
    return out | {
        "n": t.n,
        "delta": t.delta,
        "delta_low": ci.low,
        "delta_high": ci.high,
        "margin": margin,
        "verdict": stats.verdict(ci, margin),
    }


def sample_sizes(delta: float, discordance: float, p: float, alpha: float, power: float) -> dict[str, object]:
    """Items needed to detect ``delta``: paired (at this discordance) and unpaired (per arm)."""
    return {
        "delta": delta,
        "discordance": discordance,
        "paired_items": stats.n_paired(delta, discordance, alpha, power),
        "unpaired_items_per_arm": stats.n_unpaired(delta, p, alpha, power),
    }
