"""``servediff verify`` on the CPU against different weights under the same tokenizer: a
Qwen2.5-Coder-0.5B-Instruct reference against itself under load and against the 1.5B served under
the 0.5B's name, each over several item orders; then both endpoints' full runs against the
reference, for the per-token numbers the shape rule reads; and the same full-run numbers for
SmolLM2-135M-Instruct's precision changes (Q4_K_M, Q2_K against Q8_0, requantised as
bench/verify_cpu.py does), to set beside them.

    python bench/verify_weights_cpu.py --out DIR --orders 8     # about 10 minutes on two shared cores

Both models are the registry's Q4_K_M GGUFs (``servediff models fetch qwen2.5-coder-0.5b`` and
``qwen2.5-coder-1.5b``: one tokenizer and chat template); every endpoint is a llama-server with 4
slots and one thread, serving under the alias ``qwen``. The suite is the 20 built-in prompts and
the first ``--gsm8k`` GSM8K questions of ``tests/data`` as chat. The reference is two runs on the
0.5B server, at concurrency 1 and 4. Prints the verify table (as bench/verify_cpu.py) and the
full-run table, and writes every record and verify.json under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

import numpy as np
from verify_cpu import GSM8K, requantise, serve
from verify_table import table

from servediff.cli import main as servediff
from servediff.compare import verify
from servediff.records import read_run
from servediff.suites.prompts import PROMPTS


def suite(out: Path, gsm8k: int) -> Path:
    lines = [{"id": k, "messages": [{"role": "user", "content": v}]} for k, v in PROMPTS.items()]
    for n, line in enumerate(GSM8K.read_text().splitlines()[:gsm8k]):
        lines.append(
            {"id": f"gsm8k-{n}", "messages": [{"role": "user", "content": json.loads(line)["question"]}]}
        )
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return out


def fetch(name: str) -> Path:
    argv = ["servediff", "models", "fetch", name]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    return Path(done.stdout.strip().splitlines()[-1])


def record(
    url: str, prompts: Path, tokens: int, repeat: int, concurrency: int, path: Path, label: str = "qwen-0.5b"
) -> None:
    argv = ["run", "--engine", "http", "--base-url", url, "--model", "qwen", "--suite", str(prompts)]
    argv += ["--max-tokens", str(tokens), "--top-logprobs", "5", "--label", label]
    argv += ["--repeat", str(repeat), "--concurrency", str(concurrency), "--out", str(path), "--no-progress"]
    assert servediff(argv) == 0


def against(reference: Path, other: Path) -> str:
    """One row of the full-run table: every item of ``other`` paired with the reference's."""
    ref, oth = read_run(reference), read_run(other)
    pairs = [verify.pair(ref.items[k], oth.items[k]) for k in ref.items if k in oth.items]
    every = [abs(d) for p in pairs for d in p.diffs]
    per_request = [p.values[1] for p in pairs if p.diffs]
    first = sum(p.shared == 0 for p in pairs)
    # a divergence is a position where the two greedy top-1 tokens differ: the hazard per token
    diverged = sum(not p.identical for p in pairs)
    positions = sum(p.shared + (not p.identical) for p in pairs)
    return (
        f"| {len(pairs)} | {sum(p.identical for p in pairs)} | {first} | "
        f"{statistics.median(p.shared for p in pairs):g} | "
        f"{diverged}/{positions} = {diverged / positions:.3f} | "
        f"{np.mean(every):.4f} ({len(every)} tokens) | {np.median(per_request):.4f} | "
        f"{np.quantile(every, 0.9):.3f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--orders", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--gsm8k", type=int, default=20)
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    small, large = fetch("qwen2.5-coder-0.5b"), fetch("qwen2.5-coder-1.5b")
    prompts = suite(out / "suite.jsonl", args.gsm8k)
    endpoints = {"0.5B under load": (small, 4), "1.5B as the 0.5B": (large, 1)}
    procs = []
    try:
        urls = {}
        for k, (label, (model, _)) in enumerate(endpoints.items()):
            procs.append(serve(model, 8720 + k, out / f"server{k}.log", "--alias", "qwen"))
            urls[label] = f"http://127.0.0.1:{8720 + k}"
        refs = [out / "ref1.jsonl", out / "ref2.jsonl"]
        record(urls["0.5B under load"], prompts, args.tokens, 1, 1, refs[0])
        record(urls["0.5B under load"], prompts, args.tokens, 2, 4, refs[1])
        reference = [str(r) for r in refs]
        plan = ["verify", "--reference", *reference, "--plan", "--out", str(out / "plan.json")]
        assert servediff(plan) == 0
        rows = []
        for label, (_, concurrency) in endpoints.items():
            results = []
            for seed in range(args.orders):
                path = out / f"verify-{label.replace(' ', '-')}-{seed}.json"
                argv = ["verify", "--reference", *reference, "--base-url", urls[label], "--model", "qwen"]
                servediff([*argv, "--seed", str(seed), "--concurrency", str(concurrency), "--out", str(path)])
                results.append(json.loads(path.read_text()))
            rows.append((label, results))
        full = out / "full-1.5b.jsonl"
        record(urls["1.5B as the 0.5B"], prompts, args.tokens, 1, 4, full)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    table(rows, json.loads((out / "plan.json").read_text()))
    print()
    head = "| endpoint, every item | items | identical | first token differs | shared tokens (median)"
    head += " | divergences per compared position | mean \\|d\\| | per-request mean \\|d\\| (median)"
    print(head + " | 90th pct \\|d\\| |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("| 0.5B, second reference run (concurrency 4) " + against(refs[0], refs[1]))
    print("| 1.5B as the 0.5B " + against(refs[0], full))
    for line in precisions(out, prompts, args.tokens):
        print(line)


def precisions(out: Path, prompts: Path, tokens: int) -> list[str]:
    """The full-run rows of SmolLM2's Q4_K_M and Q2_K against two Q8_0 runs, one server at a time."""
    runs: dict[str, Path] = {}
    for k, name in enumerate(("Q8_0", "Q4_K_M", "Q2_K")):
        model = requantise(out / f"smol.{name}.gguf", name)
        proc = serve(model, 8730 + k, out / f"smol-server{k}.log", "--alias", "qwen")
        url = f"http://127.0.0.1:{8730 + k}"
        try:
            if name == "Q8_0":
                record(url, prompts, tokens, 1, 1, out / "smol-ref1.jsonl", "smol-q8_0")
            runs[name] = out / f"smol-{name}.jsonl"
            record(url, prompts, tokens, 2, 4, runs[name], "smol-q8_0")
        finally:
            proc.terminate()
            proc.wait()
    ref = out / "smol-ref1.jsonl"
    return [
        "| SmolLM2 Q8_0, second reference run (concurrency 4) " + against(ref, runs["Q8_0"]),
        "| SmolLM2 Q4_K_M against Q8_0 " + against(ref, runs["Q4_K_M"]),
        "| SmolLM2 Q2_K against Q8_0 " + against(ref, runs["Q2_K"]),
    ]


if __name__ == "__main__":
    main()
