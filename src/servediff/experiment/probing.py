"""The experiment's mechanism probes: every divergence from the control, measured under each side.

    servediff experiment examples/llamacpp-flash.toml      # probes/ beside runs/

Configurations run one at a time (engines that share a GPU cannot start together), so a pair's
two sides are probed in two sessions and written as two records that ``compare`` merges: a
configuration probes its side of (control, it) right after its own runs, while it is still up;
the control's side needs every other configuration's runs first, so the control is started once
more at the end. That is N + 1 engine starts for N configurations, the fewest possible.

A probe record is reused when it measured the same runs (fingerprints), the same k and the
same sides, with an error-free line at every divergence the runs have now; anything else is
probed again, so a resumed run that gained items gets its new divergences measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servediff.compare.divergence import divergence_points
from servediff.experiment.plan import Slot
from servediff.experiment.spec import ConfigSpec, Experiment, SuiteSpec
from servediff.filename import file_stem
from servediff.records import RecordError, Run, read_run
from servediff.records.probes import read_record


@dataclass(frozen=True, slots=True)
class ProbeSlot:
    """One side of one (control, configuration) pair on one suite: one probe record."""

    suite: SuiteSpec
    a: Slot  # the control's first repeat
    b: Slot  # the other configuration's first repeat
    side: str  # "a": measured under the control, "b": under the other configuration
    path: Path

    @property
    def config(self) -> ConfigSpec:
        return self.a.config if self.side == "a" else self.b.config

    @property
    def name(self) -> str:
        return f"{self.a.label} vs {self.b.label} ({self.suite.name}), side {self.config.label}"


def plan_probes(exp: Experiment, slots: list[Slot]) -> list[ProbeSlot]:
    """The probe records of the experiment: both sides of (control, each other configuration)
    on every suite. Sweep runs are left out: they are compared among themselves."""
    if not exp.probes.enabled:
        return []
    firsts = [s for s in slots if not s.sweep and s.repeat == 1]
    out: list[ProbeSlot] = []
    for suite in exp.suites:
        mine = [s for s in firsts if s.suite == suite]
        a = next(s for s in mine if s.config.label == exp.control)
        for b in (s for s in mine if s.config.label != exp.control):
            stem = a.path.name.removesuffix(".r1.jsonl")  # SUITE.DIGEST
            pair = f"{file_stem(a.label)}-vs-{file_stem(b.label)}"
            for side in "ab":
                path = exp.output / "probes" / f"{stem}.{pair}.{side}.jsonl"
                out.append(ProbeSlot(suite, a, b, side, path))
    return out


def runs_of(slot: ProbeSlot) -> tuple[Run, Run] | None:
    """Both runs of the pair, when both exist (errored items are simply not probed yet)."""
    try:
        return read_run(slot.a.path), read_run(slot.b.path)
    except (RecordError, FileNotFoundError, OSError):
        return None


def pending(slot: ProbeSlot, k: int) -> tuple[Run, Run] | None:
    """The pair's runs when this side is runnable and not already done: both runs exist, they
    diverge somewhere (no engine is started to measure nothing), and the record is missing or
    stale; else None. The runs are returned so the probe does not read them again."""
    runs = runs_of(slot)
    if runs is None or not divergence_points(*runs):
        return None
    return None if probes_complete(slot.path, runs, slot.side, k) else runs


def probes_complete(path: Path, runs: tuple[Run, Run], sides: str, k: int) -> bool:
    """True when ``path`` probed exactly these runs (same fingerprints, as finished now) at this k,
    on these sides, with an error-free line at every divergence: what resume may reuse."""
    try:
        head, done = read_record(path)
    except (OSError, UnicodeDecodeError, RecordError):
        return False
    # The fingerprint names a run; the path it was read from is not part of its identity.
    if (head.a.fingerprint, head.b.fingerprint, head.k, head.sides) != (
        runs[0].header.fingerprint(),
        runs[1].header.fingerprint(),
        k,
        sides,
    ):
        return False
    for p, _, _ in divergence_points(*runs):
        for side in sides:
            e = done.entries.get((p.item_id, side))
            if e is None or e.error or e.token_index != p.index:
                return False
    return True
