"""lm-evaluation-harness's ``local-chat-completions`` model as a throughput client.

    bench/.venv/bin/python bench/client_lmeval.py --url http://127.0.0.1:8111 --concurrency 64

Runs in the benchmark's own virtual environment (lm-eval is not a servediff dependency) and
goes through lm-eval's Python API: ``LocalChatCompletion.generate_until``, the call its
evaluator makes for generation tasks, with ``num_concurrent`` requests in flight.
"""

from __future__ import annotations

import json
import logging
import time

from workload import MAX_TOKENS, client_args, messages


def main() -> None:
    args = client_args(__doc__.splitlines()[0])
    logging.disable(logging.WARNING)  # lm-eval logs a warning per call about tokenization
    from lm_eval.api.instance import Instance
    from lm_eval.models.api_models import JsonChatStr
    from lm_eval.models.openai_completions import LocalChatCompletion

    lm = LocalChatCompletion(
        base_url=f"{args.url}/v1/chat/completions",
        model="stub",
        num_concurrent=args.concurrency,
        max_retries=3,
        tokenized_requests=False,
        tokenizer_backend=None,
    )
    gen_kwargs = {"until": [], "max_gen_toks": MAX_TOKENS, "temperature": 0}
    requests = [
        Instance("generate_until", {}, (JsonChatStr(json.dumps(messages(i))), dict(gen_kwargs)), i)
        for i in range(args.requests)
    ]
    t0 = time.perf_counter()
    texts = lm.generate_until(requests, disable_tqdm=True)
    seconds = time.perf_counter() - t0
    print(json.dumps({"requests": args.requests, "ok": sum(1 for t in texts if t), "seconds": seconds}))


if __name__ == "__main__":
    main()
