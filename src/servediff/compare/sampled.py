"""Sampled runs (temperature > 0, k draws per item): pass rates per item, and what a
configuration does to them.

    servediff run ... --temperature 0.7 --samples 8 --seed 42 --out a.jsonl   # each configuration
    servediff compare a.jsonl a2.jsonl b.jsonl --md report.md

One sample per item says little under sampling: an item's outcome is itself random. With k
draws each item has a pass rate c/n, and the item, not the draw, is the unit of analysis: draws
of one item share its difficulty, so every interval here is over items (the cluster-robust
interval with the item as cluster, Miller 2024). Two configurations run with the same base seed
send the same seed for the same draw (``suites.draws``), so their pass rates are paired over
items, and their texts can be compared draw by draw ("coupled identity"): a configuration that
leaves the computation alone reproduces every sampled text, exactly as the control does.

References: Chen et al. (2021), "Evaluating Large Language Models Trained on Code", the
unbiased pass@k estimator 1 − C(n−c, k)/C(n, k); Yao et al. (2024), τ-bench, pass^k (all k
draws right), estimated without bias by C(c, k)/C(n, k).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from servediff.compare.sampled_divergence import FirstDivergences, first_divergences
from servediff.compare.stats import Interval, verdict
from servediff.compare.stats.sample_size import Sizing, sizing
from servediff.compare.study import PairResult, Study
from servediff.compare.vocabulary import Kind, QualityVerdict
from servediff.records import Run
from servediff.suites.draws import SEP

# scipy.stats is imported inside the functions that use it: importing it costs ~0.6 s, which a
# report that needs none of them (a shadow compare) should not pay.


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k draws (without replacement from the n made) is right,
    given c of the n were: 1 − C(n−c, k)/C(n, k), as a product so large n cannot overflow."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / m for m in range(n - c + 1, n + 1))


def pass_all_k(n: int, c: int, k: int) -> float:
    """pass^k: chance that all k draws are right, C(c, k)/C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return math.comb(c, k) / math.comb(n, k)


@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean over items with its 95 % interval over items (t, n − 1 degrees of freedom)."""

    mean: float
    ci: Interval
    n: int  # items


def mean_over_items(values: Sequence[float], confidence: float = 0.95) -> Estimate:
    """Mean of one number per item and its t interval: the item is the cluster, so the draws of
    one item enter only through their item's number. One item: the interval is unknown (nan)."""
    from scipy.stats import t as student_t

    n = len(values)
    if n == 0:
        return Estimate(float("nan"), Interval(float("nan"), float("nan")), 0)
    mean = sum(values) / n
    if n == 1:
        return Estimate(mean, Interval(float("nan"), float("nan")), 1)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(student_t.ppf(1 - (1 - confidence) / 2, n - 1)) * sd / math.sqrt(n)
    return Estimate(mean, Interval(mean - half, mean + half), n)


def item_of(item_id: str, metadata: dict[str, object]) -> str:
    """The suite item a draw belongs to: its metadata says; else the id up to the last ``#``."""
    item = metadata.get("item")
    return str(item) if item is not None else item_id.rsplit(SEP, 1)[0]


def outcomes(run: Run) -> dict[str, tuple[int, int]]:
    """Per suite item: (scored draws n, right draws c). A failed draw is not a wrong one: it is
    left out (and retried by a resumed run), so n can be below k."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for draw_id in run.header.suite.item_ids:
        it = run.items.get(draw_id)
        if it is None or it.error is not None or it.correct is None:
            continue
        nc = counts[item_of(draw_id, it.metadata)]
        nc[0] += 1
        nc[1] += it.correct
    return {item: (n, c) for item, (n, c) in counts.items()}


def draw_outcomes(run: Run) -> dict[str, dict[int, bool]]:
    """Per suite item: draw index → right or wrong, for every scored, error-free draw. The index
    fixes the draw's seed, so the same index under two configurations is a coupled pair."""
    out: dict[str, dict[int, bool]] = defaultdict(dict)
    for draw_id, it in run.items.items():
        if it.error is not None or it.correct is None:
            continue
        index = it.metadata.get("sample", draw_id.rsplit(SEP, 1)[-1])
        out[item_of(draw_id, it.metadata)][int(str(index))] = it.correct
    return dict(out)


@dataclass(frozen=True, slots=True)
class PassRates:
    """One sampled, scored run: its per-item pass rate, pass@k and pass^k, each over items."""

    suite: str
    label: str
    repeat: int
    k: int  # draws per item asked for
    draws: int  # draws scored (failed ones left out)
    pass_rate: Estimate
    pass_at_k: Estimate  # over items with all k draws scored
    pass_all_k: Estimate
    short: int  # items with fewer than k scored draws: left out of pass@k and pass^k


def pass_rates(run: Run, suite: str) -> PassRates:
    k = run.header.sampling.samples
    per_item = outcomes(run)
    full = [(n, c) for n, c in per_item.values() if n >= k]
    return PassRates(
        suite=suite,
        label=run.label,
        repeat=run.header.repeat,
        k=k,
        draws=sum(n for n, _ in per_item.values()),
        pass_rate=mean_over_items([c / n for n, c in per_item.values()]),
        pass_at_k=mean_over_items([pass_at_k(n, c, k) for n, c in full]),
        pass_all_k=mean_over_items([pass_all_k(n, c, k) for n, c in full]),
        short=len(per_item) - len(full),
    )


@dataclass(frozen=True, slots=True)
class SampledPair:
    """Two sampled runs drawn with the same seeds: B's pass rate minus A's, paired over items,
    and how many draws gave byte-identical text (the control: the same configuration twice)."""

    suite: str
    a: str
    b: str
    kind: Kind
    delta: Estimate | None  # mean over items of (B's pass rate − A's); None: unscored suite
    verdict: QualityVerdict | None  # non-inferiority of B at the margin
    margin: float
    identical: int  # draws with the same text under both (same seed)
    compared: int  # draws error-free under both
    same_seeds: bool  # both runs had the same base seed and k (else the draws are not coupled)
    sizing: Sizing | None = None  # items × draws a paired vs an unpaired design needs (scored pairs)
    first: FirstDivergences | None = None  # where coupled draws first differ (None: not coupled)


def paired_difference(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> list[float]:
    """Per item scored under both: B's pass rate minus A's."""
    return [b[i][1] / b[i][0] - a[i][1] / a[i][0] for i in a if i in b]


def sampled_pair(p: PairResult, margin: float) -> SampledPair:
    diffs = paired_difference(outcomes(p.a_run), outcomes(p.b_run))
    delta = mean_over_items(diffs) if diffs else None
    sa, sb = p.a_run.header.sampling, p.b_run.header.sampling
    return SampledPair(
        suite=p.suite,
        a=p.a,
        b=p.b,
        kind=p.kind,
        delta=delta,
        verdict=None if delta is None else verdict(delta.ci, margin) if delta.n > 1 else "inconclusive",
        margin=margin,
        identical=p.identical,
        compared=p.total,
        same_seeds=(sa.seed, sa.samples) == (sb.seed, sb.samples),
        sizing=_sizing(p, margin),
        first=first_divergences(p) if (sa.seed, sa.samples) == (sb.seed, sb.samples) else None,
    )


def _sizing(p: PairResult, margin: float) -> Sizing | None:
    # A control's differences are all 0 when seeds reproduce: it sizes nothing.
    if p.kind != "pair" or margin <= 0:
        return None
    return sizing(draw_outcomes(p.a_run), draw_outcomes(p.b_run), p.a_run.header.sampling.samples, margin)


@dataclass(frozen=True, slots=True)
class Sampled:
    rates: tuple[PassRates, ...]
    pairs: tuple[SampledPair, ...]  # controls first, then pairs of configurations
    margin: float


def is_sampled(run: Run) -> bool:
    # An unknown temperature (an import) is not taken for sampling: compare has already said
    # the run's temperature is unknown and needed --force.
    t = run.header.sampling.temperature
    return t is not None and t > 0


def sampled(study: Study, margin: float) -> Sampled | None:
    """Every sampled, scored run's pass rates, and every control and pair of them; None when no
    run of the study sampled."""
    runs = [(c.suite, r) for c in study.configurations for r in c.runs if is_sampled(r)]
    if not runs:
        return None
    scored = [(s, r) for s, r in runs if any(it.correct is not None for it in r.items.values())]
    pairs = [p for p in study.comparisons if is_sampled(p.a_run) and is_sampled(p.b_run)]
    return Sampled(
        rates=tuple(pass_rates(r, s) for s, r in scored),
        pairs=tuple(sampled_pair(p, margin) for p in pairs),
        margin=margin,
    )
