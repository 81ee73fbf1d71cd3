"""Deterministic subsets of a suite: the same seed always picks the same items."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from servediff.suites.base import Suite
from servediff.types import Sample


def first_n(suite: Suite, n: int) -> Suite:
    """The first n items in suite order (for the fixed, hand-ordered prompt suite)."""
    return _with(suite, suite.samples[:n], f"first {n}")


def random_n(suite: Suite, n: int, seed: int) -> Suite:
    """n items drawn without replacement by a seeded Generator, kept in suite order."""
    if n >= len(suite.samples):
        return suite
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(len(suite.samples), size=n, replace=False))
    return _with(suite, tuple(suite.samples[i] for i in keep), f"random {n}, seed {seed}")


def stratified_indices(keys: Sequence[str], n: int, seed: int) -> list[int]:
    """The positions of n items stratified by ``keys``, in source order.

    Largest-remainder allocation makes the counts sum to exactly n; within a stratum, items
    are drawn by the seeded Generator. Every stratum with a positive share gets its items.
    Works on the keys alone, so a loader can pick before it builds any prompt.
    """
    strata: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        strata[k].append(i)
    names = sorted(strata)
    total = len(keys)
    quotas = {k: n * len(strata[k]) / total for k in names}
    alloc = {k: int(quotas[k]) for k in names}
    rest = n - sum(alloc.values())
    for k in sorted(names, key=lambda k: (-(quotas[k] - alloc[k]), k))[:rest]:
        alloc[k] += 1
    rng = np.random.default_rng(seed)
    keep: list[int] = []
    for k in names:
        if alloc[k]:
            keep.extend(int(i) for i in rng.choice(strata[k], size=alloc[k], replace=False))
    return sorted(keep)


def stratified_how(key: str, n: int, seed: int) -> str:
    return f"stratified by {key} {n}, seed {seed}"


def _with(suite: Suite, samples: tuple[Sample, ...], how: str) -> Suite:
    return dataclasses.replace(suite, samples=samples, source=f"{suite.source} ({how})")
