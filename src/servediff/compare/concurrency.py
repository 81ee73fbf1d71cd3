"""Under load: what each step of concurrency buys in throughput, and what it costs in determinism.

    servediff experiment examples/llama-server-gpu.toml        # the "Under load" section
    servediff compare OUT/runs/*/*.jsonl OUT/sweep/*/*.jsonl     # the same, from the records

An experiment's ``[sweep]`` runs a configuration's suite at several concurrencies, several
times each (run labels ``LABEL@cN``). For every swept (configuration, suite) and every level:

- distinct outputs per item across the level's repeats;
- identity against the base run, the lowest level's first repeat: every repeat of every level is
  compared with it (at the base level the other repeats are its control);
- the divergence hazard per token against the base, pooled over the repeats (``stats/hazard.py``);
- the mechanism of each first divergence from the logprobs recorded *during* the run: a probe at
  batch 1 cannot replay the batch that chose the token, so only in-run top-k say whether a
  batch-composition flip was a near-tie or something else (``mechanism.py``);
- speed: output tokens/s and latency percentiles, warm-up left out (``speed.py``);
- scored suites: each level's accuracy (first repeat), and the paired comparison of the highest
  level against the base (McNemar, Newcombe interval: ``quality.py``);
- the step: throughput of a level over the level before it, next to what identity lost.

Pure functions of the records; the report only lays these numbers out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from servediff.compare import mechanism as mech
from servediff.compare import speed as sp
from servediff.compare.quality import Accuracy, PairQuality, accuracy, compare_scored, is_scored
from servediff.compare.stats import hazard as hz
from servediff.compare.study import Configuration, Study, compare_runs
from servediff.records import Run


@dataclass(frozen=True, slots=True)
class LoadLevel:
    """One concurrency of a sweep, every number measured against the sweep's base run."""

    concurrency: int
    repeats: int
    items: int  # items answered without error in every repeat of this level
    varied: int  # items with more than one distinct output across this level's repeats
    distinct_max: int
    distinct_mean: float
    identical: int  # (repeat, item) pairs byte-identical to the base run
    compared: int  # (repeat, item) pairs compared with the base run
    hazard: hz.Hazard | None  # divergences per token against the base, pooled over repeats
    # class → count over the first divergences, classified from the in-run top-k
    mechanism: tuple[tuple[str, int], ...]
    gap_median: float | None  # the base's top-1 − top-2 gap at those divergences (nats)
    tokens_per_s: sp.Interval | None  # output tokens/s, pooled over repeats
    latency: tuple[sp.Interval, ...]  # p50, p90, p99 seconds
    accuracy: Accuracy | None  # the first repeat's, on a scored suite
    step: float | None  # tokens/s ÷ the previous level's (None: first level, or not measured)

    @property
    def identity(self) -> float | None:
        return self.identical / self.compared if self.compared else None


@dataclass(frozen=True, slots=True)
class LoadSweep:
    label: str  # the swept configuration
    suite: str
    base: str  # the run every level is compared with: "LABEL@cN r1"
    threshold: float  # the near-tie threshold (nats) of the mechanism classes
    levels: tuple[LoadLevel, ...]
    # The highest level's first repeat against the base run, item by item (scored suites only).
    quality: PairQuality | None


def is_sweep_run(run: Run) -> bool:
    return bool(run.header.extra.get("experiment", {}).get("sweep"))


def load_sweeps(
    study: Study, warmup: int, margin: float, threshold: float = mech.DEFAULT_THRESHOLD
) -> tuple[LoadSweep, ...]:
    """Every swept (configuration, suite) with at least two levels or two repeats."""
    by: dict[tuple[str, str], dict[int, Configuration]] = defaultdict(dict)
    for c in study.configurations:
        if is_sweep_run(c.runs[0]):
            base = c.label.rsplit("@c", 1)[0]
            by[(base, c.suite)][c.runs[0].header.concurrency] = c
    out = []
    for (label, suite), levels in by.items():
        ordered = [levels[k] for k in sorted(levels)]
        if len(ordered) > 1 or len(ordered[0].runs) > 1:
            out.append(_sweep(label, suite, ordered, warmup, margin, threshold))
    return tuple(out)


def _sweep(
    label: str, suite: str, levels: list[Configuration], warmup: int, margin: float, threshold: float
) -> LoadSweep:
    base = levels[0].runs[0]
    rows: list[LoadLevel] = []
    for c in levels:
        row = _level(c, base, warmup, threshold)
        prev = rows[-1].tokens_per_s if rows else None
        if prev is not None and row.tokens_per_s is not None and prev.value > 0:
            row = replace(row, step=row.tokens_per_s.value / prev.value)
        rows.append(row)
    top = levels[-1].runs[0]
    quality = None
    if len(levels) > 1 and is_scored(base) and is_scored(top):
        quality = compare_scored(compare_runs(base, top, "pair"), margin)
    return LoadSweep(label, suite, f"{base.label} r{base.header.repeat}", threshold, tuple(rows), quality)


def _level(c: Configuration, base: Run, warmup: int, threshold: float) -> LoadLevel:
    distinct = distinct_outputs(c.runs)
    others = [r for r in c.runs if r is not base]
    identical = compared = events = exposure = 0
    classes: Counter[str] = Counter()
    gaps: list[float] = []
    for run in others:
        pair = compare_runs(base, run, "pair")
        identical, compared = identical + pair.identical, compared + pair.total
        pm = mech.measure_pair(pair, threshold=threshold)
        n_events, n_tokens = hz.survival(pm.times)
        events, exposure = events + n_events, exposure + n_tokens
        classes.update(mech.classes(pm.explanations))
        gaps += [g for e in mech.measured(pm.explanations) if (g := e.gap_a) is not None]
    items = sp.pooled([sp.run_items(r, warmup) for r in c.runs])
    rates = sp.rates(items)
    return LoadLevel(
        concurrency=c.runs[0].header.concurrency,
        repeats=len(c.runs),
        items=len(distinct),
        varied=sum(1 for n in distinct.values() if n > 1),
        distinct_max=max(distinct.values(), default=0),
        distinct_mean=sum(distinct.values()) / len(distinct) if distinct else 0.0,
        identical=identical,
        compared=compared,
        hazard=hz.estimate(events, exposure) if exposure > 0 else None,
        mechanism=tuple((k, classes[k]) for k in mech.CLASSES if classes[k]),
        gap_median=float(np.median(gaps)) if gaps else None,
        tokens_per_s=rates[0] if rates else None,
        latency=sp.percentiles(items.latency),
        accuracy=accuracy(c.runs[0]) if is_scored(c.runs[0]) else None,
        step=None,
    )


def distinct_outputs(runs: Sequence[Run]) -> dict[str, int]:
    """Per item answered without error in every run: the number of distinct completions."""
    seen: dict[str, set[str]] = defaultdict(set)
    answered: Counter[str] = Counter()
    for run in runs:
        for item_id, item in run.items.items():
            if item.error is None:
                seen[item_id].add(item.sha256)
                answered[item_id] += 1
    return {k: len(v) for k, v in seen.items() if answered[k] == len(runs)}
