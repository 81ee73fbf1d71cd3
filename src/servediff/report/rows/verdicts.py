"""The one line per configuration that opens the report: speed against the reference, byte
identity, paired Δ accuracy and what its verification found.

    servediff experiment examples/embedded.toml      # the verdict table at the top of report.html

Each verdict pools a configuration's suites (item ids keyed by suite) for its speedup; identity
and quality stay per suite. The reference is the first suite's reference configuration
(``report.rows.speed_table.references``), listed first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servediff.compare import speed as sp
from servediff.compare.loader import is_sweep
from servediff.compare.machine_load import Load, load_check
from servediff.compare.quality import PairQuality
from servediff.compare.reruns import Speedup, speedup
from servediff.compare.study import Study
from servediff.compare.vocabulary import QualityVerdict
from servediff.report.rows.speed_table import SpeedRow, items_of, references, runs_of


@dataclass(frozen=True, slots=True)
class QualityDelta:
    suite: str
    delta: float
    low: float
    high: float
    verdict: QualityVerdict
    margin: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """The one line per configuration: speed, identity, quality, verification."""

    label: str
    reference: str | None  # None: the reference configuration itself
    concurrency: int
    speedup: Speedup | None  # output tokens/s against the reference, over every suite's items
    tokens_per_s: sp.Interval | None  # this configuration's own rate, over every suite's items
    identity: tuple[tuple[str, int, int], ...]  # (suite, identical, compared): against the reference
    control: tuple[tuple[str, int, int], ...]  # (suite, identical, compared): against its repeat
    quality: tuple[QualityDelta, ...]
    verification: str | None  # None: nothing was checked
    load: Load | None = None  # the machine's load under it and the reference (None: reference)
    # (suite, speedup) where the suites' own intervals point opposite ways (one faster, one slower):
    # the pooled speedup alone would hide that; empty otherwise
    split: tuple[tuple[str, Speedup], ...] = ()


def verdicts(
    study: Study,
    warmup: int,
    scored: Sequence[PairQuality],
    verification: Mapping[str, str],
    speed: Sequence[SpeedRow],
) -> tuple[Verdict, ...]:
    """One per configuration label (not sweep levels), the reference first. ``scored``: the
    paired quality of scored runs; ``verification``: label → what its checks found; ``speed``:
    the Speed table's rows (each suite's own speedup)."""
    refs = references(study)
    ref_labels = list(dict.fromkeys(c.label for c in refs.values()))
    reference = ref_labels[0] if ref_labels else None
    labels = dict.fromkeys(c.label for c in study.configurations if not is_sweep(c.runs[0]))
    out = [_verdict(study, label, warmup, scored, verification.get(label), speed) for label in labels]
    out.sort(key=lambda v: v.label != reference)
    return tuple(out)


def _verdict(
    study: Study,
    label: str,
    warmup: int,
    scored: Sequence[PairQuality],
    verification: str | None,
    speed: Sequence[SpeedRow],
) -> Verdict:
    refs = references(study)
    # by suite, not by the order the records were given in: the seeded bootstrap resamples the
    # pooled items in order, so the experiment's report and `compare` on its records agree
    mine = sorted((c for c in study.configurations if c.label == label), key=lambda c: c.suite)
    theirs = [refs[c.suite] for c in mine if c.suite in refs and refs[c.suite].label != label]
    # Keys carry the suite only where one label pools several suites: a constant prefix would
    # change no number, and at a million items its copies of every sample cost 0.3 GB.
    keyed = len(mine) > 1
    own = sp.pooled([items_of(c, warmup, keyed) for c in mine])
    rates = sp.rates(own)
    against = theirs[0].label if theirs else None
    return Verdict(
        label=label,
        reference=against,
        concurrency=max(c.runs[0].header.concurrency for c in mine),
        speedup=speedup(runs_of(theirs, warmup, keyed), runs_of(mine, warmup, keyed)) if theirs else None,
        tokens_per_s=rates[0] if rates else None,
        identity=tuple(
            (p.suite, p.identical, p.total) for p in study.pairs if p.b == label and p.a == against
        ),
        control=tuple((p.suite, p.identical, p.total) for p in study.controls if p.a == label),
        quality=_quality(scored, against, label),
        verification=verification,
        load=load_check([r for c in theirs for r in c.runs], [r for c in mine for r in c.runs])
        if theirs
        else None,
        split=_split(speed, label),
    )


def _split(speed: Sequence[SpeedRow], label: str) -> tuple[tuple[str, Speedup], ...]:
    """Each suite's own speedup (the Speed table's), where at least one suite is measurably faster
    and another measurably slower than the reference (intervals wholly above and wholly below 1)."""
    per = tuple((r.suite, r.speedup) for r in speed if r.label == label and r.speedup is not None)
    faster = any(s.low > 1 for _, s in per)
    slower = any(s.high < 1 for _, s in per)
    return per if faster and slower else ()


def _quality(scored: Sequence[PairQuality], a: str | None, b: str) -> tuple[QualityDelta, ...]:
    if a is None:
        return ()
    return tuple(
        QualityDelta(p.suite, p.table.delta, p.delta_ci.low, p.delta_ci.high, p.verdict, p.margin)
        for p in scored
        if p.kind == "pair" and p.a == a and p.b == b
    )
