"""Speed statistics past BOOT_MAX items (shadow traffic): the grouped bootstrap and the
order-statistic percentile intervals agree with textbook intervals at the same n."""

from __future__ import annotations

import numpy as np

from servediff.compare import speed as sp

N = 40_000


def latencies() -> np.ndarray:
    return np.random.default_rng(7).lognormal(mean=-1.0, sigma=0.6, size=N)


def test_the_grouped_bootstrap_of_a_mean_matches_the_clt_interval() -> None:
    x = latencies()
    got = sp.mean(list(x))
    assert got is not None
    half = 1.959964 * x.std(ddof=1) / np.sqrt(N)  # the CLT interval, exact enough at this n
    assert got.value == x.mean()
    assert abs((got.high - got.low) / (2 * half) - 1) < 0.15
    assert abs((got.high + got.low) / 2 - x.mean()) < 0.2 * half


def test_order_statistic_intervals_match_an_item_bootstrap() -> None:
    x = latencies()
    p50, p90, p99 = sp.percentiles(list(x))
    rng = np.random.default_rng(1)
    draws = np.percentile(x[rng.integers(0, N, size=(300, N))], sp.PERCENTILES, axis=1)
    for got, d in zip((p50, p90, p99), draws):
        low, high = np.percentile(d, [2.5, 97.5])
        assert got.low < got.value < got.high
        assert abs((got.high - got.low) / (high - low) - 1) < 0.3
        assert got.low < (low + high) / 2 < got.high


def test_small_samples_keep_the_item_bootstrap() -> None:
    x = list(latencies()[: sp.BOOT_MAX])
    rng = np.random.default_rng(sp.SEED)
    draws = np.asarray(x)[rng.integers(0, len(x), size=(sp.RESAMPLES, len(x)))].mean(axis=1)
    got = sp.mean(x)
    assert got is not None
    assert np.isclose(got.low, np.percentile(draws, 2.5)) and np.isclose(got.high, np.percentile(draws, 97.5))
