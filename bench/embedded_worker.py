"""One timed generation pass for part 4: servediff's embedded engine, or llama_cpp.Llama directly.

    .venv/bin/python bench/embedded_worker.py --side direct --config tuned --prompts 8 --max-tokens 96

Both sides get the same knobs (the named configuration), the same prompts and the same greedy
sampler settings; model loading is outside the timed region. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from servediff.engines.knobs import CONFIGS, LlamaKnobs, default_model_path
from servediff.engines.llamacpp import LlamaCppEngine
from servediff.models import resolve
from servediff.suites import load_suite
from servediff.types import Completion, Sample, SamplingParams


def direct_llama(k: LlamaKnobs, model: Path | None = None) -> Any:
    """llama_cpp.Llama built from the knobs exactly as a user would write it by hand."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    kv = None if k.kv_cache_type == "f16" else llama_cpp.GGML_TYPE_Q8_0
    return llama_cpp.Llama(
        model_path=str(model or default_model_path()),
        n_ctx=k.n_ctx,
        n_batch=k.n_batch,
        n_ubatch=k.n_ubatch,
        n_threads=k.resolved_threads,
        n_threads_batch=k.resolved_threads,
        flash_attn=k.flash_attn,
        type_k=kv,
        type_v=kv if k.flash_attn else None,
        draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k.prompt_lookup) if k.prompt_lookup else None,
        seed=42,
        verbose=False,
    )


def run_direct(
    k: LlamaKnobs, samples: list[Sample], max_tokens: int, model: Path | None = None
) -> tuple[int, float, float, list[str]]:
    llm = direct_llama(k, model)
    tokens, texts = 0, []
    t0, c0 = time.perf_counter(), time.process_time()
    for s in samples:
        if not k.prefix_cache:
            llm.reset()
        out = llm.create_chat_completion(
            messages=list(s.messages or ()),
            temperature=0.0,
            top_k=0,
            top_p=1.0,
            min_p=0.0,
            repeat_penalty=1.0,
            max_tokens=max_tokens,
            seed=42,
        )
        tokens += out["usage"]["completion_tokens"]
        texts.append(out["choices"][0]["message"]["content"] or "")
    return tokens, time.perf_counter() - t0, time.process_time() - c0, texts


def run_servediff(
    k: LlamaKnobs, samples: list[Sample], max_tokens: int, model: Path | None = None
) -> tuple[int, float, float, list[str]]:
    engine = LlamaCppEngine(k, model_path=model, label="bench")
    done: list[Completion] = []
    t0, c0 = time.perf_counter(), time.process_time()
    engine.generate(samples, SamplingParams(max_tokens=max_tokens), done.append)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    engine.close()
    if any(c.error for c in done):
        raise RuntimeError(f"servediff engine errors: {[c.error for c in done if c.error]}")
    return sum(c.n_tokens or 0 for c in done), seconds, cpu, [c.text for c in done]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=["servediff", "direct"], required=True)
    ap.add_argument("--config", choices=sorted(CONFIGS), required=True)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=0, help="override the configuration's threads")
    ap.add_argument("--model", help="GGUF path or registry name (default: SmolLM2)")
    args = ap.parse_args()
    model = resolve(args.model) if args.model else None
    samples = list(load_suite("prompts").samples[: args.prompts])
    run = run_servediff if args.side == "servediff" else run_direct
    knobs = CONFIGS[args.config]
    if args.threads:
        knobs = dataclasses.replace(knobs, threads=args.threads)
    tokens, seconds, cpu, texts = run(knobs, samples, args.max_tokens, model)
    print(json.dumps({"tokens": tokens, "seconds": seconds, "cpu_seconds": cpu, "texts": texts}))


if __name__ == "__main__":
    main()
