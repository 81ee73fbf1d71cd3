"""``servediff report``: the study of compare, written as HTML and/or Markdown.

    servediff report runs/*.jsonl --html report.html

Reads the records as ``servediff compare`` does (its study options and its read begun early).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from servediff.argtypes import fraction, output_file
from servediff.commands.compare import add_study_options, reading
from servediff.commands.grammar import Parser

if TYPE_CHECKING:
    from servediff.records import Reading

NAME = "report"
HELP = "write the HTML (and/or Markdown) report of run records"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="The study of compare, written as one self-contained HTML file (plots inline, "
        "no network) and/or Markdown. Rendered from the records only.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="record files (JSONL)")
    p.add_argument("--html", type=output_file, help="write the HTML report here")
    p.add_argument("--md", type=output_file, help="write the Markdown report here")
    add_study_options(p)
    p.add_argument("--margin", type=fraction, default=0.01, help="non-inferiority margin (as compare)")
    p.add_argument(
        "--verify", type=Path, action="append", default=[],
        help="a servediff verify result (JSON) to lay out among the checks (repeatable)",
    )  # fmt: skip


def main(args: argparse.Namespace) -> int:
    with reading(args.runs) as begun:
        return _report(args, begun)


def _report(args: argparse.Namespace, begun: Reading) -> int:
    import dataclasses

    from servediff.compare.loader import load
    from servediff.compare.verify_result import read
    from servediff.report import render
    from servediff.report.assembly import build

    # The same study and model compare builds: runs, probe records beside them, the two thresholds.
    report = build(
        *load(
            begun,
            force=args.force,
            title=args.title,
            near_tie=args.near_tie,
            margin=args.margin,
            checkpoints=args.checkpoints,
        )
    )
    if args.verify:
        report = dataclasses.replace(report, verify=tuple(read(p) for p in args.verify))
    if not (args.html or args.md):
        print(render.markdown(report))
        return 0
    for path in render.write_reports(report, render.Outputs(html=args.html, md=args.md)):
        print(f"wrote {path}")
    return 0
