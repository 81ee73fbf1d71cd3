"""Scoring throughput: servediff's embedded scoring run vs a bare llama-cpp-python loop.

    .venv/bin/python bench/scoring.py                 # 20 GSM8K solutions (seeded subset), top-20, 5 rounds
    .venv/bin/python bench/scoring.py --limit 10 --rounds 3

Both sides score the same token sequences (the GSM8K reference solutions in tests/data, after
the BOS token) with the same model and knobs (1 thread) and produce the same numbers: at every
position the top-k token ids with their logprobs and the logprob of the sequence's next token.

- *servediff*: ``runner.execute`` of a scoring plan on ``LlamaCppEngine(scoring=True)``: the
  whole path of ``servediff run --score``, record file written, model load not counted.
- *bare*: ``Llama.eval`` of the sequence, then numpy on ``Llama.scores``: log-softmax, top-k by
  ``argpartition``, the next token's logprob. Nothing else.

Rounds alternate A B B A in one process (each side its own ``Llama``), so a change in the
machine's load falls on both; the table gives the median of each side's scored tokens per
second, wall and CPU (``time.process_time``: this process only).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from servediff.engines.knobs import CONFIGS, default_model_path  # noqa: E402
from servediff.engines.llamacpp import LlamaCppEngine  # noqa: E402
from servediff.runner import RunPlan, execute  # noqa: E402
from servediff.scoring import scoring_suite  # noqa: E402
from servediff.types import SamplingParams  # noqa: E402

GSM8K = ROOT / "tests" / "data" / "gsm8k" / "test.jsonl"
TARGET = 0.05  # servediff within 5 % of the bare loop


def bare_scores(llm: Any, seqs: list[tuple[list[int], list[int]]], k: int) -> list[Any]:
    """The loop a user would write: one eval per sequence, numpy over the logits."""
    out = []
    for context, cont in seqs:
        llm.reset()
        llm.eval(context + cont)
        rows = np.asarray(llm.scores[len(context) - 1 : len(context) - 1 + len(cont)], dtype=np.float64)
        m = rows.max(axis=1, keepdims=True)
        logp = rows - m - np.log(np.exp(rows - m).sum(axis=1, keepdims=True))
        top = np.argpartition(-logp, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(logp, top, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        out.append((top, np.take_along_axis(logp, top, axis=1), logp[np.arange(len(cont)), cont]))
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    w0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - w0, time.process_time() - c0, result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--top-k", type=int, default=20)
    args = p.parse_args()
    import llama_cpp

    knobs = dataclasses.replace(CONFIGS["stock"], threads=1)
    suite = scoring_suite("gsm8k", GSM8K, limit=args.limit)
    engine = LlamaCppEngine(knobs, label="bench", scoring=True)
    seqs = [engine.score_tokens(s) for s in suite.samples]
    n_tokens = sum(len(c) for _, c in seqs)
    bare = llama_cpp.Llama(
        model_path=str(default_model_path()),
        n_ctx=knobs.n_ctx,
        n_batch=knobs.n_batch,
        n_ubatch=knobs.n_ubatch,
        n_threads=1,
        n_threads_batch=1,
        logits_all=True,
        verbose=False,
    )
    sampling = SamplingParams(max_tokens=1, top_logprobs=args.top_k)
    results: dict[str, list[tuple[float, float]]] = {"servediff": [], "bare": []}
    with tempfile.TemporaryDirectory() as tmp:

        def through_servediff(n: int) -> Any:
            plan = RunPlan(suite, "bench", Path(tmp) / f"r{n}.jsonl", sampling, extra={"mode": "score"})
            return execute(plan, engine, progress=False)

        for n in range(args.rounds):
            order = ("servediff", "bare") if n % 2 == 0 else ("bare", "servediff")
            for side in order:
                if side == "servediff":
                    wall, cpu, _ = timed(functools.partial(through_servediff, n))
                else:
                    wall, cpu, _ = timed(lambda: bare_scores(bare, seqs, args.top_k))
                results[side].append((n_tokens / wall, n_tokens / cpu))
                print(f"round {n} {side}: {n_tokens / wall:.0f} tok/s wall, {n_tokens / cpu:.0f} tok/s CPU",
                      file=sys.stderr)  # fmt: skip
    _table(results, n_tokens, len(seqs), args)


def _table(results: dict[str, list[tuple[float, float]]], n_tokens: int, n_seqs: int, args: Any) -> None:
    wall = {s: statistics.median(w for w, _ in r) for s, r in results.items()}
    cpu = {s: statistics.median(c for _, c in r) for s, r in results.items()}
    print(f"{n_seqs} GSM8K solutions, {n_tokens} scored positions, top-{args.top_k}, {args.rounds} rounds")
    print("| side | scored tokens/s (wall, median) | scored tokens/s (CPU, median) |")
    print("|---|---|---|")
    for side in ("servediff", "bare"):
        print(f"| {side} | {wall[side]:.0f} | {cpu[side]:.0f} |")
    ratio_w, ratio_c = wall["servediff"] / wall["bare"], cpu["servediff"] / cpu["bare"]
    met = "met" if min(ratio_w, ratio_c) >= 1 - TARGET else "not met"
    print(f"servediff ÷ bare: {ratio_w:.3f} (wall), {ratio_c:.3f} (CPU); target ≥ {1 - TARGET:.2f}: {met}")


if __name__ == "__main__":
    main()
