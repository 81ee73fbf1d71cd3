"""Decode speed of the registry's Qwen2.5-Coder models: servediff's embedded engine against
llama_cpp.Llama directly (bare llama.cpp through its Python binding), same knobs and prompts.

    .venv/bin/python bench/qwen_decode.py --models qwen2.5-coder-0.5b qwen2.5-coder-1.5b

Fetch the models first (``servediff models fetch NAME``). Each side runs in its own process
(embedded_worker.py), alternating sides between repeats; model loading is outside the timed
region. Prints a Markdown table (median tokens/s over the repeats) for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics

from common import BENCH, PYTHON, log, run_timed


def _pass(side: str, model: str, prompts: int, max_tokens: int) -> tuple[float, float, list[str]]:
    argv = [PYTHON, str(BENCH / "embedded_worker.py"), "--side", side, "--config", "stock", "--threads", "1"]
    argv += ["--model", model, "--prompts", str(prompts), "--max-tokens", str(max_tokens)]
    out = json.loads(run_timed(argv).stdout.strip().splitlines()[-1])
    return out["tokens"] / out["seconds"], out["tokens"] / out["cpu_seconds"], out["texts"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    print(
        "| model | bare llama_cpp.Llama (tok/s) | through servediff (tok/s) | servediff ÷ bare | "
        "per CPU second, servediff ÷ bare | same texts |"
    )
    print("|---|---|---|---|---|---|")
    for model in args.models:
        wall: dict[str, list[float]] = {"direct": [], "servediff": []}
        cpu: dict[str, list[float]] = {"direct": [], "servediff": []}
        texts: dict[str, list[str]] = {}
        for rep in range(args.repeats):
            for side in ("servediff", "direct") if rep % 2 == 0 else ("direct", "servediff"):
                rate, per_cpu, texts[side] = _pass(side, model, args.prompts, args.max_tokens)
                wall[side].append(rate)
                cpu[side].append(per_cpu)
                log(f"{model} #{rep + 1} {side}: {rate:.1f} tokens/s, {per_cpu:.1f} per CPU s")
        w = {k: statistics.median(v) for k, v in wall.items()}
        c = {k: statistics.median(v) for k, v in cpu.items()}
        same = sum(a == b for a, b in zip(texts["servediff"], texts["direct"]))
        print(
            f"| {model} | {w['direct']:.1f} | {w['servediff']:.1f} | {w['servediff'] / w['direct'] - 1:+.1%} "
            f"| {c['servediff'] / c['direct'] - 1:+.1%} | {same}/{len(texts['direct'])} |"
        )
    print(
        f"\n{args.prompts} prompts × ≤ {args.max_tokens} tokens, `stock` knobs, 1 thread, "
        f"median of {args.repeats} runs per side"
    )


if __name__ == "__main__":
    main()
