"""Speed per (suite, configuration): the rows of the report's Speed section.

    servediff report runs/*.jsonl --md report.md --html report.html

The statistics are ``compare.speed``'s; this module decides what is compared with what. The
reference of a suite is its first configuration that is not a load-sweep level (the A side of
every pair: ``stock`` in the demo). A load sweep's levels are compared among themselves in the
throughput-vs-concurrency plot, not against the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servediff.compare import speed as sp
from servediff.compare.loader import is_sweep
from servediff.compare.machine_load import Load, load_check
from servediff.compare.reruns import Speedup, speedup
from servediff.compare.study import Configuration, Study


@dataclass(frozen=True, slots=True)
class SpeedRow:
    """One configuration's speed on one suite, warm-up and errored items left out and counted."""

    suite: str
    label: str
    sweep: str | None  # the load sweep this level belongs to (its base label), None: not a sweep
    concurrency: int
    runs: int
    items: int  # items the numbers are made of (over all repeats)
    warmup: int  # left out as warm-up
    errors: int  # left out: the engine failed
    in_flight: float | None  # mean requests in flight (Σ latency / wall)
    tokens_per_s: sp.Interval | None  # output tokens/s (None: no timestamps at concurrency > 1)
    requests_per_s: sp.Interval | None
    latency: tuple[sp.Interval, ...]  # p50, p90, p99 in seconds
    ttft: tuple[sp.Interval, ...]  # p50, p90, p99 time to first token (empty: not measured)
    itl: sp.Interval | None  # mean inter-token latency (seconds)
    engine_tokens_per_s: float | None  # the engine's own decode rate, where it reported one
    reference: str | None  # the configuration the speedup is against (None: this is it)
    speedup: Speedup | None  # over runs where a side ran more than once (compare.reruns)
    load: Load | None = None  # the machine's load under both (None: this is the reference)


def items_of(c: Configuration, warmup: int, keyed: bool = False) -> sp.Items:
    """Every run of a configuration pooled; ``keyed``: item ids carry the suite (pooling suites)."""
    return sp.pooled(runs_of([c], warmup, keyed))


def runs_of(configs: list[Configuration], warmup: int, keyed: bool = False) -> list[sp.Items]:
    """One Items per run: the i-th run of every configuration in ``configs`` (one per suite)
    pooled, as many as the configuration with the fewest runs has."""
    runs = min(len(c.runs) for c in configs)
    prefix = {id(c): f"{c.suite}/" if keyed else "" for c in configs}
    return [sp.pooled([sp.run_items(c.runs[i], warmup, prefix[id(c)]) for c in configs]) for i in range(runs)]


def references(study: Study) -> dict[str, Configuration]:
    """suite → its reference configuration (the first that is not a sweep level)."""
    out: dict[str, Configuration] = {}
    for c in study.configurations:
        if not is_sweep(c.runs[0]):
            out.setdefault(c.suite, c)
    return out


def speed_rows(study: Study, warmup: int) -> tuple[SpeedRow, ...]:
    refs = references(study)
    return tuple(_row(c, refs.get(c.suite), warmup) for c in study.configurations)


def _row(c: Configuration, ref: Configuration | None, warmup: int) -> SpeedRow:
    items = items_of(c, warmup)
    sweep = c.label.rsplit("@c", 1)[0] if is_sweep(c.runs[0]) else None
    against = ref if ref is not None and ref is not c and sweep is None else None
    rates = sp.rates(items)
    return SpeedRow(
        suite=c.suite,
        label=c.label,
        sweep=sweep,
        concurrency=c.runs[0].header.concurrency,
        runs=len(c.runs),
        items=len(items),
        warmup=items.warmup,
        errors=items.errors,
        in_flight=items.in_flight,
        tokens_per_s=rates[0] if rates else None,
        requests_per_s=rates[1] if rates else None,
        latency=sp.percentiles(items.latency),
        ttft=sp.percentiles(items.ttft[~np.isnan(items.ttft)]),
        itl=sp.mean(items.itl[~np.isnan(items.itl)]),
        engine_tokens_per_s=sp.engine_decode_rate(c.runs, warmup),
        reference=against.label if against is not None else None,
        speedup=speedup(runs_of([against], warmup), runs_of([c], warmup)) if against is not None else None,
        load=load_check(against.runs, c.runs) if against is not None else None,
    )
