"""Teacher-forced divergence between two configurations: pure functions over scored positions.

Both configurations score the *same* fixed token sequences; at every position each gives a
next-token distribution (P under A, Q under B). Per position we compute KL(P‖Q), whether the two
argmaxes agree, and the change in probability of the text's own next token; over a corpus we
summarise them the way ``llama-perplexity --kl-divergence`` does (mean, max, percentiles
99.9/99/95/90/50/10/5/1/0.1, "same top p", Δp, ln(PPL_B/PPL_A)).

Two ways to get KL:

- *exact*, from full-vocabulary log-softmax vectors (the embedded engine has them);
- *top-k + tail*, from what an API returns (the top-k logprobs of each side): the tokens in both
  top-k lists keep their own probabilities, everything else is pooled into one tail bucket.
  Pooling outcomes into a coarser partition can only lose information (log-sum inequality /
  data-processing inequality, Cover & Thomas 2006, Thm. 2.7.1), so this is a **lower bound** of
  the full-vocabulary KL, equal to it when the top-k lists hold (nearly) all the mass.

Intervals: the tokens of one sequence are strongly correlated (one early divergence shifts the
whole tail), so treating positions as iid draws overstates the evidence many times over. Every
interval here is a cluster (sequence-level) percentile bootstrap: resample whole sequences with
replacement and recompute the position-weighted statistic (Davison & Hinkley 1997, §3.8; Field &
Welsh 2007, "Bootstrapping clustered data"). With one position per sequence it is the ordinary
bootstrap. The generator is seeded, so a report is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from servediff.compare.stats import Interval

PERCENTILES: tuple[float, ...] = (99.9, 99.0, 95.0, 90.0, 50.0, 10.0, 5.0, 1.0, 0.1)

# A tail bucket of B below this is floored: a smaller Q_tail only raises KL, so flooring keeps
# the top-k + tail value a lower bound, and it avoids an infinity from float rounding when the
# top-k lists of B cover the whole vocabulary.
_TAIL_FLOOR = 1e-30


@dataclass(frozen=True, slots=True)
class SequenceDivergence:
    """Per-position numbers of one sequence scored under A (control) and B (candidate).

    ``kl``: KL(A‖B) in nats; ``same_top1``: both argmaxes agree; ``logp_a``/``logp_b``: log
    probability of the text's next token under each side. All arrays have one entry per position.
    """

    kl: np.ndarray
    same_top1: np.ndarray
    logp_a: np.ndarray
    logp_b: np.ndarray

    @property
    def n(self) -> int:
        return int(self.kl.size)


@dataclass(frozen=True, slots=True)
class KlSummary:
    """A corpus of sequences summarised; intervals are clustered by sequence."""

    n_sequences: int
    n_positions: int
    kl_mean: float
    kl_mean_ci: Interval
    kl_max: float
    kl_percentiles: dict[float, float]
    same_top1: float
    same_top1_ci: Interval
    dp_mean: float
    dp_mean_ci: Interval
    dp_rms: float
    dp_percentiles: dict[float, float]
    ln_ppl_ratio: float
    ln_ppl_ratio_ci: Interval


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (max-shifted so large logits do not overflow)."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    out: np.ndarray = x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    return out


def kl_exact(logp_a: np.ndarray, logp_b: np.ndarray) -> np.ndarray:
    """KL(P‖Q) = Σ_v P(v)·(log P(v) − log Q(v)) per row, from full log-softmax rows.

    Tokens with P(v) = 0 (log P = −inf) contribute 0 by the convention 0·log 0 = 0. Tiny negative
    values from rounding (A == B up to the last bit) are clipped to 0: KL is never negative.
    """
    a = np.asarray(logp_a, dtype=np.float64)
    b = np.asarray(logp_b, dtype=np.float64)
    p = np.exp(a)
    # np.where evaluates both branches: 0·(−inf) is NaN where P(v) = 0, and is then discarded
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0, p * (a - b), 0.0)
    kl: np.ndarray = np.maximum(terms.sum(axis=-1), 0.0)
    return kl


def kl_topk_tail(top_a: Mapping[int, float], top_b: Mapping[int, float]) -> float:
    """KL(P‖Q) over the tokens in both top-k lists plus one tail bucket: a lower bound.

    ``top_a``/``top_b`` map token id → logprob (each side's top-k). The shared tokens keep their
    probabilities; the rest of each side's mass (1 − Σ shared) is one bucket. If the lists share
    no token the value is the KL of the two-point split {shared = ∅, tail} = 0: the lower bound
    then says nothing, which is honest. Rounding can make a tail slightly negative; it is
    clipped at 0 (P side) or floored (Q side), both of which keep the bound.
    """
    shared = top_a.keys() & top_b.keys()
    kl = 0.0
    mass_a = mass_b = 0.0
    for t in shared:
        la, lb = top_a[t], top_b[t]
        pa = math.exp(la)
        kl += pa * (la - lb)
        mass_a += pa
        mass_b += math.exp(lb)
    tail_a = max(0.0, 1.0 - mass_a)
    tail_b = max(_TAIL_FLOOR, 1.0 - mass_b)
    if tail_a > 0.0:
        kl += tail_a * (math.log(tail_a) - math.log(tail_b))
    return max(kl, 0.0)


def divergence_exact(
    logp_a: np.ndarray, logp_b: np.ndarray, next_tokens: Sequence[int]
) -> SequenceDivergence:
    """One sequence from full log-softmax matrices (positions × vocabulary) of A and B."""
    a = np.asarray(logp_a, dtype=np.float64)
    b = np.asarray(logp_b, dtype=np.float64)
    if a.shape != b.shape or a.shape[0] != len(next_tokens):
        raise ValueError(f"shapes differ: A {a.shape}, B {b.shape}, {len(next_tokens)} next tokens")
    rows = np.arange(a.shape[0])
    nxt = np.asarray(next_tokens, dtype=np.int64)
    return SequenceDivergence(
        kl=kl_exact(a, b),
        same_top1=a.argmax(axis=-1) == b.argmax(axis=-1),
        logp_a=a[rows, nxt],
        logp_b=b[rows, nxt],
    )


def divergence_topk(
    top_a: Sequence[Mapping[int, float]],
    top_b: Sequence[Mapping[int, float]],
    logp_a: Sequence[float] | np.ndarray,
    logp_b: Sequence[float] | np.ndarray,
) -> SequenceDivergence:
    """One sequence from per-position top-k maps (best first) and next-token logprobs."""
    if not len(top_a) == len(top_b) == len(logp_a) == len(logp_b):
        raise ValueError("A and B must score the same positions")
    return SequenceDivergence(
        kl=np.array([kl_topk_tail(x, y) for x, y in zip(top_a, top_b)], dtype=np.float64),
        same_top1=np.array([_argmax(x) == _argmax(y) for x, y in zip(top_a, top_b)], dtype=bool),
        logp_a=np.asarray(logp_a, dtype=np.float64),
        logp_b=np.asarray(logp_b, dtype=np.float64),
    )


def _argmax(top: Mapping[int, float]) -> int:
    return max(top.items(), key=lambda kv: kv[1])[0] if top else -1


def cluster_bootstrap_mean(
    values: Sequence[np.ndarray], confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> Interval:
    """Percentile interval of the position-weighted mean, resampling whole sequences.

    The statistic is Σ values / Σ positions over the resampled sequences (a ratio estimator,
    as the point estimate pools all positions). Fewer than two sequences: no spread can be
    estimated, the interval is the point itself (NaN when there is nothing at all).
    """
    sums = np.array([float(np.sum(v)) for v in values], dtype=np.float64)
    counts = np.array([v.size for v in values], dtype=np.float64)
    total = counts.sum()
    if total == 0:
        return Interval(math.nan, math.nan)
    point = float(sums.sum() / total)
    if len(values) < 2:
        return Interval(point, point)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    n = counts[idx].sum(axis=1)
    stats = sums[idx].sum(axis=1) / np.where(n > 0, n, 1.0)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return Interval(min(float(low), point), max(float(high), point))


def summarise(
    seqs: Sequence[SequenceDivergence], confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> KlSummary:
    """Corpus statistics, position-weighted like llama-perplexity, intervals clustered by sequence.

    Δp = P_B(next) − P_A(next); ln(PPL_B/PPL_A) = mean over positions of (log P_A − log P_B).
    Raises ValueError on an empty corpus: there is no divergence to report.
    """
    seqs = [s for s in seqs if s.n]
    if not seqs:
        raise ValueError("no scored positions")
    kl = np.concatenate([s.kl for s in seqs])
    dp_seq = [np.exp(s.logp_b) - np.exp(s.logp_a) for s in seqs]
    dp = np.concatenate(dp_seq)
    same = [s.same_top1.astype(np.float64) for s in seqs]
    lnr = [s.logp_a - s.logp_b for s in seqs]

    def ci(values: Sequence[np.ndarray]) -> Interval:
        return cluster_bootstrap_mean(values, confidence, n_boot, seed)

    return KlSummary(
        n_sequences=len(seqs),
        n_positions=int(kl.size),
        kl_mean=float(kl.mean()),
        kl_mean_ci=ci([s.kl for s in seqs]),
        kl_max=float(kl.max()),
        kl_percentiles=_percentiles(kl),
        same_top1=float(np.concatenate(same).mean()),
        same_top1_ci=ci(same),
        dp_mean=float(dp.mean()),
        dp_mean_ci=ci(dp_seq),
        dp_rms=float(np.sqrt(np.mean(dp * dp))),
        dp_percentiles=_percentiles(dp),
        ln_ppl_ratio=float(np.concatenate(lnr).mean()),
        ln_ppl_ratio_ci=ci(lnr),
    )


def _percentiles(x: np.ndarray) -> dict[float, float]:
    return {q: float(v) for q, v in zip(PERCENTILES, np.percentile(x, PERCENTILES))}


def log_histogram(
    values: np.ndarray, low: float = 1e-8, high: float = 1e2, per_decade: int = 2
) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Bin edges (log-spaced from ``low`` to ``high``) and counts of non-negative values.

    KL spans many decades (an A/A pair is 0, a requantised checkpoint 1e-3 to 10), so the bins
    are logarithmic. Values below ``low`` (0 among them: log scale has no 0) count in the first
    bin, values above ``high`` in the last, so the counts always sum to the number of values.
    """
    decades = math.log10(high) - math.log10(low)
    edges = np.logspace(math.log10(low), math.log10(high), round(decades * per_decade) + 1)
    clipped = np.clip(np.asarray(values, dtype=np.float64), low, high)
    counts, _ = np.histogram(clipped, bins=edges)
    return tuple(float(e) for e in edges), tuple(int(c) for c in counts)
