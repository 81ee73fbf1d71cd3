"""The requests every client of the throughput benchmark sends: identical bodies, distinct prompts.

Imported by each client script (they run in different virtual environments, so this file
depends on nothing but the standard library).
"""

from __future__ import annotations

import argparse
import os

MAX_TOKENS = 16


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Question {i}: what is {i} plus {i}? Answer with a number."}]


def client_args(description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--url", required=True, help="server root, e.g. http://127.0.0.1:8111")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--cpu", type=int, help="pin this client to one CPU core")
    args = ap.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    return args
