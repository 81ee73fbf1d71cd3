"""The experiment's last step: compare every run it made; write report.md, report.html, summary.json.

servediff experiment examples/llamacpp-flash.toml
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from servediff.compare.study import pairs_with
from servediff.experiment.spec import Experiment
from servediff.report import render
from servediff.report.assembly import build
from servediff.report.model import Report
from servediff.report.options import load


def write_report(exp: Experiment, paths: Sequence[Path], probes: Sequence[Path] = ()) -> Report | None:
    """The study over main and sweep runs and the probe records, rendered three ways."""
    if not paths:
        return None
    study, options = load([*paths, *probes], title=exp.title, checkpoints=exp.checkpoints)
    if exp.pairs == "control":
        study = pairs_with(study, exp.control)
    report = build(study, options)
    (exp.output / "report.md").write_text(render.markdown(report), encoding="utf-8")
    (exp.output / "report.html").write_text(render.html(report), encoding="utf-8")
    (exp.output / "summary.json").write_text(json.dumps(render.summary(report), indent=2), encoding="utf-8")
    return report
