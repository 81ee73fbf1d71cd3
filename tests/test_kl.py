"""Teacher-forced divergence statistics against direct computations from full logits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import entropy

from servediff.compare.kl import (
    PERCENTILES,
    cluster_bootstrap_mean,
    divergence_exact,
    divergence_topk,
    kl_exact,
    kl_topk_tail,
    log_softmax,
    summarise,
)

V = 300


def _logits(rng: np.random.Generator, n: int, scale: float = 4.0) -> np.ndarray:
    return rng.normal(0.0, scale, size=(n, V))


def _top(row: np.ndarray, k: int) -> dict[int, float]:
    idx = np.argsort(-row)[:k]
    return {int(i): float(row[i]) for i in idx}


def _pair(seed: int, n: int, noise: float) -> tuple[np.ndarray, np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    a = _logits(rng, n)
    b = a + rng.normal(0.0, noise, size=a.shape)
    nxt = [int(t) for t in rng.integers(0, V, size=n)]
    return log_softmax(a), log_softmax(b), nxt


def test_log_softmax_normalises_and_survives_large_logits() -> None:
    rows = log_softmax(np.array([[1000.0, 999.0, -5.0], [0.0, 0.0, 0.0]]))
    assert np.allclose(np.exp(rows).sum(axis=1), 1.0)
    assert rows[1, 0] == pytest.approx(-math.log(3))


def test_exact_kl_matches_scipy_entropy() -> None:
    a, b, _ = _pair(1, 40, 0.5)
    ours = kl_exact(a, b)
    ref = [entropy(np.exp(x), np.exp(y)) for x, y in zip(a, b)]
    assert np.allclose(ours, ref, rtol=1e-9, atol=1e-12)
    assert (ours > 0).all()


def test_a_against_itself_is_exactly_zero() -> None:
    a, _, nxt = _pair(2, 30, 0.5)
    assert (kl_exact(a, a) == 0.0).all()
    for row in a:
        assert kl_topk_tail(_top(row, 20), _top(row, 20)) == 0.0
    s = summarise([divergence_exact(a[:10], a[:10], nxt[:10]), divergence_exact(a[10:], a[10:], nxt[10:])])
    assert s.kl_mean == 0.0 and s.kl_max == 0.0
    assert (s.kl_mean_ci.low, s.kl_mean_ci.high) == (0.0, 0.0)
    assert s.same_top1 == 1.0 and s.dp_mean == 0.0 and s.dp_rms == 0.0 and s.ln_ppl_ratio == 0.0


@pytest.mark.parametrize("k", [1, 5, 20, 100])
@pytest.mark.parametrize("noise", [0.05, 0.5, 3.0])
def test_topk_tail_is_a_lower_bound_of_the_exact_kl(k: int, noise: float) -> None:
    a, b, _ = _pair(3, 50, noise)
    exact = kl_exact(a, b)
    bound = np.array([kl_topk_tail(_top(x, k), _top(y, k)) for x, y in zip(a, b)])
    assert (bound <= exact + 1e-12).all()
    assert (bound >= 0).all()


def test_topk_tail_tightens_with_k_and_is_exact_over_the_whole_vocabulary() -> None:
    a, b, _ = _pair(4, 20, 0.5)
    exact = kl_exact(a, b)
    means = [np.mean([kl_topk_tail(_top(x, k), _top(y, k)) for x, y in zip(a, b)]) for k in (5, 20, 100)]
    assert means[0] < means[2] <= exact.mean() + 1e-12
    full = [kl_topk_tail(_top(x, V), _top(y, V)) for x, y in zip(a, b)]
    assert np.allclose(full, exact, rtol=1e-9, atol=1e-12)


def test_disjoint_top_lists_give_zero_not_a_false_number() -> None:
    assert kl_topk_tail({1: math.log(0.6)}, {2: math.log(0.6)}) == 0.0


def test_summary_matches_direct_numpy() -> None:
    seqs, a_all, b_all, nxt_all = [], [], [], []
    for seed, n in ((5, 12), (6, 30), (7, 7), (8, 21)):
        a, b, nxt = _pair(seed, n, 0.8)
        seqs.append(divergence_exact(a, b, nxt))
        a_all.append(a)
        b_all.append(b)
        nxt_all += nxt
    a, b = np.concatenate(a_all), np.concatenate(b_all)
    rows = np.arange(a.shape[0])
    kl = np.array([entropy(np.exp(x), np.exp(y)) for x, y in zip(a, b)])
    pa, pb = np.exp(a[rows, nxt_all]), np.exp(b[rows, nxt_all])
    s = summarise(seqs)
    assert s.n_sequences == 4 and s.n_positions == 70
    assert s.kl_mean == pytest.approx(kl.mean(), rel=1e-9)
    assert s.kl_max == pytest.approx(kl.max(), rel=1e-9)
    for q in PERCENTILES:
        assert s.kl_percentiles[q] == pytest.approx(np.percentile(kl, q), rel=1e-9)
    assert s.same_top1 == pytest.approx(np.mean(a.argmax(1) == b.argmax(1)))
    assert s.dp_mean == pytest.approx(np.mean(pb - pa))
    assert s.dp_rms == pytest.approx(math.sqrt(np.mean((pb - pa) ** 2)))
    ppl_a, ppl_b = math.exp(-np.mean(np.log(pa))), math.exp(-np.mean(np.log(pb)))
    assert s.ln_ppl_ratio == pytest.approx(math.log(ppl_b / ppl_a), rel=1e-9)
    for ci, point in (
        (s.kl_mean_ci, s.kl_mean),
        (s.same_top1_ci, s.same_top1),
        (s.ln_ppl_ratio_ci, s.ln_ppl_ratio),
    ):
        assert ci.low <= point <= ci.high


def test_topk_path_agrees_with_exact_on_top1_and_next_token() -> None:
    a, b, nxt = _pair(9, 25, 1.0)
    ex = divergence_exact(a, b, nxt)
    rows = np.arange(len(nxt))
    tk = divergence_topk([_top(x, 5) for x in a], [_top(y, 5) for y in b], a[rows, nxt], b[rows, nxt])
    assert (tk.same_top1 == ex.same_top1).all()
    assert (tk.kl <= ex.kl + 1e-12).all()


def test_cluster_bootstrap_is_wider_than_iid_when_sequences_differ() -> None:
    rng = np.random.default_rng(10)
    # each sequence has its own level: positions within a sequence are correlated
    seqs = [np.full(50, rng.exponential(1.0)) + rng.normal(0, 0.01, 50) for _ in range(12)]
    clustered = cluster_bootstrap_mean(seqs, seed=1)
    iid = cluster_bootstrap_mean([np.array([x]) for x in np.concatenate(seqs)], seed=1)
    assert clustered.high - clustered.low > 3 * (iid.high - iid.low)
    assert cluster_bootstrap_mean(seqs, seed=1) == clustered  # seeded: reproducible


def test_cluster_bootstrap_edge_cases() -> None:
    one = cluster_bootstrap_mean([np.array([1.0, 3.0])])
    assert (one.low, one.high) == (2.0, 2.0)
    assert math.isnan(cluster_bootstrap_mean([np.array([])]).low)


def test_bad_shapes_and_empty_corpus_are_refused() -> None:
    a, b, nxt = _pair(11, 5, 0.1)
    with pytest.raises(ValueError):
        divergence_exact(a, b[:4], nxt)
    with pytest.raises(ValueError):
        summarise([])
