"""Command line: build the parser from the commands' registry, run the one named, map its errors to
exit codes (0 ok, 1 a requested check failed, 2 usage, configuration, input or engine error).

    servediff demo
    servediff compare runs/*.jsonl --md report.md

Each command's grammar and handler live in one module (``servediff.commands``); nothing else is here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from servediff import __version__
from servediff.commands.grammar import Parser, UsageError
from servediff.commands.registry import COMMANDS

EXAMPLES = """\
examples:
  servediff demo                                   the whole study on embedded llama.cpp
  servediff run --config stock --out runs/a1.jsonl --label stock
  servediff run --config stock --out runs/a2.jsonl --label stock --repeat 2
  servediff run --config tuned --out runs/b.jsonl  --label tuned
  servediff compare runs/*.jsonl --md report.md
  servediff run --suite mmlu --limit 100 --config tuned --out runs/mmlu-tuned.jsonl
  servediff stats mcnemar --b 8 --c 0
  servediff report runs/*.jsonl --html report.html
  servediff import lm-eval a/samples_gsm8k_*.jsonl b/samples_gsm8k_*.jsonl --label a --label b --out runs/
  servediff export runs/*.jsonl --csv items.csv
  servediff experiment examples/llamacpp-flash.toml   launch, verify, run and stop each server; report
  servediff run --engine http --base-url http://127.0.0.1:8000 --label vllm-stock --out runs/v.jsonl
"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="servediff",
        description="Does my serving configuration change my model's output, and its quality? "
        "Run a suite at temperature 0 under each configuration (and again, as a control), then "
        "compare the records.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"servediff {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        command.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from servediff.engines import EngineError

    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "model_path", None) is not None:
            from servediff.models import resolve

            # A registry name becomes its verified cached file here, once, for every command;
            # a name not fetched yet is an error that says how to fetch it.
            args.model_path = resolve(args.model_path)
        return COMMANDS[args.command].main(args)
    # CompareError and RecordError are ValueErrors; importing compare here just to name them
    # would load scipy (≈0.8 s of CPU) into every command, `run` included.
    except (UsageError, EngineError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file that cannot be read or written: say which, and why
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except MemoryError:  # a resource error, never a finding: exit 1 would read as "the check failed"
        print("error: out of memory (a size or count too large for this machine?)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished items are saved; re-run the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
