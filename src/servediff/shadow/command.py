"""``servediff shadow``: its grammar beside its handler (parsing loads no aiohttp).

servediff shadow --primary http://a:8000 --candidate http://b:8000 --listen 127.0.0.1:9000 --out shadow/
servediff shadow --experiment pair.toml --listen 127.0.0.1:9000 --out shadow/
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from servediff.argtypes import (
    count,
    host_port,
    in_flight,
    output_folder,
    positive_float,
    positive_int,
    proportion,
    seed,
)
from servediff.commands.grammar import Parser, UsageError

NAME = "shadow"
HELP = "proxy live traffic to the primary and replay it on a candidate, recording both"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="An OpenAI-compatible proxy: every client gets the primary's answer unchanged; "
        "each completion request is then replayed on the candidate from a bounded queue (full: the "
        "copy is dropped and counted) and both answers are recorded as a run pair for `servediff "
        "compare`. Give the two servers' URLs, or an experiment file that launches both. Runs until "
        "interrupted (Ctrl-C or SIGTERM), then writes OUT/shadow.json within about 10 s (copies the "
        "candidate has not answered by then are cancelled and counted unfinished); every request "
        "ends in one count: requests = mirrored + dropped + unparsed + sampled_out + failed.",
    )
    p.add_argument("--primary", help="the serving configuration in production (URL)")
    p.add_argument("--candidate", help="the configuration to evaluate (URL)")
    p.add_argument(
        "--experiment",
        type=Path,
        metavar="FILE",
        help="instead of the URLs: launch both servers from this experiment file (its control is the "
        "primary, its other configuration the candidate) and stop them when the session ends",
    )
    p.add_argument(
        "--candidate-config",
        metavar="LABEL",
        help="with --experiment: the configuration to launch as the candidate, where there are several",
    )
    p.add_argument("--listen", required=True, type=host_port, help="HOST:PORT the clients call")
    p.add_argument("--out", required=True, type=output_folder, help="folder for the records")
    p.add_argument(
        "--candidate-api-key-env",
        help="environment variable holding the candidate's key (the client's key goes to the primary only)",
    )
    p.add_argument(
        "--candidate-top-logprobs",
        type=count,
        default=0,
        help="ask the candidate (never the primary) for this many top logprobs per token",
    )
    p.add_argument(
        "--sample",
        type=proportion,
        default=1.0,
        help="share of requests mirrored, drawn per request (default 1; 0 relays only)",
    )
    p.add_argument("--seed", type=seed, default=0, help="seed of the --sample draw")
    p.add_argument(
        "--redact-field",
        action="append",
        default=[],
        metavar="RULE",
        help="record this request field as <redacted> (dotted, * for every element: "
        "messages.*.content); repeatable",
    )
    p.add_argument("--rotate-mb", type=positive_float, help="start a new record pair past this size")
    p.add_argument("--queue", type=positive_int, default=1024, help="shadow copies waiting at most")
    p.add_argument("--workers", type=in_flight, default=4, help="candidate requests in flight")
    p.add_argument("--timeout", type=positive_float, default=600.0, help="seconds per request")


def main(args: argparse.Namespace) -> int:
    if args.experiment is not None:
        if args.primary or args.candidate:
            raise UsageError("give --experiment, or --primary and --candidate URLs, not both")
        return _shadow_launched(args)
    if not (args.primary and args.candidate):
        raise UsageError("give --primary and --candidate (URLs), or --experiment FILE to launch both")
    if args.candidate_config is not None:
        raise UsageError("--candidate-config picks a configuration of --experiment")
    return _shadow(args, args.primary, args.candidate, {})


def _shadow(args: argparse.Namespace, primary: str, candidate_url: str, launched: dict[str, Any]) -> int:
    import asyncio
    import os

    from servediff.shadow.mirror import CandidateConfig, MirrorConfig
    from servediff.shadow.session import ShadowConfig, serve

    key = None
    if args.candidate_api_key_env:
        key = os.environ.get(args.candidate_api_key_env)
        if not key:
            raise UsageError(f"--candidate-api-key-env: ${args.candidate_api_key_env} is not set")
    candidate = CandidateConfig(
        candidate_url, key, args.timeout, tuple(args.redact_field), args.candidate_top_logprobs
    )
    mirror = MirrorConfig(candidate, args.queue, args.workers, args.sample, args.seed)
    host, port = args.listen
    config = ShadowConfig(primary, mirror, host, port, args.out, args.rotate_mb, launched)
    counts = asyncio.run(serve(config))
    print(json.dumps(counts.as_dict(), indent=2))
    return 0


def _shadow_launched(args: argparse.Namespace) -> int:
    """``servediff shadow --experiment FILE``: launch both servers, shadow, stop both."""
    from servediff.experiment.spec import load_experiment
    from servediff.shadow.servers import launched_pair
    from servediff.shadow.session import check_out

    exp = load_experiment(args.experiment, output=args.out)
    check_out(args.out)  # before anything starts: a session is never appended to
    with launched_pair(exp, args.out, args.candidate_config) as (primary, candidate):
        launched = {"primary": primary.identity(), "candidate": candidate.identity()}
        return _shadow(args, primary.server.base_url, candidate.server.base_url, launched)
