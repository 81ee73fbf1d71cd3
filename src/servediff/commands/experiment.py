"""``servediff experiment``: run a whole study from one TOML file (launch each engine, verify, run,
stop, report).

    servediff experiment examples/llamacpp-flash.toml
    servediff experiment examples/llamacpp-flash.toml --check

``finish`` is what both ``experiment`` and ``demo`` print at the end, and their exit code.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servediff.argtypes import output_folder
from servediff.commands.grammar import Parser

if TYPE_CHECKING:
    from servediff.experiment import Experiment, Outcome

NAME = "experiment"
HELP = "run a whole study from one TOML file: launch each engine, verify, run, stop, report"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Runs every configuration of the experiment file one at a time, the control "
        "first (starting and stopping launched servers), the control repeats and the optional load "
        "sweep; probes every divergence from the control under both configurations ([probes]); then "
        "writes OUT/report.md, report.html and summary.json. Re-running skips finished runs and "
        "probes. Exit 2 when items or probes failed (recorded as errors; re-run to retry), 1 when a "
        "configuration claims a feature that its engine's counters show did not engage.",
    )
    p.add_argument("file", type=Path, help="experiment file (TOML)")
    p.add_argument("--out", type=output_folder, help="output folder (default: the file's 'output')")
    p.add_argument("--check", action="store_true", help="validate the file and list its runs; run nothing")
    p.add_argument(
        "--bisect",
        action="store_true",
        help="with [[factors]]: also run the combinations that settle each divergence's smallest cause",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        help="local: one configuration at a time here (default); ray: each configuration a Ray task "
        "with its declared resources, in parallel (needs servediff[ray]); overrides [executor] kind",
    )
    p.add_argument(
        "--ray-address", help="the Ray cluster to join (e.g. ray://head:10001); default: start a local one"
    )


def main(args: argparse.Namespace) -> int:
    from servediff.experiment import load_experiment, run_experiment

    exp = load_experiment(args.file, output=args.out)
    if args.check:
        from servediff.experiment.listing import check

        lines, notes = check(exp)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        for line in lines:
            print(line)
        return 0
    if args.bisect:
        from servediff.experiment.bisection import bisect, summary

        found = bisect(args.file, output=args.out, progress=not args.no_progress)
        print(summary(found))
        return finish(found.outcome)
    return finish(run_experiment(exp, not args.no_progress, **_executor(exp, args)))


def _executor(exp: Experiment, args: argparse.Namespace) -> dict[str, Any]:
    """The Ray executor when the file or the flags ask for it (the default runs here)."""
    from servediff.experiment import ExperimentError

    given = exp.executor
    chosen = dataclasses.replace(
        given, kind=args.executor or given.kind, address=args.ray_address or given.address
    )
    if chosen.kind != "ray":
        return {}
    try:
        import ray  # noqa: F401  (the extra is missing: say so before anything starts)

        from servediff.experiment.cluster import ray_executor
    except ImportError:
        raise ExperimentError("the Ray executor needs Ray: pip install 'servediff[ray]'") from None
    return {"executor": ray_executor(chosen)}


def finish(outcome: Outcome, t0: float | None = None, summary: bool = False) -> int:
    """What both `experiment` and `demo` print at the end, and the exit code: 2 when items or
    probes failed (recorded as errors; a re-run retries them), 1 when a claimed feature is
    flagged as not engaged, else 0."""
    import time

    if summary and outcome.model is not None:
        from servediff.report.render import markdown_summary

        print(markdown_summary(outcome.model))
    took = f" in {time.perf_counter() - t0:.0f} s" if t0 is not None else ""
    print(
        f"{len(outcome.ran)} run(s) made, {len(outcome.skipped)} already complete, "
        f"{len(outcome.probed)} probe record(s) written{took}; report: {outcome.report}"
    )
    for line in outcome.flags:
        print(f"flag: {line}", file=sys.stderr)
    for note in outcome.notes:
        print(f"note: {note}", file=sys.stderr)
    if outcome.errors or outcome.probe_errors:
        print(
            f"error: {outcome.errors} item(s) and {outcome.probe_errors} probe(s) failed and were "
            "recorded as errors; re-run to retry them",
            file=sys.stderr,
        )
        return 2
    return 1 if outcome.flags else 0
