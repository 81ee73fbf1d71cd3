"""The speedup's interval when a configuration ran more than once: over the runs, not the items.

    servediff report runs/*.jsonl --md report.md      # the verdicts' speed cell, the Speed section

A run's throughput moves from one rerun to the next by more than the items' bootstrap can see:
llama-server at 1 in flight gave 272 and 326 tokens/s in two repeats with byte-identical
outputs, both outside the pooled runs' item interval [283, 309]. The item bootstrap says how
precisely *these* runs were measured, not where a rerun would land; a speedup is a claim about
reruns. So:

- both sides ran at least twice: Welch's t interval on the difference of the sides' mean log
  per-run throughput (Satterthwaite's degrees of freedom), exponentiated: a ratio of geometric
  means with an interval that includes the run-to-run variance of each side;
- one side ran once: Student's t with the other side's run-to-run spread (k − 1 degrees of
  freedom), assuming both sides' runs scatter alike;
- one run each: no run-to-run spread can be estimated. The item bootstrap's interval
  (``speed.speedup``) is kept with basis "items" and the report says it covers item sampling
  only.

Each run's throughput is over the item keys every run of both sides completed (so a rerun is
measured on the same items), Σ tokens / Σ latency × the run's mean in-flight, as ``speed.rates``.
The choice was made by simulation (``bench/speed_sim.py``, BENCHMARKS.md "Speedup intervals
across reruns"): comparing a configuration with itself under the run-to-run noise of the
committed llama-server sweeps' repeats, this interval covers 1.0 in 95–98 % of simulated pairs
(2 + 1, 2 + 2 and 3 + 3 runs); the pooled item bootstrap in 41–57 %, and a two-level bootstrap
(runs, then items) in 63–91 %: resampling two runs with replacement halves their variance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from servediff.compare import speed as sp

SpeedupBasis = Literal["runs", "items"]
CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Speedup(sp.Interval):
    """B's output tokens/s ÷ A's. ``basis`` "runs": the interval includes run-to-run variance
    (t over per-run throughputs); "items": one run each, the item bootstrap only."""

    basis: SpeedupBasis = "items"
    runs: tuple[int, int] = (1, 1)  # runs of A, of B


def run_rates(runs: Sequence[sp.Items], keys: frozenset[str]) -> np.ndarray:
    """Each run's output tokens/s over ``keys`` (Σ tokens / Σ latency × its in-flight)."""
    out = []
    for items in runs:
        rows = np.fromiter((k in keys for k in items.keys), bool, len(items))
        busy = float(items.latency[rows].sum())
        if items.in_flight is None or busy <= 0:
            return np.empty(0)
        out.append(float(items.tokens[rows].sum()) / busy * items.in_flight)
    return np.array(out)


def common_keys(runs: Sequence[sp.Items]) -> frozenset[str]:
    keys = frozenset(runs[0].keys)
    for items in runs[1:]:
        keys &= frozenset(items.keys)
    return keys


def t_ratio(
    log_a: np.ndarray, log_b: np.ndarray, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """exp(mean log B − mean log A) and its t interval: Welch's with two or more values a side,
    else Student's with the spread of the side that has several (module docstring)."""
    from scipy.stats import t as student

    ka, kb = len(log_a), len(log_b)
    diff = float(log_b.mean() - log_a.mean())
    va = float(log_a.var(ddof=1)) if ka > 1 else math.nan
    vb = float(log_b.var(ddof=1)) if kb > 1 else math.nan
    if ka > 1 and kb > 1:
        se2 = va / ka + vb / kb
        df = se2 * se2 / ((va / ka) ** 2 / (ka - 1) + (vb / kb) ** 2 / (kb - 1)) if se2 > 0 else ka + kb - 2.0
    else:
        spread, df = (va, ka - 1.0) if ka > 1 else (vb, kb - 1.0)
        se2 = spread * (1 / ka + 1 / kb)
    half = float(student.ppf(1 - (1 - confidence) / 2, df)) * math.sqrt(se2)
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def speedup(a_runs: Sequence[sp.Items], b_runs: Sequence[sp.Items]) -> Speedup | None:
    """B's tokens/s ÷ A's: over runs where either side ran more than once, else over items."""
    runs = (len(a_runs), len(b_runs))
    if max(runs) < 2 or min(runs) < 1:
        one = sp.speedup(sp.pooled(a_runs), sp.pooled(b_runs)) if min(runs) >= 1 else None
        return None if one is None else Speedup(one.value, one.low, one.high, "items", runs)
    keys = common_keys([*a_runs, *b_runs])
    ra, rb = run_rates(a_runs, keys), run_rates(b_runs, keys)
    if not keys or len(ra) != runs[0] or len(rb) != runs[1] or (ra <= 0).any() or (rb <= 0).any():
        return None
    value, low, high = t_ratio(np.log(ra), np.log(rb))
    return Speedup(value, low, high, "runs", runs)
