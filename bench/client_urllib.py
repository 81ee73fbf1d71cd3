"""The common hand-written baseline: a thread pool of urllib requests (run by bench/throughput.py).

    python bench/client_urllib.py --url http://127.0.0.1:8111 --concurrency 8

One new connection per request, as ``urllib.request.urlopen`` does.
"""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from workload import MAX_TOKENS, client_args, messages


def main() -> None:
    args = client_args(__doc__.splitlines()[0])
    url = f"{args.url}/v1/chat/completions"

    def one(i: int) -> str:
        body = {"model": "stub", "messages": messages(i), "temperature": 0, "seed": 42}
        body["max_tokens"] = MAX_TOKENS
        req = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            out = json.loads(resp.read())
        return str(out["choices"][0]["message"]["content"])

    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        texts = list(pool.map(one, range(args.requests)))
    seconds = time.perf_counter() - t0
    print(json.dumps({"requests": args.requests, "ok": sum(1 for t in texts if t), "seconds": seconds}))


if __name__ == "__main__":
    main()
