"""Statistics for scored runs: pure functions over counts and per-item outcomes.

    servediff stats ci --correct 187 --n 200
    servediff stats mcnemar --b 8 --c 0
    servediff stats power --delta 0.02 --discordance 0.0375

Two configurations scored on the *same* items are paired data. Their accuracies are not
independent samples, so comparing them with an unpaired z-test (two separate ±CIs) wastes
most of the information: only the discordant items (b: A right, B wrong; c: A wrong, B right)
carry evidence about the difference. Hence the exact McNemar test, Newcombe's paired interval
and Connor's paired sample size here.

References: Wilson (1927) score interval; McNemar (1947); Newcombe (1998), "Improved confidence
intervals for the difference between binomial proportions based on paired data", method 10;
Connor (1987), "Sample size for testing differences in proportions for the paired-sample
design"; Fleiss, Levin & Paik (2003) for the unpaired sample size; Miller (2024), "Adding Error
Bars to Evals" for the cluster-robust standard error.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from servediff.compare.vocabulary import QualityVerdict

# scipy.stats is imported inside the functions that use it: importing it costs ~0.6 s, which a
# report that needs none of them (a shadow compare) should not pay.


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class PairedCounts:
    """The 2×2 table of two configurations scored on the same n items.

    ``b``: A right, B wrong; ``c``: A wrong, B right. Δ is accuracy(B) − accuracy(A).
    """

    both: int  # both right
    b: int
    c: int
    neither: int  # both wrong

    @property
    def n(self) -> int:
        return self.both + self.b + self.c + self.neither

    @property
    def delta(self) -> float:
        return (self.c - self.b) / self.n if self.n else 0.0

    @property
    def changed(self) -> int:
        """Items whose correctness differs between A and B (b + c, McNemar's discordant pairs)."""
        return self.b + self.c

    @property
    def discordance(self) -> float:
        return (self.b + self.c) / self.n if self.n else 0.0


def z_value(confidence: float = 0.95) -> float:
    """Two-sided normal quantile: 1.95996… for 95 %."""
    from scipy.stats import norm

    return float(norm.ppf(1 - (1 - confidence) / 2))


def wilson(k: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for k successes in n trials (stays inside [0, 1], sane at 0 and n)."""
    if n <= 0:
        return Interval(0.0, 1.0)
    z = z_value(confidence)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At k = n the upper bound is 1 exactly, but in floating point centre + half can come out as
    # 0.9999999999999999 < p (n = 10, 30), and at k = 0 the lower one as 1e-17 > p (n >= 50): an
    # interval that excludes its own estimate, which error bars built from it reject.
    return Interval(max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def clt_halfwidth(p: float, n: int, confidence: float = 0.95) -> float:
    """The usual ± (z·√(p(1−p)/n)): what evals quote as "±3.3 pp" for p = 0.94, n = 200."""
    return z_value(confidence) * math.sqrt(p * (1 - p) / n) if n else float("nan")


def cluster_se(correct: Sequence[bool], clusters: Sequence[str]) -> float:
    """Cluster-robust standard error of the mean accuracy (Miller 2024, eq. 4).

    Items of one cluster (an MMLU subject) are not independent draws; summing residuals within
    a cluster before squaring lets their correlation widen the error bar. With one item per
    cluster this equals the CLT standard error √(p(1−p)/n).
    """
    n = len(correct)
    if n == 0:
        return float("nan")
    mean = sum(correct) / n
    sums: dict[str, float] = defaultdict(float)
    for x, g in zip(correct, clusters):
        sums[g] += float(x) - mean
    return math.sqrt(sum(s * s for s in sums.values())) / n


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value: a binomial test of b against b + c at ½."""
    from scipy.stats import binom

    m = b + c
    if m == 0:
        return 1.0
    return float(min(1.0, 2 * binom.cdf(min(b, c), m, 0.5)))


def paired_ci(t: PairedCounts, confidence: float = 0.95) -> Interval:
    """Newcombe's (1998) method 10 interval for Δ = accuracy(B) − accuracy(A) on paired items.

    It combines the Wilson intervals of the two accuracies, corrected for their correlation φ,
    exactly as published (Newcombe 1998, Stat Med 17:2635–2650, method 10; also Altman et al.,
    *Statistics with Confidence*, 2nd ed., ch. 6): φ = C / √(efgh) over the table's four
    margins, where C = AD − BC less N/2 when AD − BC > N/2, 0 when 0 ≤ AD − BC ≤ N/2, and AD − BC
    itself when negative (AD: both right × both wrong, BC: b × c). Subtracting N/2 shrinks a
    positive correlation a little, so the interval is a little wider than with the plain φ.
    Unlike the Wald interval it stays inside [−1, 1]. When no item changed correctness (b = c = 0)
    φ is 1 and the interval shrinks towards a point (5 of 10 right under both: exactly [0, 0]),
    which would call 10 identical items non-inferior at any margin. There the exact bound is
    used instead: with no discordant pair among n, the discordant share is below
    u = 1 − (α/2)^(1/n) (Clopper–Pearson), and |Δ| ≤ that share, so Δ ∈ [−u, u]; n = 10 gives
    ±0.31, n = 1,000 gives ±0.0037.
    """
    n = t.n
    if n == 0:
        return Interval(-1.0, 1.0)
    if t.b + t.c == 0:
        u = 1.0 - ((1.0 - confidence) / 2) ** (1.0 / n)
        return Interval(-u, u)
    pa, pb = (t.both + t.b) / n, (t.both + t.c) / n
    wa, wb = wilson(t.both + t.b, n, confidence), wilson(t.both + t.c, n, confidence)
    margins = (t.both + t.b) * (t.c + t.neither) * (t.both + t.c) * (t.b + t.neither)
    phi = _phi_corrected(t.both * t.neither - t.b * t.c, n) / math.sqrt(margins) if margins else 0.0
    down = _combine(pb - wb.low, wa.high - pa, phi)
    up = _combine(wb.high - pb, pa - wa.low, phi)
    return Interval(max(-1.0, t.delta - down), min(1.0, t.delta + up))


def _phi_corrected(cross: int, n: int) -> float:
    """Newcombe's numerator of φ: AD − BC, less N/2 when positive (never below 0)."""
    if cross > n / 2:
        return cross - n / 2
    return 0.0 if cross >= 0 else float(cross)


def _combine(x: float, y: float, phi: float) -> float:
    # Square-and-add of two one-sided Wilson distances, less their covariance.
    return math.sqrt(max(0.0, x * x - 2 * phi * x * y + y * y))


def wald_paired_ci(t: PairedCounts, confidence: float = 0.95) -> Interval:
    """The textbook large-sample interval Δ ± z·√((b + c) − (b − c)²/n)/n (Agresti 2013, §11.1)."""
    n = t.n
    if n == 0:
        return Interval(-1.0, 1.0)
    se = math.sqrt(max(0.0, (t.b + t.c) - (t.b - t.c) ** 2 / n)) / n
    z = z_value(confidence)
    return Interval(t.delta - z * se, t.delta + z * se)


def verdict(ci: Interval, margin: float) -> QualityVerdict:
    """Non-inferiority of B against A with margin m, read from the two-sided 95 % interval on Δ.

    The lower bound above −m is non-inferiority at one-sided α = 0.025; an upper bound below −m
    shows B is worse by more than the margin; otherwise the data cannot tell.
    """
    if ci.low > -margin:
        return "non-inferior"
    if ci.high < -margin:
        return "inferior"
    return "inconclusive"


def n_paired(delta: float, discordance: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Items needed to detect Δ = delta with a two-sided paired (McNemar) test (Connor 1987).

    n = (z_{α/2}·√ψ + z_β·√(ψ − δ²))² / δ², ψ the discordant fraction. None when ψ < δ: so few
    items disagree that a difference of δ is impossible.
    """
    from scipy.stats import norm

    if delta <= 0 or discordance < delta:
        return None
    za, zb = z_value(1 - alpha), float(norm.ppf(power))
    root = za * math.sqrt(discordance) + zb * math.sqrt(discordance - delta * delta)
    return math.ceil(root * root / (delta * delta))


def n_unpaired(delta: float, p: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Items per configuration for a two-sided unpaired two-proportion z-test (Fleiss 2003, no
    continuity correction), accuracy p against p − δ (p + δ when p − δ would fall below 0)."""
    from scipy.stats import norm

    p2 = p - delta if p - delta >= 0 else p + delta
    if delta <= 0 or not 0 <= p2 <= 1:
        return None
    za, zb = z_value(1 - alpha), float(norm.ppf(power))
    pbar = (p + p2) / 2
    root = za * math.sqrt(2 * pbar * (1 - pbar)) + zb * math.sqrt(p * (1 - p) + p2 * (1 - p2))
    return math.ceil(root * root / (delta * delta))
