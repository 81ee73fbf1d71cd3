"""Where coupled draws first differ: the sampled counterpart of the greedy divergence study.

    servediff compare s-stock.jsonl s-stock2.jsonl s-tuned.jsonl --md report.md   # "Sampled generation"

Draw s of item i has the same seed under every configuration, so two configurations that
compute the same distributions at every step produce the same sampled text; where the texts
part, the configuration changed a distribution enough to move the sampler's choice (or the
engine ignored the seed). The position of the first differing token over all coupled draws is
therefore a distribution to set beside the same configuration's own repeat (the control, with
the same seeds): a control whose draws all agree is the baseline of "no divergence at all".

Positions are token indices from the engine's own token ids (the record's alignment); a draw
whose records carry no tokens is counted as diverged at an unknown position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servediff.compare.study import PairResult

BY_TOKENS = (1, 10, 50)  # "diverged within the first t tokens" columns


@dataclass(frozen=True, slots=True)
class FirstDivergences:
    """The first differing token of every coupled draw whose texts differ, for one pair."""

    compared: int  # draws error-free under both runs
    positions: tuple[int, ...]  # sorted; one per diverged draw with a known token index
    unknown: int  # diverged draws without token ids
    quartiles: tuple[float, float, float] | None = None  # of the known positions; None: none diverged
    # (t, share of compared draws diverged within their first t tokens) for t in BY_TOKENS
    within: tuple[tuple[int, float | None], ...] = ()

    @property
    def diverged(self) -> int:
        return len(self.positions) + self.unknown


def share_within(positions: Sequence[int], compared: int, tokens: int) -> float | None:
    """Share of compared draws that diverged within their first ``tokens`` tokens."""
    return sum(p < tokens for p in positions) / compared if compared else None


def quartiles(positions: Sequence[int]) -> tuple[float, float, float] | None:
    """Quartiles of the known positions (linear interpolation); None when none diverged."""
    if not positions:
        return None
    q1, q2, q3 = (float(x) for x in np.quantile(np.array(positions), (0.25, 0.5, 0.75)))
    return q1, q2, q3


def first_divergences(p: PairResult) -> FirstDivergences:
    known = sorted(d.token_index for d in p.divergences if d.token_index is not None)
    return FirstDivergences(
        compared=p.total,
        positions=tuple(known),
        unknown=sum(d.token_index is None for d in p.divergences),
        quartiles=quartiles(known),
        within=tuple((t, share_within(known, p.total, t)) for t in BY_TOKENS),
    )
