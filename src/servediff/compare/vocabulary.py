"""The closed vocabularies of the analysis: every kind, class, verdict and status it can state.

    servediff compare runs/*.jsonl --json      # these words are the values summary.json holds

Each is a ``Literal`` so that a misspelt word is a type error, not a silently different row; the
report matches on them (a verdict's colour, a flagged status) without re-deriving them.
"""

from __future__ import annotations

from typing import Literal

# A comparison: one configuration against its own repeat, or two configurations.
Kind = Literal["control", "pair"]
# Why two greedy completions parted at their first differing token (compare.mechanism).
DivergenceClass = Literal["near-tie flip", "rank change", "unexplained", "not measured", "sampled draw"]
# Non-inferiority of B against A at a margin, read from the 95 % interval on Δ (compare.stats).
QualityVerdict = Literal["non-inferior", "inferior", "inconclusive"]
# A control: greedy runs reproduce, or sampled runs honour per-request seeds.
ControlVerdict = Literal[
    "deterministic", "NOT deterministic", "nothing to compare", "seeds honoured", "seeds NOT honoured"
]
# A factor design: which combinations of factors run (compare.attribution).
DesignKind = Literal["one-at-a-time", "factorial", "all"]
# The quality gate's verdict (servediff gate).
GateVerdict = Literal["pass", "fail", "inconclusive"]
