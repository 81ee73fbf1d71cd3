"""The experiment's plan: every record file it will write, in execution order.

    servediff experiment examples/llamacpp-flash.toml --check     # lists the plan

Pure functions of the experiment file: no engine, no file is touched here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from servediff.experiment.spec import ConfigSpec, Experiment, SuiteSpec
from servediff.filename import file_stem


@dataclass(frozen=True, slots=True)
class Slot:
    """One record file of the experiment: (configuration, suite, repeat) at a concurrency."""

    config: ConfigSpec
    suite: SuiteSpec
    repeat: int
    concurrency: int
    label: str  # the configuration's label; "LABEL@cN" for a load-sweep run
    path: Path
    sweep: bool = False


def suite_digest(spec: SuiteSpec) -> str:
    return hashlib.sha256(
        json.dumps(dataclasses.asdict(spec), sort_keys=True, default=str).encode()
    ).hexdigest()[:8]


def plan_slots(exp: Experiment) -> list[Slot]:
    """Every run file of the experiment, configuration by configuration, in execution order."""
    slots: list[Slot] = []
    for config in ordered(exp):
        folder = exp.output / "runs" / f"{file_stem(config.label)}.{config.digest}"
        repeats = 1 + (exp.control_repeats if config.label == exp.control else 0)
        for suite in exp.suites:
            stem = f"{file_stem(suite.name)}.{suite_digest(suite)}"
            for r in range(1, repeats + 1):
                slots.append(
                    Slot(config, suite, r, exp.concurrency, config.label, folder / f"{stem}.r{r}.jsonl")
                )
        sweep = exp.sweep
        if sweep is not None and config.label in sweep.configurations:
            slots += _sweep_slots(exp, config)
    return slots


def _sweep_slots(exp: Experiment, config: ConfigSpec) -> list[Slot]:
    assert exp.sweep is not None
    slots = []
    folder = exp.output / "sweep" / f"{file_stem(config.label)}.{config.digest}"
    for name in exp.sweep.suites:
        suite = next(s for s in exp.suites if s.name == name)
        stem = f"{file_stem(suite.name)}.{suite_digest(suite)}"
        for c in exp.sweep.concurrency:
            for r in range(1, exp.sweep.repeats + 1):
                path = folder / f"{stem}.c{c}.r{r}.jsonl"
                slots.append(Slot(config, suite, r, c, f"{config.label}@c{c}", path, sweep=True))
    return slots


def ordered(exp: Experiment) -> list[ConfigSpec]:
    """The control first: every other configuration can then probe its side of (control, it)
    while it is up, and only the control has to be started a second time (see probing)."""
    control = exp.config(exp.control)
    return [control] + [c for c in exp.configurations if c is not control]
