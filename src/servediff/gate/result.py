"""The gate report: what ``servediff gate`` decided and the confidence sequence it decided on.

    servediff gate --config-a stock --config-b tuned --suite gsm8k --margin 0.02 --json

The gate's own result, in the gate package (the domain), not in the report: ``gate.run_gate``
builds it from the records, ``report.render.gate_markdown`` and ``report.junit.write`` render it,
``report.render.gate_summary`` is its JSON. Nothing here is computed by a renderer.
"""

from __future__ import annotations

from dataclasses import dataclass

from servediff.compare.stats.sequential import Tally
from servediff.compare.vocabulary import GateVerdict


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The sequence after ``n`` paired items scored on both sides."""

    n: int
    c: int  # only B right
    b: int  # only A right
    delta: float
    low: float  # lower confidence-sequence bound on Δ (level 1 − α)
    high: float  # upper bound (level 1 − α)


@dataclass(frozen=True, slots=True)
class Determinism:
    """The control against its own repeat on the first items of the gate's order."""

    status: str  # "deterministic", "NOT deterministic", "skipped", "no items compared"
    compared: int
    identical: int
    errors: int  # items errored in either run: not compared

    @property
    def ok(self) -> bool:
        return self.status in ("deterministic", "skipped")


@dataclass(frozen=True, slots=True)
class GateReport:
    suite: str
    a: str  # control
    b: str  # candidate
    margin: float
    alpha: float
    max_items: int
    verdict: GateVerdict
    tally: Tally
    errors: int  # items run but errored on either side: left out of the sequence
    looked_at: int  # items run on both sides when the gate stopped
    checkpoints: tuple[Checkpoint, ...]
    determinism: Determinism
    records: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return self.verdict == "pass" and self.determinism.ok

    @property
    def exit_code(self) -> int:
        """0 pass; 1 fail, inconclusive or a control that is not deterministic; 2 when engine
        errors left nothing to decide on (a re-run retries the errored items)."""
        if self.determinism.status == "no items compared" or (
            self.verdict == "inconclusive" and self.errors and self.tally.n == 0
        ):
            return 2
        return 0 if self.passed else 1
