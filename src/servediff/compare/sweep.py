"""Load-induced nondeterminism: how many distinct completions each prompt gets across the repeats
of an experiment's ``[sweep]``, at each concurrency and over all of them.

    servediff experiment examples/llama-server.toml        # the "Load-induced nondeterminism" section
    servediff compare OUT/runs/*/*.jsonl OUT/sweep/*/*.jsonl

The same configuration, the same prompts at temperature 0, repeated at each level (run labels
``LABEL@cN``). ``compare.concurrency`` measures each level against one base run; this counts outputs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from servediff.compare.loader import is_sweep
from servediff.compare.study import Study
from servediff.records import Run

LONG_SWEEP = 30  # prompts: beyond this, list only those with more than one distinct output


@dataclass(frozen=True, slots=True)
class SweepLevel:
    concurrency: int
    repeats: int
    prompts: int
    varied: int  # prompts with more than one distinct output
    most: int
    mean: float


@dataclass(frozen=True, slots=True)
class Sweep:
    name: str
    levels: tuple[SweepLevel, ...]
    # (item id, distinct outputs per level (None: not run there), distinct over all levels)
    items: tuple[tuple[str, tuple[int | None, ...], int], ...]
    only_varied: bool  # long lists keep only the prompts with more than one output


def distinct_answers(runs: Sequence[Run]) -> dict[str, int]:
    """Per item id: the number of distinct completions among the runs that answered it without
    error (``load.distinct_outputs`` keeps only items every run answered)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        for item_id, item in run.items.items():
            if item.error is None:
                seen[item_id].add(item.sha256)
    return {k: len(v) for k, v in seen.items()}


def sweeps(study: Study) -> tuple[Sweep, ...]:
    levels: dict[str, dict[int, list[Run]]] = defaultdict(dict)
    for c in study.configurations:
        if is_sweep(c.runs[0]):
            base = c.label.rsplit("@c", 1)[0]
            levels[f"{base} ({c.suite})"][c.runs[0].header.concurrency] = list(c.runs)
    return tuple(_sweep(name, dict(sorted(by.items()))) for name, by in levels.items())


def _sweep(name: str, by_level: dict[int, list[Run]]) -> Sweep:
    counts = {c: distinct_answers(runs) for c, runs in by_level.items()}
    pooled = distinct_answers([r for runs in by_level.values() for r in runs])
    rows = []
    for c, per_item in counts.items():
        n = len(per_item)
        rows.append(
            SweepLevel(
                concurrency=c,
                repeats=len(by_level[c]),
                prompts=n,
                varied=sum(1 for v in per_item.values() if v > 1),
                most=max(per_item.values(), default=0),
                mean=sum(per_item.values()) / n if n else 0.0,
            )
        )
    ids = sorted(pooled)
    only_varied = len(ids) > LONG_SWEEP
    if only_varied:
        ids = [i for i in ids if pooled[i] > 1]
    items = tuple((i, tuple(counts[c].get(i) for c in counts), pooled[i]) for i in ids)
    return Sweep(name, tuple(rows), items, only_varied)
