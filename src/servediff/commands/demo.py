"""``servediff demo``: the whole study on embedded llama.cpp (stock, stock again, tuned → report.md).

servediff demo
servediff demo --engine hf --only fp16
"""

from __future__ import annotations

import argparse
from pathlib import Path

from servediff.argtypes import count, output_folder, positive_int
from servediff.commands.experiment import finish
from servediff.commands.grammar import Parser

NAME = "demo"
HELP = "the whole study on embedded llama.cpp: stock, stock again, tuned → report.md"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="The built-in embedded experiment: the 20-prompt suite and a 100-item "
        "subject-stratified MMLU sample under stock (twice: the control) and tuned (prompt-lookup "
        "speculative decoding + flash attention + prefix-cache reuse) on SmolLM2-135M in-process; then "
        "every stock-vs-tuned divergence is probed under both configurations, and OUT/report.md, "
        "report.html and summary.json are written. The same study as `servediff experiment "
        "examples/embedded.toml`. Re-running resumes.",
    )
    p.add_argument("--out", type=output_folder, default=Path("servediff-demo"), help="output folder")
    p.add_argument("--max-tokens", type=positive_int, default=300)
    p.add_argument("--limit", type=positive_int, help="only the first N prompts (quick look)")
    p.add_argument("--mmlu-limit", type=count, default=100, help="stratified MMLU items (0: skip MMLU)")
    p.add_argument("--model-path", type=Path, help="GGUF file or registry name (default: SmolLM2)")
    p.add_argument("--no-progress", action="store_true")
    g = p.add_argument_group(
        "transformers study (--engine hf): bf16 batch 1 twice, batched, prompt lookup, fp16, fp32"
    )
    g.add_argument("--engine", choices=["llamacpp", "hf"], default="llamacpp")
    g.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:N")
    g.add_argument("--batch-size", type=count, default=0, help="the batched configuration (0: all prompts)")
    g.add_argument("--prompt-lookup", type=count, default=8, help="tokens drafted by prompt lookup")
    g.add_argument("--top-logprobs", type=count, default=5)
    g.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="LABEL",
        help="run only these configurations (and the bf16-b1 reference)",
    )


def main(args: argparse.Namespace) -> int:
    import time

    from servediff.experiment import run_experiment
    from servediff.experiment.builtin import HFStudyOptions, demo_experiment, hf_experiment

    if args.engine == "hf":
        study = HFStudyOptions(
            max_tokens=args.max_tokens,
            limit=args.limit,
            model_path=args.model_path,
            device=args.device,
            batch_size=args.batch_size,
            prompt_lookup=args.prompt_lookup,
            top_logprobs=args.top_logprobs,
            only=tuple(args.only),
        )
        exp = hf_experiment(args.out if args.out != Path("servediff-demo") else Path("servediff-hf"), study)
    else:
        exp = demo_experiment(
            args.out,
            max_tokens=args.max_tokens,
            limit=args.limit,
            mmlu_limit=args.mmlu_limit,
            model_path=args.model_path,
        )
    t0 = time.perf_counter()
    return finish(run_experiment(exp, progress=not args.no_progress), t0, summary=True)
