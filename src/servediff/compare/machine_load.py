"""Whether two configurations' speeds were measured under comparable loads of the machine.

    servediff compare runs/*.jsonl     # Speed: "the machine's load changed" instead of an interval

A run records the machine's 1-minute load per usable core at the start and end of each stretch;
configurations measured under loads that differ by more than ``LOAD_CHANGE`` per core, or on a
machine that was oversubscribed (above ``OVERSUBSCRIBED``), do not get a speedup interval: the
difference may be the machine's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from servediff.records import Run

# Load per usable core. Half a core of difference is a thread more or less per two cores running
# beside the engine: on a 2-core machine that turned a 0.68x slowdown into a 2.3x "speedup".
# Above 1.25 runnable threads per core some thread always waits, and llama.cpp's spin at barriers.
LOAD_CHANGE = 0.5
OVERSUBSCRIBED = 1.25

LoadVerdict = Literal["steady", "changed", "oversubscribed", "not recorded"]


@dataclass(frozen=True, slots=True)
class Load:
    """The machine's load while two configurations were measured, and whether their speeds can
    be compared: the highest 1-minute load per usable core recorded over each one's runs."""

    a: float | None  # None: its records carry no load (written before it was recorded)
    b: float | None
    verdict: LoadVerdict

    @property
    def unsteady(self) -> bool:
        """The speedup may be the machine's: no interval should be shown."""
        return self.verdict in ("changed", "oversubscribed")


Point = dict[str, Any]  # servediff.machine.load_now: load_1min, cores, at


def stretches(run: Run) -> list[tuple[Point, Point]]:
    """The (start, end) point of each stretch of work ``run`` recorded (header ``load``, written
    by ``runner.record_load``); a point the record lacks is an empty dict."""
    out = []
    for stretch in run.header.extra.get("load") or []:
        if isinstance(stretch, dict):
            start, end = stretch.get("start"), stretch.get("end")
            out.append((start if isinstance(start, dict) else {}, end if isinstance(end, dict) else {}))
    return out


def run_load(runs: Sequence[Run]) -> float | None:
    """The highest load per usable core any of ``runs`` recorded (start or end of a stretch)."""
    found = []
    for run in runs:
        for stretch in stretches(run):
            for point in stretch:
                if point.get("load_1min") is not None and point.get("cores"):
                    found.append(float(point["load_1min"]) / float(point["cores"]))
    return max(found) if found else None


def load_check(a: Sequence[Run], b: Sequence[Run]) -> Load:
    """Whether A's and B's speeds were measured under comparable loads."""
    la, lb = run_load(a), run_load(b)
    if la is None or lb is None:
        return Load(la, lb, "not recorded")
    if max(la, lb) > OVERSUBSCRIBED:
        return Load(la, lb, "oversubscribed")
    if abs(la - lb) > LOAD_CHANGE:
        return Load(la, lb, "changed")
    return Load(la, lb, "steady")
