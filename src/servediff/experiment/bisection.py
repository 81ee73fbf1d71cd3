"""Bisection: run just the factor combinations that settle each divergence's smallest cause.

    servediff experiment examples/tuned-factors.toml --bisect

The attribution (``compare.attribution``) narrows each diverging item down to the smallest
factor set, among the combinations already run, that reproduces its divergence; where a set
one factor smaller was never run, that smallest set is only an upper bound. ``--bisect`` is
delta debugging (Zeller & Hildebrandt 2002, "Simplifying and isolating failure-inducing
input") over the factors, one level at a time: it runs the design, reads the report's
unsettled items, adds the combinations that would settle them (every set one factor smaller
than an item's smallest reproducing set) as ordinary configurations of the experiment, runs
those, and repeats until every item is settled: its smallest set is then 1-minimal (no factor
can be dropped), found with far fewer runs than a full factorial when few factors matter.

Nothing is special about an added combination: it is expanded from the control as the design's
own are, labelled by its factors (``+flash_attn+kv_q8``), resumed and verified like any other,
and named in its run header, so the report (written after every round) renders it from the
records. A combination the engine cannot run is noted and left out; it is never asked for twice,
so the loop ends. Re-running ``--bisect`` resumes: finished runs are read, not made again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servediff.experiment.conductor import Outcome, run_experiment
from servediff.experiment.source import ExperimentError
from servediff.experiment.spec import Experiment, load_experiment
from servediff.report.rows.factor_table import FactorTable

FactorSet = tuple[str, ...]


@dataclass
class Bisection:
    """What ``--bisect`` did: the experiment's last outcome, and the combinations it added."""

    outcome: Outcome
    added: list[FactorSet] = field(default_factory=list)  # beyond the design, in the order run
    rounds: int = 0  # experiment passes after the first
    settled: int = 0  # diverging items (over suites) whose smallest set is established
    unsettled: int = 0  # still an upper bound (a combination could not run)


def attribution(outcome: Outcome) -> tuple[FactorTable, ...]:
    """The attribution the outcome's analysis holds, one table per suite (none: no analysis)."""
    return outcome.model.attribution if outcome.model is not None else ()


def unsettled_sets(tables: Sequence[FactorTable]) -> list[FactorSet]:
    """The combinations that would settle the unsettled items, in item order."""
    found = [s for a in tables for i in a.items if not i.established for s in i.untried]
    return list(dict.fromkeys(found))


def counts(tables: Sequence[FactorTable]) -> tuple[int, int]:
    """(settled, upper bound) diverging items over every suite."""
    return sum(a.settled for a in tables), sum(a.upper_bounds for a in tables)


def bisect(path: Path, output: Path | None = None, progress: bool = True) -> Bisection:
    """Run the experiment, then the combinations its unsettled items need, until none is left."""
    exp = load_experiment(path, output=output)
    if exp.design is None:
        raise ExperimentError(f"{path}: --bisect needs [[factors]]: there is nothing to bisect")
    result = Bisection(run_experiment(exp, progress=progress))
    asked: set[FactorSet] = set(exp.design.combinations())
    while True:
        todo = [s for s in unsettled_sets(attribution(result.outcome)) if s not in asked]
        if not todo:
            break
        asked.update(todo)
        result.added += todo
        exp = _with(path, output, exp, tuple(result.added))
        result.outcome = run_experiment(exp, progress=progress)
        result.rounds += 1
    result.settled, result.unsettled = counts(attribution(result.outcome))
    return result


def _with(path: Path, output: Path | None, exp: Experiment, added: tuple[FactorSet, ...]) -> Experiment:
    """The experiment with ``added`` combinations, written to the same output folder."""
    return load_experiment(path, output=output or exp.output, extra=added)


def summary(b: Bisection) -> str:
    """One line for the terminal: what was added, and how many items are settled."""
    added = ", ".join(" + ".join(s) for s in b.added) or "none"
    return (
        f"bisect: {len(b.added)} combination(s) run beyond the design in {b.rounds} round(s) ({added}); "
        f"{b.settled} diverging item(s) settled, {b.unsettled} still an upper bound"
    )
