"""How finely a pair's recorded logprobs resolve a gap, and how far they drift between configurations.

    servediff compare runs/stock-1.jsonl runs/tuned-1.jsonl     # the Why section's caveats

``precision``: exact top-1/top-2 ties are the signature of coarse logits (bf16); ``drift``: the
|Δ logprob| of the chosen token over the tokens two configurations share.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servediff.records import Item


@dataclass(frozen=True, slots=True)
class Drift:
    """|Δ logprob| of the chosen token between configurations over shared tokens."""

    n: int
    median: float
    p99: float
    max: float


# --- over the whole pair ----------------------------------------------------------------------
def shared_deltas(a: Item, b: Item, upto: int | None) -> list[float]:
    """|Δ logprob| of the chosen token at each shared position before ``upto`` (None: all)."""
    if a.logprobs is None or b.logprobs is None:
        return []
    n = min(len(a.logprobs), len(b.logprobs))
    n = n if upto is None else min(n, upto)
    return [abs(a.logprobs[i][1] - b.logprobs[i][1]) for i in range(n)]


def drift(deltas: Sequence[float]) -> Drift | None:
    if not deltas:
        return None
    arr = np.asarray(deltas, dtype=np.float64)
    return Drift(len(arr), float(np.median(arr)), float(np.percentile(arr, 99)), float(arr.max()))


@dataclass(frozen=True, slots=True)
class Precision:
    """How finely the recorded logprobs resolve a gap.

    Exact top-1/top-2 ties are the signature of coarse logits: bf16 puts logprobs on a grid of
    roughly 1/32–1/8 nat, where a few percent of positions tie exactly; float32 logits almost
    never tie. ``dtype`` is set where the engine is known to compute logits in one type.
    """

    positions: int  # recorded positions with at least two alternatives
    exact_ties: int  # of those, top-1 logprob == top-2 logprob
    smallest_step: float | None  # smallest non-zero difference within one top-k
    dtype: str | None

    @property
    def coarse(self) -> bool:
        return self.dtype is None and self.positions > 0 and self.exact_ties / self.positions >= 0.005


def precision(items: Sequence[Item], dtype: str | None = None) -> Precision:
    best, positions, ties = math.inf, 0, 0
    for item in items:
        for _, _, top in item.logprobs or ():
            if len(top) < 2:
                continue
            positions += 1
            ties += int(top[0][1] == top[1][1])
            vals = sorted({v for _, v in top}, reverse=True)
            for x, y in itertools.pairwise(vals):
                best = min(best, x - y)
    return Precision(positions, ties, None if best == math.inf else best, dtype)


def known_dtype(engines: Sequence[dict[str, object]]) -> str | None:
    # llama.cpp's output layer always produces float32 logits, whatever the weights' type.
    if engines and all(e.get("kind") == "llamacpp" for e in engines):
        return "float32 (llama.cpp logits)"
    return None
