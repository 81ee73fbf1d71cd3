"""``servediff audit``: its grammar beside its handler (the command's four names).

    servediff audit --base-url http://127.0.0.1:8080 --control-url http://127.0.0.1:8081

The flags are checked as they are parsed, so a bad level or workload is a usage error before any
request is sent; ``procedure`` goes from the flags to the analysis, imported only when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from servediff.argtypes import (
    MAX_IN_FLIGHT,
    count,
    fraction,
    nonnegative_float,
    output_file,
    output_folder,
    positive_int,
    seed,
)
from servediff.audit.names import ENGINES, WORKLOADS
from servediff.commands.grammar import Parser


def levels(text: str) -> tuple[int, ...]:
    """Concurrency levels as "8" or "4,8,16": each at least 2 (alone always runs), at most
    ``MAX_IN_FLIGHT`` (past it the level is a typo, and its arrays exhaust memory)."""
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of whole numbers: {text!r}") from None
    if not out or any(not 2 <= x <= MAX_IN_FLIGHT for x in out):
        raise argparse.ArgumentTypeError(
            f"levels under load must be whole numbers from 2 to {MAX_IN_FLIGHT:,}, not {text!r}"
        )
    return tuple(sorted(set(out)))


def workloads(text: str) -> tuple[str, ...]:
    out = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in out if x not in WORKLOADS]
    if not out or bad:
        raise argparse.ArgumentTypeError(
            f"unknown workload {', '.join(bad) or text!r}; choose from {', '.join(WORKLOADS)}"
        )
    return out


NAME = "audit"
HELP = "audit an engine's determinism promise under load, with a negative control (exit 0/1/2)"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Sends each workload prompt alone, then in blocks of concurrent requests (the "
        "needle at a random slot), to the promise configuration and to a negative control that is "
        "expected to diverge. Exit 0: no divergence, reported with an exact upper bound on the rate, "
        "and the control diverged; 1: the promise diverged (the trials, positions and logprob gaps "
        "are listed); 2: the control did not diverge either (the workload was too weak to test "
        "anything), or usage, input or engine errors. Re-running resumes from the records.",
    )
    src = p.add_argument_group("what to audit (one of)")
    src.add_argument("--base-url", help="the server that keeps the promise (OpenAI-compatible)")
    src.add_argument("--control-url", help="the negative control: a server expected to diverge")
    src.add_argument("--experiment", type=Path, help="an experiment file: launch its configurations")
    src.add_argument("--promise", help="with --experiment: the configuration that keeps the promise")
    src.add_argument("--control", help="with --experiment: the negative control's configuration")
    src.add_argument("--from", dest="from_dir", type=Path, help="recompute the verdict from these records")
    src.add_argument("--profile", choices=ENGINES, help="with --print-experiment: the engine")
    src.add_argument("--print-experiment", action="store_true", help="print the profile's experiment file")
    p.add_argument("--label", default="promise", help="name of the promise side in records")
    p.add_argument("--control-label", default="control", help="name of the control side in records")
    p.add_argument("--model", help="the served model id (default: the first the server lists)")
    p.add_argument(
        "--workload", type=workloads, default=("needle",), help=f"comma list of {', '.join(WORKLOADS)}"
    )
    p.add_argument("--levels", type=levels, default=(8,), help="concurrency levels under load (default 8)")
    p.add_argument("--trials", type=positive_int, default=25, help="needle blocks per level (default 25)")
    p.add_argument("--repeats", type=positive_int, default=2, help="alone sends per prompt (default 2)")
    p.add_argument("--rounds", type=positive_int, default=5, help="timing rounds per level (default 5)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the plan (needle slots, fillers)")
    p.add_argument("--max-tokens", type=positive_int, default=64, help="per request (default 64)")
    p.add_argument("--top-logprobs", type=count, default=5, help="logprobs per token (0: none; default 5)")
    p.add_argument("--temperature", type=nonnegative_float, default=0.0, help="0: greedy (default)")
    p.add_argument("--sampling-seed", type=seed, default=42, help="every request's seed (default 42)")
    p.add_argument("--max-prefix", type=positive_int, default=4097, help="cap on prefix lengths (chars)")
    p.add_argument("--confidence", type=fraction, default=0.95, help="of the upper bound (default 0.95)")
    p.add_argument("--timeout", type=positive_int, default=600, help="seconds per request (default 600)")
    p.add_argument("--out", type=output_folder, default=Path("audit-runs"), help="folder for the records")
    p.add_argument("--md", type=output_file, help="write the Markdown audit here")
    p.add_argument("--html", type=output_file, help="write the HTML audit here (one self-contained file)")
    p.add_argument("--junit", type=output_file, help="write JUnit XML here")
    p.add_argument("--json", action="store_true", help="print the JSON summary instead of Markdown")
    p.add_argument("--no-progress", action="store_true")


def main(args: argparse.Namespace) -> int:
    from servediff.audit import procedure
    from servediff.audit.promises import experiment_toml
    from servediff.report import junit, render
    from servediff.report.sections.audit import verdict_line

    if procedure.check(args) == "print":
        print(experiment_toml(args.profile, args.model), end="")
        return 0
    a = procedure.run(args)
    md = render.audit_markdown(a)
    if args.md:
        args.md.write_text(md, encoding="utf-8")
    if args.html:
        args.html.write_text(render.audit_html(a), encoding="utf-8")
    if args.junit:
        junit.write_audit(a, args.junit)
    print(json.dumps(render.audit_summary(a), indent=2) if args.json else md)
    print(f"audit: {verdict_line(a)} exit {a.exit_code}", file=sys.stderr)
    return a.exit_code
