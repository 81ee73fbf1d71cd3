"""What an analysis is made from: the run records, the probe records beside them, and the options.

    servediff report runs/*.jsonl runs/probes-*.jsonl --near-tie 0.1 --margin 0.01

``load`` is the one loader behind ``compare``, ``report``, ``experiment`` and ``demo``: it
reads run records and probe records from the same list of paths and returns the Study (the
records, grouped and paired) with the ReportOptions that say how to read them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from servediff.compare.mechanism import DEFAULT_THRESHOLD, ProbeSet
from servediff.compare.study import Study, build_study, without_pairs_of
from servediff.gcpause import gc_paused
from servediff.halves import Begun, begin_pairs
from servediff.probe_record import is_probe_record, read_probes
from servediff.readahead import ReadAhead
from servediff.record import Run, read_run

DEFAULT_MARGIN = 0.01
DEFAULT_TITLE = "servediff report"
DEFAULT_WARMUP = 1


def is_sweep(run: Run) -> bool:
    return bool(run.header.extra.get("experiment", {}).get("sweep"))


@dataclass(frozen=True, slots=True)
class ReportOptions:
    title: str = DEFAULT_TITLE
    near_tie: float = DEFAULT_THRESHOLD  # nats: below it, a top-2 flip is a near-tie
    margin: float = DEFAULT_MARGIN  # non-inferiority margin (fraction of items) for scored suites
    probes: tuple[ProbeSet, ...] = ()
    # Speed: the first N items sent in each run are warm-up, left out of every speed number and
    # counted (the first request pays for loading and caches). 0 keeps them all.
    warmup: int = DEFAULT_WARMUP


def load(
    paths: Sequence[Path],
    *,
    force: bool = False,
    title: str = DEFAULT_TITLE,
    near_tie: float = DEFAULT_THRESHOLD,
    margin: float = DEFAULT_MARGIN,
    warmup: int = DEFAULT_WARMUP,
    checkpoints: bool = False,
    lean: bool = True,
    begun: Mapping[tuple[Path, Path], Begun] | None = None,
) -> tuple[Study, ReportOptions]:
    """Runs and probe records from one list of files.

    An experiment's load-sweep runs keep their controls (repeat vs repeat) but are not paired
    with other configurations: the sweep section compares them among themselves. ``lean``:
    shadow records are read with only what an analysis reads (``record.read_run``); an export,
    which writes every item's fields out, reads them whole. ``begun``: shadow pairs whose read
    in halves the caller began (``halves.begin_pairs``), finished here."""
    probe_paths = [p for p in paths if is_probe_record(p)]
    run_paths = [p for p in paths if p not in probe_paths]
    runs: list[Run] = []
    # A large shadow segment's two records are read at once, in halves, by this process and a
    # child (servediff.halves: begun by the caller, or here); where that does not take them,
    # they are read as any record.
    if begun is None:
        begun = begin_pairs(run_paths) if lean else {}
    read: dict[int, Run] = {}
    try:
        for (a, b), pair in begun.items():
            with gc_paused():
                got = pair.finish()
            if got is not None:
                read[run_paths.index(a)], read[run_paths.index(b)] = got
    finally:
        for pair in begun.values():
            pair.close()
    # While a record is read here, the next one is parsed by a child process (a large shadow
    # record read lean: servediff.readahead), one at a time: a machine may have only two cores.
    ahead: ReadAhead | None = None
    try:
        for k, p in enumerate(run_paths):
            if k in read:
                runs.append(read[k])
                continue
            current, ahead = ahead, None
            if lean and k + 1 < len(run_paths) and k + 1 not in read:
                ahead = ReadAhead.start(run_paths[k + 1])
            try:
                runs.append(read_run(p, lean=lean, beside=runs, ahead=current))
            finally:
                if current is not None:
                    current.close()
    finally:
        if ahead is not None:
            ahead.close()
    with gc_paused():
        study = build_study(runs, force=force, checkpoints=checkpoints)
    study = without_pairs_of(study, [c.label for c in study.configurations if is_sweep(c.runs[0])])
    probes = tuple(read_probes(p) for p in probe_paths)
    return study, ReportOptions(title=title, near_tie=near_tie, margin=margin, probes=probes, warmup=warmup)
