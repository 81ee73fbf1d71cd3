"""Miller's variance for k draws per item against an exact enumeration and a simulation; the
estimated variance parts against their true values; the items needed against the power that a
simulation of the non-inferiority verdict reaches; paired against unpaired on coupled draws."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from servediff.compare.stats.sample_size import (
    VarianceParts,
    items_needed,
    mean_variance,
    sizing,
    variance_parts,
)

# A population of items: expected score p with probability w.
POPULATION = ((0.2, 0.5), (0.9, 0.3), (0.5, 0.2))


def true_parts() -> VarianceParts:
    mean = sum(p * w for p, w in POPULATION)
    between = sum(w * (p - mean) ** 2 for p, w in POPULATION)
    within = sum(w * p * (1 - p) for p, w in POPULATION)
    return VarianceParts(between, within)


@pytest.mark.parametrize(("n", "k"), [(1, 1), (1, 3), (2, 2), (3, 1), (2, 3)])
def test_miller_variance_is_the_exact_variance_of_the_mean(n: int, k: int) -> None:
    """Enumerate every choice of n items and every outcome of their k draws: the variance of
    the mean of per-item means is exactly (Var(x) + E[σ²]/k)/n."""
    first = second = 0.0
    for items in itertools.product(POPULATION, repeat=n):
        weight = math.prod(w for _, w in items)
        for draws in itertools.product(range(k + 1), repeat=n):  # right draws per item
            prob = math.prod(math.comb(k, c) * p**c * (1 - p) ** (k - c) for (p, _), c in zip(items, draws))
            mean = sum(c / k for c in draws) / n
            first += weight * prob * mean
            second += weight * prob * mean * mean
    assert second - first**2 == pytest.approx(mean_variance(true_parts(), n, k), rel=1e-12)


def simulate(rng: np.random.Generator, n: int, k: int, reps: int) -> np.ndarray:
    """reps × n × k right/wrong draws from items drawn from POPULATION."""
    ps, ws = np.array([p for p, _ in POPULATION]), np.array([w for _, w in POPULATION])
    p = rng.choice(ps, size=(reps, n), p=ws)
    return (rng.random((reps, n, k)) < p[..., None]).astype(float)


def test_estimated_parts_recover_the_truth() -> None:
    draws = simulate(np.random.default_rng(1), 4000, 5, 1)[0]
    est, truth = variance_parts(draws.tolist()), true_parts()
    assert est.between == pytest.approx(truth.between, abs=0.006)
    assert est.within == pytest.approx(truth.within, abs=0.006)
    with pytest.raises(ValueError, match="two items"):
        variance_parts([[1.0, 0.0]])


def test_items_needed_gives_the_stated_power() -> None:
    """Two configurations with the same items and uncoupled draws (true Δ = 0): at the paired
    n for margin m, the t interval's lower bound clears −m in about 80 % of simulated studies."""
    rng, k, margin = np.random.default_rng(7), 4, 0.1
    truth = true_parts()
    # per-draw difference of two independent draws of the same item: no between part, within doubled
    n = items_needed(VarianceParts(0.0, 2 * truth.within).per_item(k), margin)
    assert n is not None and 10 < n < 200
    reps = 4000
    ps, ws = np.array([p for p, _ in POPULATION]), np.array([w for _, w in POPULATION])
    p = rng.choice(ps, size=(reps, n), p=ws)[..., None]
    diff = ((rng.random((reps, n, k)) < p).astype(float) - (rng.random((reps, n, k)) < p)).mean(axis=2)
    low = diff.mean(axis=1) - student_t.ppf(0.975, n - 1) * diff.std(axis=1, ddof=1) / math.sqrt(n)
    assert (low > -margin).mean() == pytest.approx(0.8, abs=0.03)


def test_items_needed_edges() -> None:
    assert items_needed(0.0, 0.05) is None
    assert items_needed(1e-9, 0.05) == 2
    with pytest.raises(ValueError, match="margin"):
        items_needed(0.1, 0)


def test_coupled_draws_need_fewer_items_than_unpaired() -> None:
    """B reproduces A's draw (same seed) 90 % of the time, else draws afresh: the per-draw
    difference is mostly 0, so the paired design needs far fewer items than the unpaired one,
    and more draws per item never need more items."""
    rng = np.random.default_rng(3)
    a_draws = simulate(rng, 300, 8, 1)[0]
    fresh = simulate(rng, 300, 8, 1)[0]
    b_draws = np.where(rng.random(a_draws.shape) < 0.9, a_draws, fresh)
    a = {f"q{i}": {j: bool(x) for j, x in enumerate(row)} for i, row in enumerate(a_draws)}
    b = {f"q{i}": {j: bool(x) for j, x in enumerate(row)} for i, row in enumerate(b_draws)}
    z = sizing(a, b, 8, 0.05)
    assert z is not None and [d.k for d in z.sizes] == [1, 4, 8, 16]
    for d in z.sizes:
        assert d.paired is not None and d.unpaired is not None and d.paired * 3 < d.unpaired
    paired = [d.paired or 0 for d in z.sizes]
    assert paired == sorted(paired, reverse=True)
    # identical runs: nothing varies, any number of items will do
    same = sizing(a, a, 8, 0.05)
    assert same is not None and all(d.paired is None for d in same.sizes)
