"""The gate's confidence sequence against the published construction and Ville's inequality."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servediff.compare.stats.sequential import Tally, bound, decide, log_capital


def dkelly_direct(d: np.ndarray, m: float, grid: int, side: int) -> np.ndarray:
    """Waudby-Smith & Ramdas (2023) §5 diversified Kelly capital, item by item, on X = (D+1)/2 in
    [0, 1] with null mean μ = (m+1)/2 and bets λ_g = g/((G+1)μ) (upper side: g/((G+1)(1−μ))),
    as written in the paper (and in confseq's ``dKelly_cs``)."""
    x, mu = (d + 1) / 2, (m + 1) / 2
    g = np.arange(1, grid + 1) / (grid + 1)
    lam = g / mu if side > 0 else g / (1 - mu)
    factors = 1 + side * np.outer(x - mu, lam)  # items × grid
    return np.log(np.cumprod(factors, axis=0).mean(axis=1))


@pytest.mark.parametrize(("m", "side"), [(-0.02, 1), (-0.02, -1), (0.3, 1), (-0.5, -1)])
def test_capital_from_counts_equals_the_item_by_item_product(m: float, side: int) -> None:
    rng = np.random.default_rng(3)
    d = rng.choice([-1, 0, 1], size=400, p=[0.05, 0.9, 0.05])
    direct = dkelly_direct(d, m, 100, side)
    for n in (1, 17, 400):
        t = Tally(c=int((d[:n] == 1).sum()), b=int((d[:n] == -1).sum()), z=int((d[:n] == 0).sum()))
        assert log_capital(t, m, side) == pytest.approx(direct[n - 1], abs=1e-9)


def test_bounds_are_the_edges_of_the_rejected_set() -> None:
    t = Tally(c=9, b=3, z=188)
    low, high = bound(t, 0.05, +1), bound(t, 0.05, -1)
    assert -1 < low < t.delta < high < 1
    assert log_capital(t, low - 1e-4, +1) >= math.log(20) > log_capital(t, low + 1e-4, +1)
    assert log_capital(t, high + 1e-4, -1) >= math.log(20) > log_capital(t, high - 1e-4, -1)


def test_no_items_bound_nothing() -> None:
    t = Tally(0, 0, 0)
    assert bound(t, 0.05, +1) == pytest.approx(-1, abs=1e-5)
    assert bound(t, 0.05, -1) == pytest.approx(1, abs=1e-5)
    assert decide(t, 0.02, 0.05) is None


def test_identical_items_pass_once_enough_agree() -> None:
    # All items agree: the capital at m = −δ grows at most like (1/(1−δ))^n, so a 20 pp margin
    # at α = 0.05 needs log 20 / log 1.25 ≈ 13.4 items at the very least.
    assert decide(Tally(0, 0, 13), 0.2, 0.05) is None
    n = next(n for n in range(1, 100) if decide(Tally(0, 0, n), 0.2, 0.05) == "pass")
    assert 14 <= n <= 30


def test_a_candidate_that_loses_everything_fails() -> None:
    assert decide(Tally(c=0, b=12, z=8), 0.05, 0.05) == "fail"


def test_coverage_under_continuous_monitoring() -> None:
    # Ville: P(the sequence ever excludes the true Δ) ≤ α, looking after every item.
    rng = np.random.default_rng(11)
    runs, n, alpha, true = 400, 600, 0.05, -0.02
    d = rng.choice([-1, 0, 1], size=(runs, n), p=[0.03, 0.96, 0.01])  # Δ = −0.02
    missed = 0
    for row in d:
        c, b = np.cumsum(row == 1), np.cumsum(row == -1)
        t = [Tally(int(c[i]), int(b[i]), i + 1 - int(c[i]) - int(b[i])) for i in range(0, n, 5)]
        missed += any(log_capital(x, true, +1) >= math.log(1 / alpha) for x in t)
    assert missed / runs <= alpha
