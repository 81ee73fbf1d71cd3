"""``servediff gate``: a CI gate, is the candidate non-inferior to the control? (sequential, exit 0/1/2)

servediff gate --config-a stock --config-b tuned --suite gsm8k --margin 0.02
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from servediff.argtypes import (
    fraction,
    int_range,
    output_file,
    output_folder,
    positive_int,
    proportion,
    seed,
)
from servediff.commands.grammar import Parser

if TYPE_CHECKING:
    from servediff.gate import GateRequest

NAME = "gate"
HELP = "CI gate: is the candidate non-inferior to the control? (sequential, exit 0/1/2)"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Runs a scored suite in a seeded random order on the control (A) and the "
        "candidate (B), batch by batch, and stops as soon as an anytime-valid confidence sequence "
        "on accuracy(B) - accuracy(A) lies above -margin (pass, exit 0) or below it (fail, exit "
        "1), or at --max-items (inconclusive, exit 1). Exit 1 also when the control does not "
        "reproduce itself; 2 on usage or engine errors. Re-running resumes from the records.",
    )
    for side in ("a", "b"):
        p.add_argument(f"--config-{side}", help=f"embedded knob set of {side.upper()} (default stock)")
        p.add_argument(f"--base-url-{side}", help=f"OpenAI-compatible server of {side.upper()}")
        p.add_argument(f"--label-{side}", help="name in records and reports")
    p.add_argument("--config-file", type=Path, help="TOML with [configs.NAME] knob tables")
    p.add_argument("--model-path", type=Path, help="GGUF or registry name for embedded sides")
    p.add_argument("--suite", default="gsm8k", help="a scored suite: gsm8k, mmlu or mmlu-letter")
    p.add_argument("--data", type=Path, help="the suite's data file instead of its default source")
    p.add_argument("--margin", type=fraction, default=0.02, help="non-inferiority margin (default 0.02)")
    p.add_argument("--alpha", type=fraction, default=0.025, help="each error rate (default 0.025)")
    p.add_argument(
        "--max-items", type=positive_int, help="item budget (default: the whole suite, or the plan's)"
    )
    p.add_argument(
        "--power",
        type=fraction,
        help="plan the budget: the fewest items that pass with this power if the candidate changes "
        "nothing (needs a discordance: --discordance, or the pilot's)",
    )
    p.add_argument(
        "--discordance",
        type=proportion,
        help="share of items on which A and B disagree, for the plan (default: measured on the pilot)",
    )
    p.add_argument(
        "--pilot", type=positive_int, default=100, help="scored items that measure the discordance"
    )
    p.add_argument("--batch", type=positive_int, default=10, help="items per look (default 10)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the item order")
    p.add_argument("--max-tokens", type=positive_int, help="default: the suite's own, else 300")
    p.add_argument("--max-tokens-b", type=positive_int, help="B's own max tokens (a capped candidate)")
    p.add_argument(
        "--top-logprobs",
        type=int_range(0, 20),
        default=0,
        help="record each token's top-k logprobs on both sides, so that `servediff compare` of "
        "the gate's records says why texts part (near-tie flip, rank change); default 0: not "
        "requested (requesting them can change an engine's path)",
    )
    p.add_argument("--determinism-items", type=positive_int, default=5, help="control repeat size")
    p.add_argument("--no-determinism-check", action="store_true")
    p.add_argument("--out", type=output_folder, default=Path("gate-runs"), help="folder for records")
    p.add_argument("--md", type=output_file, help="write the Markdown gate report here")
    p.add_argument("--junit", type=output_file, help="write JUnit XML here (one case per check)")
    p.add_argument("--json", action="store_true", help="print the JSON summary instead of Markdown")
    p.add_argument("--no-progress", action="store_true")


def gate_request(args: argparse.Namespace) -> GateRequest:
    """The gate's flags as the library's request (a side is named by its label, else its knob set)."""
    from servediff.gate import GateOptions, GateRequest, SideFlags

    determinism = 0 if args.no_determinism_check else args.determinism_items
    options = GateOptions(
        args.out,
        args.margin,
        args.alpha,
        args.max_items,
        args.batch,
        args.seed,
        determinism,
        not args.no_progress,
        power=args.power,
        discordance=args.discordance,
        pilot=args.pilot,
    )
    return GateRequest(
        a=SideFlags(args.label_a or args.config_a or "control", args.config_a, args.base_url_a),
        b=SideFlags(args.label_b or args.config_b or "candidate", args.config_b, args.base_url_b),
        suite=args.suite,
        options=options,
        data=args.data,
        max_tokens=args.max_tokens,
        max_tokens_b=args.max_tokens_b,
        top_logprobs=args.top_logprobs,
        config_file=args.config_file,
        model_path=args.model_path,
    )


def main(args: argparse.Namespace) -> int:
    from servediff import gate
    from servediff.report import junit, render

    g = gate.run_request(gate_request(args))
    md = render.gate_markdown(g)
    if args.md:
        args.md.write_text(md, encoding="utf-8")
    if args.junit:
        junit.write(g, args.junit)
    print(json.dumps(render.gate_summary(g), indent=2) if args.json else md)
    print(f"gate: {g.verdict.upper()} (control {g.determinism.status}); exit {g.exit_code}", file=sys.stderr)
    return g.exit_code
