"""How many items × draws a sampled comparison needs: Miller's variance for k draws per item.

    servediff compare a.jsonl a2.jsonl b.jsonl --margin 0.05 --md report.md   # "Sampled generation"

With k draws of each of n items, the mean of the per-item means has variance (Miller 2024,
"Adding Error Bars to Evals", arXiv:2411.00640: each question's answer resampled k times)

    Var = (1/n) · (Var(x) + E[σ_i²] / k)

where x_i is item i's expected score (between-item spread) and σ_i² the variance of one draw's
score given the item (within-item noise; p_i(1 − p_i) for right/wrong). More draws shrink only
the second term; more items shrink both, so past some k only items help.

A paired design scores the same items under both configurations and takes per-draw differences
δ_ij = b_ij − a_ij (draw j of item i has the same seed under both, so a configuration that
changes nothing gives δ_ij = 0 exactly): its variance is the formula applied to δ. An unpaired
design (separate items, or draws not coupled) adds the two configurations' variances. With V the
bracket of the formula, the items needed for a non-inferiority verdict at margin m (true Δ = 0,
the 95 % interval's lower bound above −m with power 1 − β) are

    n = (z_{0.975} + z_{1−β})² · V / m²

per configuration (the same items under both for the paired design).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# scipy.stats is imported inside the functions that use it: importing it costs ~0.6 s, which a
# report that needs none of them (a shadow compare) should not pay.

K_SHOWN = (1, 4, 8, 16)  # draws per item the report tabulates, besides the run's own k


@dataclass(frozen=True, slots=True)
class VarianceParts:
    """The two terms of Miller's formula, for one score (or one per-draw difference)."""

    between: float  # Var(x): the spread of item means
    within: float  # E[σ_i²]: the mean variance of one draw given its item

    def per_item(self, k: int) -> float:
        """V = Var(x) + E[σ_i²]/k: n times the variance of the mean over n items."""
        return self.between + self.within / k


def mean_variance(parts: VarianceParts, n: int, k: int) -> float:
    """Var of the mean of n per-item means, each over k draws."""
    return parts.per_item(k) / n


def variance_parts(draws: Sequence[Sequence[float]]) -> VarianceParts:
    """Estimate both terms from observed draws (one sequence per item, each of >= 2 draws).

    Within: the mean over items of each item's unbiased draw variance. Between: the variance of
    the item means less the part of it that is draw noise (mean of σ̂_i²/k_i), floored at 0 — the
    method-of-moments split of a one-way random-effects layout.
    """
    items = [list(d) for d in draws if len(d) >= 2]
    if len(items) < 2:
        raise ValueError("variance parts need at least two items with two draws each")
    means = [sum(d) / len(d) for d in items]
    within_i = [sum((x - m) ** 2 for x in d) / (len(d) - 1) for d, m in zip(items, means)]
    grand = sum(means) / len(means)
    spread = sum((m - grand) ** 2 for m in means) / (len(means) - 1)
    noise = sum(w / len(d) for w, d in zip(within_i, items)) / len(items)
    return VarianceParts(between=max(0.0, spread - noise), within=sum(within_i) / len(items))


def items_needed(per_item: float, margin: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Items for the two-sided (1 − α) interval's bound to clear −margin with this power when the
    true difference is 0; None when nothing varies (any number of items will do: 1)."""
    from scipy.stats import norm

    if margin <= 0:
        raise ValueError("margin must be > 0")
    if per_item <= 0:
        return None
    z = float(norm.ppf(1 - alpha / 2)) + float(norm.ppf(power))
    return max(2, math.ceil(z * z * per_item / (margin * margin)))


@dataclass(frozen=True, slots=True)
class DesignSize:
    """Items each design needs at one k (draws per item), for the margin."""

    k: int
    paired: int | None  # items, the same under both configurations (None: no variance seen)
    unpaired: int | None  # items per configuration

    @property
    def paired_draws(self) -> int | None:
        """Draws per configuration the paired design takes (items × k)."""
        return None if self.paired is None else self.paired * self.k

    @property
    def unpaired_draws(self) -> int | None:
        return None if self.unpaired is None else self.unpaired * self.k


@dataclass(frozen=True, slots=True)
class Sizing:
    """What the observed draws of one pair imply for the next comparison's size."""

    paired: VarianceParts  # of the per-draw difference B − A
    a: VarianceParts
    b: VarianceParts
    margin: float
    sizes: tuple[DesignSize, ...]


def coupled_draws(
    a: Mapping[str, Mapping[int, bool]], b: Mapping[str, Mapping[int, bool]]
) -> tuple[list[list[float]], list[list[float]], list[list[float]]]:
    """Per item scored under both: A's draws, B's draws, and B − A draw by draw (same index, so
    same seed), each over the draw indices both scored."""
    xa, xb, diff = [], [], []
    for item in sorted(a.keys() & b.keys()):
        common = sorted(a[item].keys() & b[item].keys())
        if len(common) < 2:
            continue
        xa.append([float(a[item][j]) for j in common])
        xb.append([float(b[item][j]) for j in common])
        diff.append([float(b[item][j]) - float(a[item][j]) for j in common])
    return xa, xb, diff


def sizing(
    a: Mapping[str, Mapping[int, bool]], b: Mapping[str, Mapping[int, bool]], k: int, margin: float
) -> Sizing | None:
    """Paired against unpaired sizes for the margin, from two sampled runs' coupled draws; None
    when fewer than two items have two draws scored under both."""
    xa, xb, diff = coupled_draws(a, b)
    if len(diff) < 2:
        return None
    pa, pb, pd = variance_parts(xa), variance_parts(xb), variance_parts(diff)
    ks = sorted({*K_SHOWN, k})
    sizes = tuple(
        DesignSize(
            k=j,
            paired=items_needed(pd.per_item(j), margin),
            unpaired=items_needed(pa.per_item(j) + pb.per_item(j), margin),
        )
        for j in ks
    )
    return Sizing(paired=pd, a=pa, b=pb, margin=margin, sizes=sizes)
