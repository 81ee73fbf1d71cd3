"""How each engine spells its determinism promise, and how to turn it off for the control.

    servediff audit --profile vllm --print-experiment --model Qwen/Qwen3-8B > audit.toml
    servediff audit --experiment audit.toml --promise promise --control control

vLLM and SGLang do not run on this project's test machines, so each profile is taken from the
engine's own documentation and source (named below) and produces an experiment file: two launched
configurations, the promise on and the same server with it off (the negative control), for
``servediff audit --experiment``. The caveats are the engine's own; the audit reports what it
measured, and a pass holds for the hardware, version and load it ran on, nothing more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Promise:
    engine: str
    spelled: str  # how the promise is switched on, as the engine documents it
    argv: tuple[str, ...]  # the server, with the experiment file's placeholders
    on_args: tuple[str, ...]
    off_args: tuple[str, ...]
    on_env: tuple[tuple[str, str], ...]
    off_env: tuple[tuple[str, str], ...]
    caveats: tuple[str, ...]
    sources: tuple[str, ...]  # repository paths the profile was read from


PROMISES: dict[str, Promise] = {
    # vLLM: docs/features/batch_invariance.md ("Batch invariance is currently in beta", enabled by
    # the environment variable VLLM_BATCH_INVARIANT=1; NVIDIA compute capability 9.0 or higher).
    # Its own audit is tests/v1/determinism/test_batch_invariance.py: the needle test (one prompt
    # alone, then at a random position among 64–128 fillers) and per-step logprobs compared with
    # torch.equal, with test_logprobs_without_batch_invariance_should_fail as its negative control;
    # benchmarks/benchmark_batch_invariance.py measures the cost (VLLM_BATCH_INVARIANT=0 vs 1).
    "vllm": Promise(
        engine="vllm",
        spelled="environment variable VLLM_BATCH_INVARIANT=1",
        argv=("vllm", "serve", "{model}", "--host", "{host}", "--port", "{port}", "--seed", "0"),
        on_args=(),
        off_args=(),
        on_env=(("VLLM_BATCH_INVARIANT", "1"),),
        off_env=(("VLLM_BATCH_INVARIANT", "0"),),
        caveats=(
            "beta: output independent of batch size and request order on the same hardware and "
            "vLLM version only",
            "needs an NVIDIA GPU of compute capability 9.0 or higher (H100, H200, B100, B200)",
            "scheduling still decides which requests share a step: audit under the load you serve",
        ),
        sources=(
            "vllm-project/vllm: docs/features/batch_invariance.md",
            "vllm-project/vllm: tests/v1/determinism/test_batch_invariance.py",
            "vllm-project/vllm: benchmarks/benchmark_batch_invariance.py",
        ),
    ),
    # SGLang: docs/advanced_features/deterministic_inference.md (flag
    # --enable-deterministic-inference; attention backends FlashInfer, FA3 and Triton only, radix
    # cache not with FlashInfer). Its own audit is python/sglang/test/test_deterministic.py:
    # --test-mode single / mixed / prefix (prefix lengths 1, 511, 2048, 4097 characters of a
    # long prompt), --n-trials 50, success is "Unique samples: 1".
    "sglang": Promise(
        engine="sglang",
        spelled="server flag --enable-deterministic-inference",
        argv=(
            "{python}",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "{model}",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--attention-backend",
            "fa3",
        ),
        on_args=("--enable-deterministic-inference",),
        off_args=(),
        on_env=(),
        off_env=(),
        caveats=(
            "only the FlashInfer, FA3 and Triton attention backends support it; FlashInfer "
            "without the radix cache",
            # sgl-project/sglang issues 10785 (Qwen3-30B-A3B: TP 2 held, TP >= 4 failed; fixed
            # by PR 10930 with NCCL tree all-reduce) and 11513 (B200 at TP 4)
            "failures were reported for MoE models at tensor parallelism 4 and more and on B200 at "
            "TP 4: audit at the TP and hardware you serve",
            "same hardware and version only",
        ),
        sources=(
            "sgl-project/sglang: docs/advanced_features/deterministic_inference.md",
            "sgl-project/sglang: python/sglang/test/test_deterministic.py",
        ),
    ),
    # llama.cpp's server: tools/server/README.md, "-np, --parallel N: number of parallel
    # sequences to decode". With one slot no two requests ever share a decode batch, so the
    # promise users assume of it is "-np 1"; more slots batch concurrent requests together.
    "llama-server": Promise(
        engine="llama-server",
        spelled="one slot: -np 1 (requests queue instead of sharing a batch)",
        argv=(
            "{llama_server}",
            "-m",
            "{model_path}",
            "-a",
            "{model}",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--seed",
            "42",
        ),
        on_args=("-np", "1"),
        off_args=("-np", "8"),
        on_env=(),
        off_env=(),
        caveats=(
            "one slot gives up all batching: the throughput cost is the point of measuring it",
            "a slot's cached prompt prefix is reused unless --no-cache-prompt: the alone repeats test it",
        ),
        sources=("ggml-org/llama.cpp: tools/server/README.md",),
    ),
}


def _toml_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(a) for a in items) + "]"


def _toml_env(env: tuple[tuple[str, str], ...]) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env) + " }"


def experiment_toml(engine: str, model: str) -> str:
    """An experiment file with the promise on (``promise``) and off (``control``)."""
    if engine not in PROMISES:
        raise ValueError(f"no promise profile for {engine!r}; known: {', '.join(PROMISES)}")
    p = PROMISES[engine]
    lines = [f"# servediff audit of {engine}'s determinism promise: {p.spelled}.", "#"]
    lines += [f"# Caveat: {c}." for c in p.caveats]
    lines += [f"# From {s}" for s in p.sources]
    lines += ["#", "#   servediff audit --experiment THIS.toml --promise promise --control control", ""]
    lines += [
        f"title = {json.dumps(f'{engine}: determinism promise on vs off')}",
        f"model = {json.dumps(model)}",
    ]
    for label, args, env in (("promise", p.on_args, p.on_env), ("control", p.off_args, p.off_env)):
        lines += ["", "[[configurations]]", f'label = "{label}"', f"launch = {_toml_list(p.argv + args)}"]
        if env:
            lines.append(f"env = {_toml_env(env)}")
        lines.append("start_timeout = 900")
    return "\n".join(lines) + "\n"
