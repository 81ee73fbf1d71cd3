"""``servediff stats``: accuracy CIs, exact McNemar and sample sizes from counts you already have.

servediff stats mcnemar --b 8 --c 0
servediff stats power --delta 0.02 --discordance 0.1
"""

from __future__ import annotations

import argparse
import json

from servediff.argtypes import count, fraction, positive_int, proportion
from servediff.commands.grammar import Parser

NAME = "stats"
HELP = "accuracy CIs, exact McNemar and sample sizes from counts you already have"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="The statistics of the Quality section, from counts. Paired data (two "
        "configurations on the same items) is tested by its discordant items b and c.",
    )
    kinds = p.add_subparsers(dest="stat", required=True, metavar="STAT")
    ci = kinds.add_parser("ci", help="accuracy with Wilson 95 %% CI and the CLT ±")
    ci.add_argument("--correct", type=count, required=True, help="items answered right")
    ci.add_argument("--n", type=positive_int, required=True, help="items scored")
    mc = kinds.add_parser("mcnemar", help="exact McNemar on b (A right, B wrong) and c (A wrong, B right)")
    mc.add_argument("--b", type=count, required=True)
    mc.add_argument("--c", type=count, required=True)
    mc.add_argument("--n", type=positive_int, help="items compared (with --a-correct: paired CI on Δ)")
    mc.add_argument("--a-correct", type=count, help="items A got right")
    mc.add_argument("--margin", type=fraction, default=0.01, help="non-inferiority margin (default 0.01)")
    pw = kinds.add_parser("power", help="items needed to detect a difference δ (80 %% power, α 0.05)")
    pw.add_argument("--delta", type=fraction, required=True, help="difference in accuracy, e.g. 0.02")
    pw.add_argument(
        "--discordance", type=proportion, required=True, help="fraction of items on which A, B differ"
    )
    pw.add_argument(
        "--p",
        type=proportion,
        default=0.5,
        help="baseline accuracy for the unpaired size (0.5: the worst case)",
    )
    pw.add_argument("--power", type=fraction, default=0.8)
    pw.add_argument("--alpha", type=fraction, default=0.05)
    for k in (ci, mc, pw):
        k.add_argument("--json", action="store_true", help="print JSON")


def main(args: argparse.Namespace) -> int:
    from servediff.compare import from_counts as counts

    out: dict[str, object]
    if args.stat == "ci":
        out = counts.accuracy(args.correct, args.n)
    elif args.stat == "mcnemar":
        out = counts.mcnemar(args.b, args.c, args.n, args.a_correct, args.margin)
    else:
        out = counts.sample_sizes(args.delta, args.discordance, args.p, args.alpha, args.power)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k}: {v:.6g}" if isinstance(v, float) else f"{k}: {v}")
    return 0
