"""``servediff probe``: measure the top-k at every divergence of two runs, after the runs.

    servediff probe runs/a.jsonl runs/b.jsonl --out runs/a-b.probes.jsonl

Writes a probe record that ``servediff compare`` reads beside the runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from servediff.argtypes import int_range, output_file
from servediff.commands.grammar import Parser, UsageError

NAME = "probe"
HELP = "measure the top-k at every divergence of two runs, after the runs"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="For each divergence of RUN_A vs RUN_B, ask each configuration for its top-k "
        "next tokens after prompt + common prefix, and write a probe record that `compare` reads "
        "beside the runs. Embedded runs are rebuilt from their headers' knobs; servers are given "
        "with --base-url-a/--base-url-b (chat prompts need --template).",
    )
    p.add_argument("run_a", type=Path)
    p.add_argument("run_b", type=Path)
    p.add_argument("--out", type=output_file, required=True, help="probe record (JSONL) to write")
    # a gap needs two tokens; OpenAI-compatible servers cap logprobs at 20
    p.add_argument("--k", type=int_range(2, 20), default=5, help="top-k to obtain, 2 to 20 (default 5)")
    p.add_argument("--model-path", type=Path, help="GGUF or registry name of the embedded runs")
    p.add_argument("--base-url-a", help="server of configuration A (OpenAI-compatible)")
    p.add_argument("--base-url-b", help="server of configuration B")
    p.add_argument(
        "--template",
        type=Path,
        help="chat template for servers: a .gguf (its metadata), tokenizer_config.json or a Jinja file",
    )
    p.add_argument(
        "--replay",
        action="store_true",
        help="servers: send the prefix token by token so a server that reuses its KV cache "
        "(llama-cpp-python) evaluates it as generation did; default: one pass",
    )


def main(args: argparse.Namespace) -> int:
    from servediff.engines.factory import ProbeTargets, run_probers
    from servediff.probe import probe_pair
    from servediff.records import read_run

    runs = (read_run(args.run_a), read_run(args.run_b))
    if bool(args.base_url_a) != bool(args.base_url_b):
        raise UsageError("give both --base-url-a and --base-url-b, or neither (embedded)")
    urls = (args.base_url_a, args.base_url_b) if args.base_url_a else None
    probers, template = run_probers(runs, ProbeTargets(urls, args.template, args.replay, args.model_path))
    with probers[0], probers[1]:
        ps = probe_pair(
            runs,
            probers,
            args.out,
            k=args.k,
            identities=(probers[0].identity(), probers[1].identity()),
            template_source=template,
        )
    failed = sum(1 for e in ps.entries.values() if e.error)
    print(f"{args.out}: {len(ps.entries)} probe(s), {failed} failed")
    return 2 if failed else 0
