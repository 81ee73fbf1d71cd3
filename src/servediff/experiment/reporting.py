"""The experiment's last step: compare every run it made; write report.md, report.html, summary.json.

servediff experiment examples/llamacpp-flash.toml
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from servediff.compare.probe import read_probes
from servediff.compare.study import Study, build_study
from servediff.experiment.spec import Experiment
from servediff.record import read_run
from servediff.report import html
from servediff.report.experiment import experiment_json, flag_lines, is_sweep
from servediff.report.markdown import render, summary_json


def experiment_study(paths: Sequence[Path], probes: Sequence[Path] = ()) -> Study:
    """The study over main and sweep runs, with the probe records. Sweep runs keep their controls
    (repeat vs repeat) but are not paired with every configuration: the sweep section compares
    them among themselves."""
    study = build_study([read_run(p) for p in paths])
    sweep_labels = {c.label for c in study.configurations if is_sweep(c.runs[0])}
    study.pairs = [p for p in study.pairs if p.a not in sweep_labels and p.b not in sweep_labels]
    study.probes = [read_probes(p) for p in probes]
    return study


def write_report(
    exp: Experiment, paths: Sequence[Path], probes: Sequence[Path] = ()
) -> tuple[Study | None, Path | None, list[str]]:
    if not paths:
        return None, None, []
    study = experiment_study(paths, probes)
    report = exp.output / "report.md"
    report.write_text(render(study, title=exp.title), encoding="utf-8")
    (exp.output / "report.html").write_text(html.render(study, title=exp.title), encoding="utf-8")
    summary = {**summary_json(study), "experiment": experiment_json(study)}
    (exp.output / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return study, report, flag_lines(study)
