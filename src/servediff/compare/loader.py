"""What an analysis is made from: the run records, the probe records beside them, and the options.

    servediff report runs/*.jsonl runs/probes-*.jsonl --near-tie 0.1 --margin 0.01

``load`` is the one loader behind ``compare``, ``report``, ``experiment`` and ``demo``: it
reads run records and probe records from the same list of paths and returns the Study (the
records, grouped and paired) with the ReportOptions that say how to read them
(``report_options``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servediff.compare.mechanism import DEFAULT_THRESHOLD
from servediff.compare.report_options import DEFAULT_MARGIN, DEFAULT_TITLE, DEFAULT_WARMUP, ReportOptions
from servediff.compare.study import Study, build_study, without_pairs_of
from servediff.records import LEAN, Reading, ReadOptions, Run, read_runs


def is_sweep(run: Run) -> bool:
    return bool(run.header.extra.get("experiment", {}).get("sweep"))


def load(
    paths: Sequence[Path] | Reading,
    *,
    force: bool = False,
    title: str = DEFAULT_TITLE,
    near_tie: float = DEFAULT_THRESHOLD,
    margin: float = DEFAULT_MARGIN,
    warmup: int = DEFAULT_WARMUP,
    checkpoints: bool = False,
    reading: ReadOptions = LEAN,
) -> tuple[Study, ReportOptions]:
    """Runs and probe records from one list of files (or from a ``Reading`` of them the caller
    began: the children that read a large shadow segment in halves started before it imported
    the analysis).

    An experiment's load-sweep runs keep their controls (repeat vs repeat) but are not paired
    with other configurations: the sweep section compares them among themselves. ``reading``:
    how the records are read (``records.ReadOptions``); an export, which writes every item's
    fields out, reads them whole."""
    runs, probes = read_runs(paths, reading)
    study = build_study(runs, force=force, checkpoints=checkpoints)
    study = without_pairs_of(study, [c.label for c in study.configurations if is_sweep(c.runs[0])])
    return study, ReportOptions(
        title=title, near_tie=near_tie, margin=margin, probes=tuple(probes), warmup=warmup
    )
