"""An anytime-valid test of "these statistics come from the calibration's distribution": conformal
p-values turned into a test martingale. The statistics of ``servediff verify``.

    servediff verify --reference ref1.jsonl ref2.jsonl --base-url http://127.0.0.1:8080

Per request i an endpoint gives a statistic s_i (``compare/verify.py``: how far its logprobs or its
greedy text are from the reference's); the calibration gives n values of the same statistic from
pairs of reference runs (the reference configuration against itself, under its own
nondeterminism). The conformal p-value p_i = (1 + #{null ≥ s_i}) / (n + 1) is super-uniform under
H0 when s_i is exchangeable with the calibration values (Vovk, Gammerman & Shafer 2005, ch. 2;
ties are counted against the test, which keeps it conservative).

Each p-value is turned into e-values by the power calibrators e_κ(p) = κ p^(κ−1), κ ∈ (0, 1)
(Vovk & Wang 2021, "E-values: calibration, combination and applications", Ann. Statist. 49(3));
the product over requests of each is a test supermartingale when the p-values are independent
and super-uniform, and so is their average over a grid of κ (the "simple mixture" martingale of
Vovk et al. 2003, "Testing exchangeability on-line", ICML, here a finite average so that it stays
exact). Ville's inequality then bounds P(sup_n M_n ≥ 1/α) ≤ α: the test may look after every
request and stop whenever it likes. Several statistics are combined by averaging their
martingales (an average of test martingales is one): each alone then needs K/α.

The limit, said where it matters (docs/guide/verify.md): given one calibration set, the p-values of
later requests are not independent (they share it), so the guarantee holds on average over the
calibration draw, not conditionally on it; with n calibration values the conditional
distribution of a p-value departs from uniform by about 1/√n (Bates et al. 2023, "Testing for
outliers with conformal p-values", Ann. Statist. 51(1)). ``simulate`` measures the false-alarm
rate on held-out calibration pairs, which is what ``servediff verify --plan`` reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Midpoints of 100 equal slices of (0, 1): the uniform mixture over κ, as a finite average.
KAPPAS = (np.arange(100) + 0.5) / 100
LOG_KAPPAS = np.log(KAPPAS)

Floats = npt.NDArray[np.float64]


def pvalues(stats: Floats, null_sorted: Floats) -> Floats:
    """(1 + #{null ≥ s}) / (n + 1) for each s, ``null_sorted`` ascending; NaN stays NaN (a request
    without the signal is not tested on it)."""
    n = len(null_sorted)
    at_least = n - np.searchsorted(null_sorted, np.nan_to_num(stats, nan=0.0), side="left")
    out: Floats = np.where(np.isnan(stats), np.nan, (1.0 + at_least) / (n + 1.0))
    return out


def _logmeanexp(x: Floats, axis: int) -> Floats:
    top = np.max(x, axis=axis, keepdims=True)
    out: Floats = np.squeeze(top, axis=axis) + np.log(np.mean(np.exp(x - top), axis=axis))
    return out


def log_wealth_path(stats: Floats, nulls: Sequence[Floats]) -> tuple[Floats, Floats]:
    """The test's log wealth after each request, and every p-value.

    ``stats``: one row per request, one column per statistic (NaN: not available on that
    request, which then leaves that statistic's martingale where it was); ``nulls[k]``:
    statistic k's calibration values, sorted (a statistic without any is left out). Each
    statistic's martingale is the average over κ of Π κ p^(κ−1); the test's wealth is the average
    of the statistics' martingales."""
    columns = [k for k, null in enumerate(nulls) if len(null)]
    p = np.full(stats.shape, np.nan)
    if not columns or not len(stats):
        return np.full(len(stats), -np.inf if not columns else 0.0), p
    per_statistic = []
    for k in columns:
        p[:, k] = pvalues(stats[:, k], nulls[k])
        logs = LOG_KAPPAS[None, :] + (KAPPAS[None, :] - 1.0) * np.log(p[:, k])[:, None]
        logs = np.where(np.isnan(p[:, k])[:, None], 0.0, logs)  # no signal: the factor is 1
        per_statistic.append(_logmeanexp(np.cumsum(logs, axis=0), axis=1))
    return _logmeanexp(np.stack(per_statistic, axis=1), axis=1), p


@dataclass(frozen=True, slots=True)
class Stop:
    """Where a sequence of requests stopped: after ``n`` of them (the one that crossed 1/α, or
    the last one), whether it crossed, and the wealth there."""

    n: int
    rejected: bool
    log_wealth: float


def first_crossing(path: Floats, alpha: float) -> Stop:
    """The first request at which the log wealth reached log(1/α), else the last one."""
    hit = np.nonzero(path >= math.log(1.0 / alpha))[0]
    if len(hit):
        return Stop(int(hit[0]) + 1, True, float(path[hit[0]]))
    return Stop(len(path), False, float(path[-1]) if len(path) else 0.0)


Alternative = Callable[[np.random.Generator], Floats]
Nulls = Callable[[Floats], list[Floats]]


@dataclass(frozen=True, slots=True)
class Simulated:
    """``runs`` simulated audits at one shift: the share that rejected by each request count."""

    runs: int
    rejected_by: Floats  # rejected_by[n-1]: share of runs rejected within n requests

    def requests_for(self, power: float) -> int | None:
        """The fewest requests after which at least ``power`` of the runs had rejected."""
        hit = np.nonzero(self.rejected_by >= power)[0]
        return int(hit[0]) + 1 if len(hit) else None


def simulate(
    rows: Floats,
    alternative: Alternative,
    nulls: Nulls,
    alpha: float,
    horizon: int,
    runs: int,
    seed: int,
    replace: bool = True,
) -> Simulated:
    """Audits simulated from the calibration alone. ``rows``: one row per calibration pair, one
    column per statistic; ``alternative(rng)``: the same rows as the alternative would move them
    (``rows`` themselves for no shift, which measures false alarms); ``nulls(rows)``: each
    tested statistic's sorted calibration values. Each run splits the rows at random into a
    calibration half and a held-out half; the endpoint's requests are drawn (with replacement)
    from the held-out half of the alternative's rows and tested against the calibration half.
    Splitting keeps each simulated request out of the null it is tested against, as a real
    endpoint's request is; the null is then half the size the real test uses, which makes the
    plan a little pessimistic.

    ``replace=False`` draws each held-out row at most once (the horizon is then at most the
    held-out half), as a real audit sends each reference item at most once; that is how false
    alarms are measured. Drawing with replacement extrapolates past the reference's items (what a
    plan for small shifts needs), but repeats the few held-out rows, and any chance difference
    between the two halves then builds up like a real shift: measured at α 0.01 on a 50-pair CPU
    calibration, 1.4 % false alarms with replacement over 400 requests."""
    rng = np.random.default_rng(seed)
    n_rows = len(rows)
    if not replace:
        horizon = min(horizon, n_rows - n_rows // 2)
    first = np.full(runs, horizon + 1)
    for r in range(runs):
        order = rng.permutation(n_rows)
        cal, held = order[: n_rows // 2], order[n_rows // 2 :]
        picked = held[rng.integers(0, len(held), size=horizon)] if replace else held[:horizon]
        draws = alternative(rng)[picked]
        stop = first_crossing(log_wealth_path(draws, nulls(rows[cal]))[0], alpha)
        if stop.rejected:
            first[r] = stop.n
    by = np.array([(first <= n).mean() for n in range(1, horizon + 1)], dtype=np.float64)
    return Simulated(runs, by)
