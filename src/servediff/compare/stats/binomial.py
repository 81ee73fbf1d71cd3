"""Exact binomial bounds and a throughput ratio: the numbers an audit's verdict stands on.

    servediff audit --base-url URL --control-url URL --trials 200

"No divergence in N trials" is not "deterministic": it bounds the divergence rate. With k
divergent trials out of n, the Clopper–Pearson interval inverts two one-sided binomial tests, so
its coverage is at least the nominal level for every true rate (it is conservative, never
liberal). An audit claims only an upper bound, so it uses the one-sided bound: with k = 0 it has
the closed form 1 − α^(1/n), about 3/n (the "rule of three": ≤ 0.3 % at 95 % after 1,000 clean
trials).

The cost of a promise is a ratio of throughputs measured in rounds (each round a wall-clock
tokens/s). Throughput is multiplicative, so the interval is Welch's t on log throughput, turned
back into a ratio: it does not assume both configurations vary alike.

References: Clopper & Pearson (1934), "The use of confidence or fiducial limits illustrated in
the case of the binomial", Biometrika 26(4); Hanley & Lippman-Hand (1983), "If nothing goes
wrong, is everything all right?", JAMA 249(13) for the rule of three; Welch (1947), "The
generalization of 'Student's' problem when several different population variances are involved".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# scipy.stats is imported inside the functions that use it: importing it costs ~0.6 s, which a
# report that needs none of them (a shadow compare) should not pay.


@dataclass(frozen=True, slots=True)
class Bound:
    """A rate's point estimate and its interval at ``confidence`` (``low`` 0 for a one-sided bound)."""

    k: int
    n: int
    rate: float
    low: float
    high: float
    confidence: float


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> Bound:
    """The two-sided exact interval for k successes in n trials: Beta(α/2; k, n−k+1) and
    Beta(1−α/2; k+1, n−k), with the bound at 0 (k = 0) or 1 (k = n) exact."""
    from scipy.stats import beta

    _check(k, n, confidence)
    alpha = 1.0 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return Bound(k, n, k / n, low, high, confidence)


def upper_bound(k: int, n: int, confidence: float = 0.95) -> Bound:
    """The one-sided exact upper bound on the rate: the p at which P(X ≤ k | n, p) = 1 − confidence.
    For k = 0 it is 1 − (1 − confidence)^(1/n)."""
    from scipy.stats import beta

    _check(k, n, confidence)
    alpha = 1.0 - confidence
    if k == n:
        high = 1.0
    elif k == 0:
        high = 1.0 - alpha ** (1.0 / n)  # closed form: more exact than the Beta quantile near 0
    else:
        high = float(beta.ppf(confidence, k + 1, n - k))
    return Bound(k, n, k / n, 0.0, high, confidence)


def _check(k: int, n: int, confidence: float) -> None:
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 ≤ k ≤ n and n > 0 (k {k}, n {n})")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), not {confidence}")


@dataclass(frozen=True, slots=True)
class Ratio:
    """a's mean throughput ÷ b's (geometric means over rounds) and its interval."""

    ratio: float
    low: float
    high: float
    confidence: float
    rounds_a: int
    rounds_b: int


def throughput_ratio(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Ratio | None:
    """Ratio of geometric-mean throughputs a/b with Welch's interval on log throughput; None when
    a side has fewer than two positive rounds (no variance, no interval)."""
    from scipy.stats import t as student_t

    la = [math.log(x) for x in a if x > 0]
    lb = [math.log(x) for x in b if x > 0]
    if len(la) < 2 or len(lb) < 2:
        return None
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    va = sum((x - ma) ** 2 for x in la) / (len(la) - 1) / len(la)
    vb = sum((x - mb) ** 2 for x in lb) / (len(lb) - 1) / len(lb)
    se = math.sqrt(va + vb)
    diff = ma - mb
    if se == 0:
        return Ratio(math.exp(diff), math.exp(diff), math.exp(diff), confidence, len(la), len(lb))
    # Welch–Satterthwaite degrees of freedom
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
    half = float(student_t.ppf(0.5 + confidence / 2, df)) * se
    return Ratio(math.exp(diff), math.exp(diff - half), math.exp(diff + half), confidence, len(la), len(lb))
