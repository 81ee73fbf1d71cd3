"""How a study is to be reported: its title, the near-tie threshold, the margin, the probe records
read beside the runs, and the warm-up left out of the speed numbers.

    servediff report runs/*.jsonl runs/probes-*.jsonl --near-tie 0.1 --margin 0.01 --title "stock vs tuned"
"""

from __future__ import annotations

from dataclasses import dataclass

from servediff.compare.mechanism import DEFAULT_THRESHOLD
from servediff.records.probes import ProbeSet

DEFAULT_MARGIN = 0.01
DEFAULT_TITLE = "servediff report"
DEFAULT_WARMUP = 1


@dataclass(frozen=True, slots=True)
class ReportOptions:
    title: str = DEFAULT_TITLE
    near_tie: float = DEFAULT_THRESHOLD  # nats: below it, a top-2 flip is a near-tie
    margin: float = DEFAULT_MARGIN  # non-inferiority margin (fraction of items) for scored suites
    probes: tuple[ProbeSet, ...] = ()
    # Speed: the first N items sent in each run are warm-up, left out of every speed number and
    # counted (the first request pays for loading and caches). 0 keeps them all.
    warmup: int = DEFAULT_WARMUP
