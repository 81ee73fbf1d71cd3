"""``servediff export``: run records as a table, one row per (item, configuration run).

servediff export runs/*.jsonl --csv items.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

from servediff.argtypes import output_file
from servediff.commands.grammar import Parser, UsageError

NAME = "export"
HELP = "write run records as a table: one row per (item, configuration run)"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Flatten run records into CSV and/or Parquet, one row per item and configuration "
        "run, with each completion's standing against the suite's reference run.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="record files (JSONL)")
    p.add_argument("--csv", type=output_file, help="write CSV here")
    p.add_argument("--parquet", type=output_file, help="write Parquet here (needs pyarrow)")
    p.add_argument("--force", action="store_true", help="export even if prompts/sampling/model differ")


def main(args: argparse.Namespace) -> int:
    from servediff.compare.loader import load
    from servediff.export import rows, write_csv, write_parquet
    from servediff.records import WHOLE

    if not (args.csv or args.parquet):
        raise UsageError("give --csv PATH and/or --parquet PATH")
    table = rows(load(args.runs, force=args.force, reading=WHOLE)[0])  # every field of every item
    for path, write in ((args.csv, write_csv), (args.parquet, write_parquet)):
        if path:
            write(table, path)
            print(f"{path}: {len(table)} rows")
    return 0
