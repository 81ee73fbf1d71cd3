"""``servediff compare``: compare run records (control, identity, every divergence) and print the report.

    servediff compare runs/*.jsonl --md report.md
    servediff compare runs/*.jsonl --json --margin 0.02     # a check: exit 1 unless non-inferior

``add_study_options`` and ``pairs_begun`` are shared with ``servediff report``, which reads the
records the same way.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from servediff.argtypes import fraction, nonnegative_float, output_file
from servediff.commands.grammar import Parser

if TYPE_CHECKING:
    from servediff.halves import Begun

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
def pairs_begun(paths: Sequence[Path]) -> Iterator[dict[tuple[Path, Path], Begun]]:
    """A large shadow segment's read in halves begun (``halves.begin_pairs``) before this process
    imports the analysis (~0.6 s, scipy.special's ~0.2 s for the hazard's interval among it): the
    children read meanwhile, and ``load`` finishes their reads. No child outlives the block."""
    from servediff.halves import begin_pairs

    begun = begin_pairs(paths)
    try:
        if begun:
            import scipy.special  # noqa: F401
        yield begun
    finally:
        for pair in begun.values():
            pair.close()


def main(args: argparse.Namespace) -> int:
    with pairs_begun(args.runs) as begun:
        return _compare(args, begun)


def _compare(args: argparse.Namespace, begun: dict[tuple[Path, Path], Begun]) -> int:
    from servediff.compare.loader import load
    from servediff.compare.study import require_comparison
    from servediff.gcpause import gc_paused
    from servediff.hugepages import numpy_without_huge_pages
    from servediff.report import render
    from servediff.report.assembly import build

    numpy_without_huge_pages()

    margin = 0.01 if args.margin is None else args.margin  # the report's margin when none is asked
    study, options = load(
        args.runs,
        force=args.force,
        title=args.title,
        near_tie=args.near_tie,
        margin=margin,
        checkpoints=args.checkpoints,
        begun=begun,
    )
    require_comparison(study)
    # The records stay alive to the end: moving them out of the cyclic GC's view keeps its
    # full collections from re-scanning 100,000s of items while the report model allocates.
    gc.freeze()
    with gc_paused():
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


