"""servediff's HTTP engine as a throughput client (run by bench/throughput.py).

    .venv/bin/python bench/client_servediff.py --url http://127.0.0.1:8111 --concurrency 64

Calls the engine's Python API exactly as ``servediff run`` does, minus the record file
(measured separately, against a real engine, by bench/overhead.py).
"""

from __future__ import annotations

import json
import time

from workload import MAX_TOKENS, client_args, messages

from servediff.engines.openai_http import HTTPEngine, HTTPOptions
from servediff.types import Completion, Sample, SamplingParams


def main() -> None:
    args = client_args(__doc__.splitlines()[0])
    # retokenize=False: the other clients send one request per item, so this one does too.
    engine = HTTPEngine(
        HTTPOptions(base_url=args.url, concurrency=args.concurrency, retokenize=False), label="bench"
    )
    samples = [Sample(id=f"q{i}", messages=tuple(messages(i))) for i in range(args.requests)]
    params = SamplingParams(max_tokens=MAX_TOKENS)
    done: list[Completion] = []
    t0, c0 = time.perf_counter(), time.process_time()
    engine.generate(samples, params, done.append)
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    ok = sum(1 for c in done if c.error is None and c.text)
    # cpu_s: this process's own CPU time for the requests, which another process's load on a
    # shared machine stretches far less than the wall time.
    print(json.dumps({"requests": args.requests, "ok": ok, "seconds": seconds, "cpu_s": cpu_s}))


if __name__ == "__main__":
    main()
