"""``servediff verify``: its grammar beside its handler (the command's four names).

    servediff verify --reference ref1.jsonl ref2.jsonl --base-url http://127.0.0.1:8080
    servediff verify --reference ref1.jsonl ref2.jsonl --plan
    servediff verify --reference ref1.jsonl ref2.jsonl --answers endpoint.jsonl

Exit 0: consistent with the reference (the plan's sample size for --delta at --power reached
without rejection); 1: differs (the test's wealth reached 1/α); 2: inconclusive at the budget, or a
usage, input or engine error (an engine failure is never a verdict).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from servediff.argtypes import fraction, in_flight, output_file, positive_float, positive_int, seed
from servediff.commands.grammar import Parser

if TYPE_CHECKING:
    from servediff.compare.verify_result import Plan, VerifyResult
    from servediff.verify.procedure import Reference, Settings

NAME = "verify"
HELP = "test whether an endpoint serves the reference configuration, against its own noise (exit 0/1/2)"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Sends the reference's prompts to the endpoint, greedy, a round at a time, and "
        "tests its answers (logprobs on the shared prefix, text identity, prompt token counts) "
        "against the reference's own run-to-run differences: an anytime-valid sequential test that "
        "stops as soon as it can say. Exit 0 consistent, 1 differs, 2 inconclusive at the budget "
        "(or an error). See docs/guide/verify.md.",
    )
    p.add_argument(
        "--reference", nargs="+", type=Path, required=True,
        help="at least 2 greedy run records of the reference configuration, same prompts "
        "(repeats, one under load): their differences are the null",
    )  # fmt: skip
    p.add_argument("--base-url", help="the endpoint to verify (OpenAI-compatible)")
    p.add_argument(
        "--answers", type=Path,
        help="instead of --base-url: the endpoint's answers recorded before (a servediff run record "
        "of the reference's prompts, greedy, with logprobs, e.g. made on another machine), tested "
        "in the same order and budget; nothing is sent, and no teacher-forced scores are tested",
    )  # fmt: skip
    p.add_argument("--model", help="the served model id (default: the first the server lists)")
    p.add_argument("--alpha", type=fraction, default=0.05, help="false-alarm level (default 0.05)")
    p.add_argument(
        "--delta", type=positive_float, default=0.05,
        help="smallest shift to detect, nats per token (≈ per-token KL; default 0.05)",
    )  # fmt: skip
    p.add_argument("--power", type=fraction, default=0.95, help="for --delta (default 0.95)")
    p.add_argument(
        "--budget-requests", type=positive_int, default=500, help="most requests sent (default 500)"
    )
    p.add_argument(
        "--budget-tokens", type=positive_int, default=200_000,
        help="most tokens the requests may generate, each counted as max_tokens before it is sent "
        "(default 200000)",
    )  # fmt: skip
    p.add_argument(
        "--score-api", choices=("llama-cpp-python", "vllm", "sglang"),
        help="how the endpoint scores the reference's completions teacher-forced, where --reference "
        "holds scoring records (default: theirs, else vllm)",
    )  # fmt: skip
    p.add_argument("--concurrency", type=in_flight, default=1, help="requests per round (default 1)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the item order and the plan (default 0)")
    p.add_argument("--simulations", type=positive_int, default=200, help="simulated audits per plan row")
    p.add_argument(
        "--api-key-env", default="OPENAI_API_KEY",
        help="environment variable holding the endpoint's API key (default OPENAI_API_KEY; never written)",
    )  # fmt: skip
    p.add_argument("--timeout", type=positive_int, default=600, help="seconds per request (default 600)")
    p.add_argument("--plan", action="store_true", help="only plan from the reference: send nothing")
    p.add_argument("--out", type=output_file, help="write the result here (JSON)")
    p.add_argument("--md", type=output_file, help="write the Markdown page here")
    p.add_argument("--html", type=output_file, help="write the HTML page here (one self-contained file)")


def main(args: argparse.Namespace) -> int:
    from servediff.commands.grammar import UsageError
    from servediff.compare.verify_result import write
    from servediff.report.render import verify_html, verify_markdown
    from servediff.verify import procedure, verdict

    if args.base_url and args.answers:
        raise UsageError("verify: give --base-url (send now) or --answers (recorded answers), not both")
    if not args.plan and not args.base_url and not args.answers:
        raise UsageError(
            "verify: give --base-url (the endpoint), --answers (its recorded answers), or --plan to plan only"
        )
    settings = procedure.Settings(
        alpha=args.alpha,
        delta=args.delta,
        power=args.power,
        budget_requests=args.budget_requests,
        budget_tokens=args.budget_tokens,
        concurrency=args.concurrency,
        seed=args.seed,
        simulations=args.simulations,
        api_key_env=args.api_key_env,
    )
    ref = procedure.load(args.reference)
    the_plan = procedure.plan(ref, settings)
    if args.plan:
        result = verdict.plan_only(ref, settings, the_plan)
    elif args.answers:
        result = _replay(args.answers, ref, settings, the_plan)
    else:
        result = _test(args, ref, settings, the_plan)
    md = verify_markdown(result)
    if args.out:
        write(result, args.out)
    if args.md:
        args.md.write_text(md, encoding="utf-8")
    if args.html:
        args.html.write_text(verify_html(result), encoding="utf-8")
    print(md)
    print(f"verify: {result.line} (exit {result.exit_code})", file=sys.stderr)
    return result.exit_code


def _test(args: argparse.Namespace, ref: Reference, settings: Settings, the_plan: Plan) -> VerifyResult:
    from servediff.engines.openai_http import HTTPEngine, HTTPOptions
    from servediff.redaction import redact_text
    from servediff.verify import procedure, verdict

    options = HTTPOptions(
        base_url=args.base_url,
        model=args.model,
        concurrency=settings.concurrency,
        timeout_s=args.timeout,
        api_key_env=settings.api_key_env,
        # No /tokenize after each answer: the comparison reads the tokens of the logprobs, and
        # every request sent counts against the budget.
        retokenize=False,
    )
    engine = HTTPEngine(options, label="endpoint")
    scorer = None
    if ref.scorings:
        from servediff.engines.http_scorer import HTTPScorer, ScoreOptions

        api = args.score_api or ref.score_api() or "vllm"
        scorer = HTTPScorer(options, ScoreOptions(api=api), label="endpoint")
    try:
        stop_at = verdict.planned(the_plan, settings.delta)
        answer = procedure.http_answers(engine, procedure.params_of(ref.first))
        progress = procedure.send_rounds(answer, scorer, ref, settings, stop_at)
    finally:
        engine.close()
        if scorer is not None:
            scorer.close()
    # A base URL may carry credentials (user:key@host): the result keeps it redacted.
    where = (redact_text(engine.base_url), engine.model)
    return verdict.conclude(ref, settings, the_plan, progress, where)


def _replay(path: Path, ref: Reference, settings: Settings, the_plan: Plan) -> VerifyResult:
    """The test on answers recorded before: the same rounds, order and budget, read instead of
    sent. No teacher-forced scores: scoring needs the endpoint itself."""
    from servediff.verify import procedure, verdict

    run = procedure.load_answers(path, ref)
    progress = procedure.send_rounds(
        procedure.recorded_answers(run), None, ref, settings, verdict.planned(the_plan, settings.delta)
    )
    if ref.scorings:
        progress.scoring_refused = verdict.RECORDED
    model = run.header.engine.get("model")
    return verdict.conclude(
        ref, settings, the_plan, progress, (None, str(model) if model else None), answers=path.name
    )
