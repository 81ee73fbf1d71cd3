"""The ``servediff shadow`` command's arguments (argparse only: parsing loads no aiohttp).

servediff shadow --help
"""

from __future__ import annotations

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


def add_shadow(sub: Any) -> None:
    p = sub.add_parser(
        "shadow",
        help="proxy live traffic to the primary and replay it on a candidate, recording both",
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
