"""What an experiment would do, without doing it: its runs and probes, each with its state.

    servediff experiment examples/llamacpp-flash.toml --check

Loads the suites (a missing data file is found now, not after a server has started), plans the
runs and probes, and says which records exist. Nothing is started.
"""

from __future__ import annotations

from servediff.experiment.conductor import check_probe_templates, load_suites
from servediff.experiment.plan import plan_slots
from servediff.experiment.probing import plan_probes
from servediff.experiment.spec import Experiment


def check(exp: Experiment) -> tuple[list[str], list[str]]:
    """(lines, notes): one tab-separated line per run and per probe record; notes on what is
    left out (combinations that cannot run, probes without a template)."""
    suites = load_suites(exp)
    slots = plan_slots(exp)
    probes, notes = check_probe_templates(exp, plan_probes(exp, slots), suites)
    lines = [
        f"{s.label}\t{s.suite.name}\t#{s.repeat}\tc={s.concurrency}\t"
        f"{'exists' if s.path.is_file() else 'to run'}\t{s.path}"
        for s in slots
    ]
    for probe in probes:
        state = "exists" if probe.path.is_file() else "after the runs, where they diverge"
        lines.append(f"probe\t{probe.name}\t{state}\t{probe.path}")
    return lines, [*exp.notes, *notes, *(f"{why}, before running" for why in exp.unfetched)]
