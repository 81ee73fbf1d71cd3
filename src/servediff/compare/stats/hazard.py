"""Divergence hazard: how often, per generated token, two configurations part ways.

    servediff compare runs/*.jsonl --md report.md     # the "hazard" line of the measured section

Each compared completion is a survival time: the tokens generated until the first differing
token (an event at token t + 1 when token t differs), or, when the two completions are identical,
all of its tokens (censored). Under a constant per-token rate λ the number of events given the
exposure E (tokens at risk) is Poisson(λE), so λ̂ = events / E with the exact (Garwood) interval
from the Gamma/chi-square quantiles. The implied probability that an L-token completion diverges
is 1 − exp(−λL): it is why a 1-token multiple-choice answer rarely flips while a 300-token answer
often does. That probability is given only for lengths the compared completions reached: the
constant rate is an assumption that answers of at most 16 tokens cannot check at token 300, so
past the longest stretch at risk the horizons stop there (``HazardView.of``). Pure functions;
scipy.special for the quantiles.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter

HORIZONS = (1, 10, 300)


@dataclass(frozen=True, slots=True)
class Hazard:
    """Per-token divergence rate with its exact interval. ``lower`` is 0 when there was no event:
    then only the one-sided upper bound (at the same confidence) is meaningful."""

    events: int
    exposure: int  # tokens at risk
    rate: float
    lower: float
    upper: float
    confidence: float = 0.95

    @property
    def upper_bound_only(self) -> bool:
        return self.events == 0

    def per_1000(self) -> tuple[float, float, float]:
        return self.rate * 1000, self.lower * 1000, self.upper * 1000

    # The rate as a report shows it, per 1,000 tokens: properties, so summary.json holds each one.
    @property
    def rate_1000(self) -> float:
        return self.rate * 1000

    @property
    def low_1000(self) -> float:
        return self.lower * 1000

    @property
    def high_1000(self) -> float:
        return self.upper * 1000

    def p_within(self, length: int) -> tuple[float, float, float]:
        """P(an L-token completion diverges): point estimate, lower, upper."""
        return tuple(-math.expm1(-r * length) for r in (self.rate, self.lower, self.upper))  # type: ignore[return-value]


def poisson_rate_interval(events: int, exposure: float, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided interval for a Poisson rate (Garwood 1936); with no event, (0, one-sided bound).

    The no-event upper bound is one-sided at ``confidence``: −ln(1 − confidence) / E, the "rule of
    three" (≈ 3 / E at 95 %), since a zero count cannot put mass below 0.
    """
    if exposure <= 0:
        raise ValueError("exposure must be positive")
    if events < 0:
        raise ValueError("events must be >= 0")
    alpha = 1 - confidence
    if events == 0:
        return 0.0, _chi2_ppf(confidence, 2) / 2 / exposure
    lower = _chi2_ppf(alpha / 2, 2 * events) / 2 / exposure
    upper = _chi2_ppf(1 - alpha / 2, 2 * events + 2) / 2 / exposure
    return lower, upper


def _chi2_ppf(q: float, df: int) -> float:
    """``scipy.stats.chi2.ppf(q, df)`` for 0 < q < 1, computed as scipy.stats computes it
    (2 · gammaincinv(df / 2, q)), so to the same bits: importing scipy.stats costs ~0.6 s of every
    compare, scipy.special a third of that."""
    from scipy.special import gammaincinv

    return 2 * float(gammaincinv(df / 2, q))


def estimate(events: int, exposure: int, confidence: float = 0.95) -> Hazard:
    lower, upper = poisson_rate_interval(events, exposure, confidence)
    return Hazard(events, exposure, events / exposure, lower, upper, confidence)


_TOKENS, _DIVERGED = itemgetter(0), itemgetter(1)


def survival(times: Iterable[tuple[int, bool]]) -> tuple[int, int]:
    """(events, exposure) from (tokens at risk, diverged) per completion pair."""
    times = times if isinstance(times, (list, tuple)) else list(times)
    # Summed in C: a million of them in a shadow compare.
    return sum(map(_DIVERGED, times)), sum(map(_TOKENS, times))


def kaplan_meier(times: Iterable[tuple[int, bool]]) -> tuple[list[float], list[float]]:
    """The step function S(x) = P(the first x tokens are identical), at x = 0 and at each event.

    ``times`` are (tokens at risk, diverged) as for ``survival``: a divergence at token t (0-based)
    is an event at t + 1; an identical pair is censored at its length."""
    # The same counts as summing over every pair at each event time, from one sorted list of
    # lengths (at a million pairs with tens of thousands of event times, the sums never ended).
    times = times if isinstance(times, (list, tuple)) else list(times)
    lengths = sorted(map(_TOKENS, times))
    events = Counter(compress(map(_TOKENS, times), map(_DIVERGED, times)))
    xs, ys, surv = [0.0], [1.0], 1.0
    for t in sorted(events):
        at_risk = len(lengths) - bisect_left(lengths, t)
        surv *= 1.0 - events[t] / at_risk
        xs.append(float(t))
        ys.append(surv)
    return xs, ys


@dataclass(frozen=True, slots=True)
class Horizon:
    length: int
    p: float
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class HazardView:
    """A hazard in the units a reader compares: divergences per 1,000 tokens at risk with the
    interval, and P(a completion of each ``HORIZONS`` length diverges)."""

    events: int
    exposure: int
    per_1000: float
    low_1000: float
    high_1000: float
    confidence: float
    upper_bound_only: bool
    horizons: tuple[Horizon, ...]
    # The most tokens any pair was compared over (tokens at risk: to its first divergence, or
    # the whole completion where the pair is identical); None: not known.
    longest: int | None = None

    @classmethod
    def of(cls, h: Hazard | None, longest: int | None = None) -> HazardView | None:
        """The view of a hazard: its rate per 1,000 tokens and P(divergence) at each horizon,
        the horizons cut at ``longest`` (the longest completion compared, which becomes the
        last horizon): no extrapolation past what the suite reached."""
        if h is None:
            return None
        rate, low, high = h.per_1000()
        lengths: tuple[int, ...] = HORIZONS
        if longest is not None and 0 < longest < HORIZONS[-1]:
            lengths = (*(n for n in HORIZONS if n < longest), longest)
        horizons = tuple(Horizon(n, *h.p_within(n)) for n in lengths)
        return cls(h.events, h.exposure, rate, low, high, h.confidence, h.upper_bound_only, horizons, longest)


def pair_hazard(times: Sequence[tuple[int, bool] | None], n_unlocated: int = 0) -> tuple[Hazard | None, int]:
    """The hazard over the usable survival times, and how many items had no token data.

    No hazard at all when a divergence cannot be placed at a token: leaving its item out while
    the identical items' tokens count as exposure would understate the rate (with no divergence
    placed, it would read "no divergence" at a million items of which 30 % diverged). An identical
    item without a token count is left out harmlessly: it carries no event."""
    usable = [t for t in times if t is not None]
    left_out = len(times) - len(usable)
    if n_unlocated:
        return None, left_out
    events, exposure = survival(usable)
    return (estimate(events, exposure) if exposure > 0 else None), left_out
