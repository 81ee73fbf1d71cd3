"""The checks ``compare --margin`` exits on, beside the verdicts they read.

    servediff compare runs/*.jsonl --margin 0.01      # exit 1 when a check fails

Every control must reproduce itself (greedy: identical; sampled: seeds honoured), and every
scored pair must be non-inferior at the margin (fixed-n Newcombe interval). Each failure is one
line naming what failed; none means exit 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from servediff.compare.quality import PairQuality
from servediff.compare.vocabulary import ControlVerdict

FAILING: tuple[ControlVerdict, ...] = ("NOT deterministic", "seeds NOT honoured")


class Control(Protocol):
    """A control as the checks read it: the configuration, its suite and its verdict."""

    @property
    def a(self) -> str: ...
    @property
    def suite(self) -> str: ...
    @property
    def verdict(self) -> ControlVerdict | None: ...


def failed_checks(controls: Iterable[Control], scored: Sequence[PairQuality]) -> list[str]:
    bad = [f"control {c.a} ({c.suite}): {c.verdict}" for c in controls if c.verdict in FAILING]
    pairs = [q for q in scored if q.kind == "pair"]
    if not pairs:
        bad.append("no pair of scored runs to judge at the margin")
    bad += [f"{q.b} vs {q.a} ({q.suite}): {q.verdict}" for q in pairs if q.verdict != "non-inferior"]
    return bad
