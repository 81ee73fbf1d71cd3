"""``servediff import``: turn lm-evaluation-harness or Inspect logs into run records.

    servediff import lm-eval a/samples_gsm8k_*.jsonl b/samples_gsm8k_*.jsonl --label a --label b --out runs/

(The module is not called ``import``: that word is Python's.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from servediff.argtypes import output_path, positive_int
from servediff.commands.grammar import Parser, UsageError

if TYPE_CHECKING:
    from servediff.importers import Imported

NAME = "import"
HELP = "turn lm-evaluation-harness or Inspect logs into run records"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Read evaluation logs written by another tool into servediff run records, so "
        "compare, report and export work on them unchanged. Several files in one command must pair "
        "item by item (same task, same documents), or nothing is written (exit 2).",
    )
    kinds = p.add_subparsers(dest="source", required=True, metavar="SOURCE")
    for name, text, choose in (
        ("lm-eval", "lm-evaluation-harness --log_samples output (samples_<task>_<date>.jsonl)", "filter"),
        ("inspect", "Inspect eval logs (.json; .eval when inspect_ai is installed)", "scorer"),
    ):
        k = kinds.add_parser(name, help=text, description=f"Import {text}.")
        k.add_argument("paths", nargs="+", type=Path, help="log files, one per configuration (or repeat)")
        k.add_argument(
            "--label",
            action="append",
            required=True,
            help="configuration name, once per path; a label given twice makes repeats (the control)",
        )
        k.add_argument(
            "--out", type=output_path, required=True, help="record file (one path) or folder (several)"
        )
        k.add_argument("--model", help="model name to record (default: the one in the log)")
        k.add_argument(
            "--force",
            action="store_true",
            help="write the records even if the logs' sampling or prompt setup differ (compare "
            "will still ask for --force)",
        )
        k.add_argument(
            "--allow-incomplete",
            action="store_true",
            help="import a log whose items cannot all be accounted for (a failed or cancelled run, "
            "a samples file without its results file) instead of refusing it",
        )
        k.add_argument(f"--{choose}", dest="choose", help=f"which {choose} to import (default: the first)")
        if name == "lm-eval":
            k.add_argument(
                "--metric", help="per-sample metric that says right/wrong (default: exact_match/acc)"
            )
        else:
            k.add_argument(
                "--epoch", type=positive_int, help="import only this epoch (default: each epoch, as repeats)"
            )


def main(args: argparse.Namespace) -> int:
    from servediff.importers import (
        IMPORTERS,
        ImportOptions,
        LogImportError,
        check_target,
        numbered,
        outputs,
        pairing_problems,
        write,
    )

    if len(args.label) != len(args.paths):
        raise UsageError(f"give one --label per path ({len(args.paths)} paths, {len(args.label)} labels)")
    runs: list[Imported] = []
    for path, label in zip(args.paths, args.label):
        opts = ImportOptions(
            label=label,
            model=args.model,
            choose=args.choose,
            metric=getattr(args, "metric", None),
            epoch=getattr(args, "epoch", None),
            allow_incomplete=args.allow_incomplete,
        )
        runs.extend(IMPORTERS[args.source](path, opts))
    runs = numbered(runs)
    found = pairing_problems(runs)
    if found and not args.force:
        raise LogImportError(
            "these logs do not pair item by item:\n  " + "\n  ".join(found) + "\n(--force writes them anyway)"
        )
    for problem in found:
        print(f"warning: forced despite: {problem}", file=sys.stderr)
    targets = outputs(runs, args.out, single=len(args.paths) == len(runs) == 1)
    for run, out in zip(runs, targets):  # every target checked before anything is written
        check_target(run, out)
    for run, out in zip(runs, targets):
        write(run, out)
        scored = sum(1 for it in run.items if it.correct is not None)
        print(f"{out}: {run.header.label} #{run.header.repeat}, {len(run.items)} items ({scored} scored)")
        for note in run.notes:
            print(f"  note: {note}", file=sys.stderr)
    return 0
