"""``servediff compare``: compare run records (control, identity, every divergence) and print the report.

    servediff compare runs/*.jsonl --md report.md
    servediff compare runs/*.jsonl --json --margin 0.02     # a check: exit 1 unless non-inferior

``add_study_options`` and ``reading`` are shared with ``servediff report``, which reads the
records the same way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from servediff.argtypes import fraction, nonnegative_float, output_file
from servediff.commands.grammar import Parser

if TYPE_CHECKING:
    from servediff.records import Reading, ReadOptions

# How compare and report read the records (None: ``records.ReadOptions()``); a test reads small
# records the way large ones are read by setting other options here.
READ_OPTIONS: ReadOptions | None = None

NAME = "compare"
HELP = "compare run records: control, identity, every divergence"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Runs with the same label are repeats (the control); every pair of labels is "
        "compared item by item. Refuses runs whose prompts, sampling or model differ.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="record files (JSONL)")
    p.add_argument("--md", type=output_file, help="also write the Markdown report here")
    p.add_argument("--json", action="store_true", help="print the machine-readable summary instead")
    add_study_options(p)
    p.add_argument(
        "--margin",
        type=fraction,
        help="scored suites: non-inferiority margin on accuracy, and the difference the sample "
        "sizes are computed for (default: report only, at 1 pp). Given, it is a check: exit 1 "
        "unless every pair is non-inferior and every control deterministic",
    )


def add_study_options(p: argparse.ArgumentParser) -> None:
    """What compare and report both read the records with."""
    p.add_argument("--force", action="store_true", help="compare even if prompts/sampling/model differ")
    p.add_argument(
        "--checkpoints",
        action="store_true",
        help="different weight files of one model are a declared dimension (e.g. Q4_1 vs Q8_0): "
        "compare them when their tokenizers match (vocabulary hash) instead of refusing",
    )
    p.add_argument("--title", default="servediff report")
    p.add_argument(
        "--near-tie",
        type=nonnegative_float,
        default=0.1,
        help="near-tie threshold for A's top-1 − top-2 logprob gap, in nats (default 0.1)",
    )


@contextmanager
def reading(paths: Sequence[Path]) -> Iterator[Reading]:
    """The records' read begun (``records.Reading``: a large shadow segment's children reading it
    in halves) before this process imports the analysis (~0.6 s, scipy.special's ~0.2 s for the
    hazard's interval among it), in the memory an analysis runs in (``memory.for_analysis``);
    ``load`` finishes the read. No child outlives the block."""
    from servediff.memory import for_analysis
    from servediff.records import Reading, ReadOptions

    with for_analysis(), Reading(paths, READ_OPTIONS or ReadOptions()) as begun:
        if begun.halves:
            import scipy.special  # noqa: F401
        yield begun


def main(args: argparse.Namespace) -> int:
    with reading(args.runs) as begun:
        return _compare(args, begun)


def _compare(args: argparse.Namespace, begun: Reading) -> int:
    from servediff.compare.loader import load
    from servediff.compare.study import require_comparison
    from servediff.report import render
    from servediff.report.assembly import build

    margin = 0.01 if args.margin is None else args.margin  # the report's margin when none is asked
    study, options = load(
        begun,
        force=args.force,
        title=args.title,
        near_tie=args.near_tie,
        margin=margin,
        checkpoints=args.checkpoints,
    )
    require_comparison(study)
    report = build(study, options)
    if args.json:
        render.write_reports(report, render.Outputs(md=args.md))
        sys.stdout.flush()  # anything printed before goes out first
        render.write_summary(report, sys.stdout.buffer)
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
    else:
        md = render.markdown(report)  # rendered once: printed, and written where asked
        print(md)
        if args.md:
            args.md.parent.mkdir(parents=True, exist_ok=True)
            args.md.write_text(md, encoding="utf-8")
    if args.margin is None:
        return 0
    from servediff.compare.checks import failed_checks

    failed = failed_checks(report.controls, report.quality.pairs if report.quality else ())
    for line in failed:
        print(f"check failed: {line}", file=sys.stderr)
    return 1 if failed else 0
