"""The experiment's last step: compare every run it made; write report.md, report.html, summary.json.

servediff experiment examples/llamacpp-flash.toml
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servediff.compare.loader import load
from servediff.compare.study import pairs_with
from servediff.experiment.spec import Experiment
from servediff.report import render
from servediff.report.assembly import build
from servediff.report.model import Report


def write_report(exp: Experiment, paths: Sequence[Path], probes: Sequence[Path] = ()) -> Report | None:
    """The study over main and sweep runs and the probe records, rendered three ways."""
    if not paths:
        return None
    study, options = load([*paths, *probes], title=exp.title, checkpoints=exp.checkpoints)
    if exp.pairs == "control":
        study = pairs_with(study, exp.control)
    report = build(study, options)
    files = render.Outputs(exp.output / "report.md", exp.output / "report.html", exp.output / "summary.json")
    render.write_reports(report, files)
    return report
