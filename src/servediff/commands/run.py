"""``servediff run``: run a suite on one engine configuration into a record file.

    servediff run --config stock --out runs/a1.jsonl --label stock
    servediff run --engine http --base-url http://127.0.0.1:8000 --label vllm-stock --out runs/v.jsonl

The grammar (the suite, sampling, and each engine's knobs) sits beside the handler, which turns the
flags into one ``runner.execute`` call. The engines are imported inside ``main``: parsing loads none.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servediff.argtypes import (
    count,
    in_flight,
    int_range,
    nonnegative_float,
    nucleus,
    output_file,
    positive_float,
    positive_int,
    seed,
)
from servediff.commands.grammar import Parser, UsageError
from servediff.engines.profiles import CLAIMS
from servediff.engines.server_sampling import SENDS
from servediff.option_rules import RUN_RULES
from servediff.types import MAX_SAMPLES

if TYPE_CHECKING:
    from servediff.engines.factory import EngineSpec

NAME = "run"
HELP = "run a suite on one engine configuration into a record file"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
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


def _engine_spec(args: argparse.Namespace) -> tuple[EngineSpec, int]:
    """The engine configuration the flags describe, and its concurrency."""
    from servediff.engines.factory import EngineSpec, llama_knobs
    from servediff.engines.openai_http import HTTPOptions

    if args.engine == "http":
        if not args.base_url:
            raise UsageError("--engine http needs --base-url")
        options = HTTPOptions(
            base_url=args.base_url,
            model=args.model,
            concurrency=args.concurrency,
            timeout_s=args.timeout,
            max_retries=args.retries,
            api_key_env=args.api_key_env,
            stream=args.stream,
            send=args.send,
        )
        return EngineSpec(args.label or "http", http=options), args.concurrency
    if args.engine == "hf":
        from servediff.engines.hf_knobs import HFKnobs

        hf = HFKnobs(
            batch_size=args.batch_size,
            dtype=args.dtype,
            attn=args.attn,
            prompt_lookup=args.prompt_lookup or 0,
            draft_model=args.draft_model,
            device=args.device,
        )
        return EngineSpec(args.label or "hf", hf=hf, model_path=args.model_path), 1
    names = ("n_batch", "n_ubatch", "prompt_lookup", "threads", "kv_cache_type", "flash_attn", "prefix_cache")
    knobs = llama_knobs(args.config, args.config_file, {n: getattr(args, n) for n in names})
    return EngineSpec(args.label or args.config, llama=knobs, model_path=args.model_path), 1


def _counters(engine: Any) -> Any:
    """A server's feature counters before a run (vLLM's /metrics); None for other engines."""
    if getattr(engine, "kind", None) != "http" or not hasattr(engine, "profile"):
        return None
    from servediff.engines.run_counters import read_counters

    return read_counters(engine.base_url, engine.profile)


def _verify(engine: Any, claims: Sequence[str], before: Any, result: Any) -> None:
    """Record in the header what the counters say the run engaged (as experiments do)."""
    if before is None and not claims:
        return
    from servediff.engines.run_counters import read_counters, run_verification
    from servediff.records import annotate

    after = read_counters(engine.base_url, engine.profile) if before is not None else None
    covers = "whole run" if result.skipped == 0 else f"resumed part ({result.total - result.skipped} items)"
    annotate(result.path, {"verification": run_verification(engine.profile, claims, before, after, covers)})


def main(args: argparse.Namespace) -> int:
    from servediff.engines.factory import make_engine
    from servediff.runner import RunPlan, execute
    from servediff.suites import SuiteOptions, load_suite
    from servediff.types import SamplingParams

    if args.temperature == 0 and (args.samples > 1 or args.top_p < 1 or args.top_k):
        # Greedy draws would all be the same text: the control repeat measures that instead.
        raise UsageError("--samples, --top-p and --top-k need --temperature > 0")
    if args.score:
        from servediff.scoring import scoring_suite

        suite = scoring_suite(args.score, args.data, args.limit, args.subsample_seed)
        args.top_logprobs = args.top_logprobs or 20
    else:
        suite = load_suite(
            args.suite,
            SuiteOptions(
                limit=args.limit,
                seed=args.subsample_seed,
                path=args.data,
                allow_code_execution=args.allow_code_execution,
            ),
        )
    thinking = {"off": False, "on": True, "unset": None}[args.thinking]
    max_tokens = args.max_tokens or suite.max_tokens or 300
    sampling = SamplingParams(
        temperature=args.temperature,
        seed=args.seed,
        top_p=args.top_p,
        top_k=args.top_k,
        samples=args.samples,
        max_tokens=max_tokens,
        # a suite scored from logprobs (mmlu-letter) records at least the top-k it reads
        top_logprobs=max(args.top_logprobs, suite.top_logprobs),
        enable_thinking=thinking,
    )
    spec, concurrency = _engine_spec(args)
    extra = None
    if args.score:
        spec = dataclasses.replace(spec, scoring=True)
        if spec.http is not None:
            from servediff.engines.http_scorer import ScoreOptions

            spec = dataclasses.replace(spec, score=ScoreOptions(args.score_api, args.bos_text))
        extra = {"mode": "score", "top_k": args.top_logprobs, "corpus": suite.source}
    engine = make_engine(spec)
    plan = RunPlan(
        suite, spec.label, args.out, sampling, repeat=args.repeat, concurrency=concurrency, extra=extra
    )
    try:
        before = _counters(engine)
        result = execute(plan, engine, progress=not args.no_progress)
        _verify(engine, args.claim or (), before, result)
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
