"""The sampled-run statistics against direct computations: pass@k and pass^k by enumerating
every choice of k draws, the item-level intervals against scipy's t tests."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from servediff.compare.sampled import item_of, mean_over_items, paired_difference, pass_all_k, pass_at_k
from servediff.compare.stats import cluster_se


def brute(n: int, c: int, k: int) -> tuple[float, float]:
    """Share of the C(n, k) subsets of draws with at least one right, and with all right."""
    draws = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(draws, k))
    return sum(any(s) for s in subsets) / len(subsets), sum(all(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_and_pass_all_k_match_enumeration(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            any_right, all_right = brute(n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(any_right, abs=1e-12)
            assert pass_all_k(n, c, k) == pytest.approx(all_right, abs=1e-12)
            closed = 1 - math.comb(n - c, k) / math.comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(closed, abs=1e-12)


def test_pass_at_k_edges() -> None:
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # k = 1 is the pass rate
    assert pass_all_k(10, 3, 1) == pytest.approx(0.3)
    assert 0 < pass_at_k(200, 3, 100) < 1  # the product form does not overflow
    for bad in ((3, 4, 1), (3, 1, 4), (3, 1, 0)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_item_interval_is_scipys_t_interval() -> None:
    rng = np.random.default_rng(3)
    rates = list(rng.integers(0, 9, size=40) / 8)
    est = mean_over_items(rates)
    ref = sps.ttest_1samp(rates, 0).confidence_interval(0.95)
    assert (est.ci.low, est.ci.high) == pytest.approx((ref.low, ref.high))
    # with k draws per item and the item as cluster, its standard error is Miller's cluster
    # SE over the draws, up to the n/(n-1) of the sample variance
    draws = [d < r * 8 for r in rates for d in range(8)]
    clusters = [str(i) for i in range(40) for _ in range(8)]
    se = (est.ci.high - est.mean) / sps.t.ppf(0.975, 39)
    assert se == pytest.approx(cluster_se(draws, clusters) * math.sqrt(40 / 39))
    assert math.isnan(mean_over_items([0.5]).ci.low) and mean_over_items([]).n == 0


def test_paired_difference_is_scipys_paired_t() -> None:
    rng = np.random.default_rng(4)
    a = {f"q{i}": (8, int(x)) for i, x in enumerate(rng.integers(0, 9, size=30))}
    b = {
        f"q{i}": (8, min(8, c + int(x)))
        for (i, (_, c)), x in zip(enumerate(a.values()), rng.integers(0, 2, 30))
    }
    b["only-b"] = (8, 8)  # an item only one side scored is not paired
    est = mean_over_items(paired_difference(a, b))
    rb, ra = [b[i][1] / 8 for i in a], [a[i][1] / 8 for i in a]
    ref = sps.ttest_rel(rb, ra).confidence_interval(0.95)
    assert est.n == 30 and (est.ci.low, est.ci.high) == pytest.approx((ref.low, ref.high))


def test_item_of_reads_metadata_then_the_id() -> None:
    assert item_of("q1#3", {"item": "q1", "sample": 3}) == "q1"
    assert item_of("a#b#2", {}) == "a#b"
