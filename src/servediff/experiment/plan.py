"""The experiment's plan: every record file it will write, in execution order.

    servediff experiment examples/llamacpp-flash.toml --check     # lists the plan

Pure functions of the experiment file: no engine, no file is touched here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
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
    fields = dataclasses.asdict(spec)
    if fields["concurrency"] is None:  # unset: the digest (and file names) of files made before it
        del fields["concurrency"]
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:8]


def plan_slots(exp: Experiment) -> list[Slot]:
    """Every run file of the experiment, configuration by configuration, in execution order."""
    slots: list[Slot] = []
    for config in ordered(exp):
        folder = exp.output / "runs" / f"{file_stem(config.label)}.{config.digest}"
        # The control's extra runs double as speed repeats and the other way round.
        repeats = max(exp.speed_repeats, 1 + (exp.control_repeats if config.label == exp.control else 0))
        for suite in exp.suites:
            stem = f"{file_stem(suite.name)}.{suite_digest(suite)}"
            for r in range(1, repeats + 1):
                slots.append(
                    Slot(
                        config,
                        suite,
                        r,
                        suite.concurrency or exp.concurrency,
                        config.label,
                        folder / f"{stem}.r{r}.jsonl",
                    )
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


BLOCK = 4  # items per block of an interleaved run: short enough to follow a drift in load


def alternated(labels: Sequence[str], repeats: int) -> list[tuple[str, int]]:
    """The order of the configurations' repeats when they run one after the other (servers that
    may not fit beside each other): A B, B A, A B, … (ABBA), one (label, repeat) per run. A
    machine that speeds up or slows down through the experiment then weighs on every
    configuration alike, and each configuration's repeats span the experiment."""
    order = []
    for r in range(1, repeats + 1):
        order += [(label, r) for label in (labels if r % 2 else list(reversed(labels)))]
    return order


def interleaved(
    labels: Sequence[str], ids: Sequence[str], block: int = BLOCK
) -> list[tuple[str, tuple[str, ...]]]:
    """The order in which configurations that can be up at once run one suite: the items in
    blocks, every configuration runs each block, forward on even blocks and backward on odd
    ones (A B, B A, A B, … : ABBA). A load that rises or falls through the experiment then
    weighs on every configuration alike instead of on whichever ran last."""
    blocks = [tuple(ids[k : k + block]) for k in range(0, len(ids), block)]
    order = []
    for n, items in enumerate(blocks):
        for label in labels if n % 2 == 0 else reversed(labels):
            order.append((label, items))
    return order
