"""The cost of measuring: `servediff run --stream` against the same run without it, next to the
engine's own throughput.

    python bench/stream_cost.py --items 5 --max-tokens 64 --repeats 2

Starts ``python -m llama_cpp.server`` (SmolLM2-135M-Instruct, 1 thread), then runs the same
chat prompts through ``servediff run --engine http`` with and without ``--stream``, alternating
(A B B A …). For each: the wall time of the whole process, its own CPU time (``wait4``) per
output token, and the output tokens/s servediff's records give; next to them the server's own
rate over the same requests from llama.cpp's perf lines in its log ("total time = … ms"). Prints
a Markdown table (stdout).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PYTHON, Server, free_port, log, median, run_timed

from servediff.engines.knobs import default_model_path
from servediff.records import read_run

TOTAL = re.compile(r"llama_perf_context_print:\s+total time =\s+([\d.]+) ms")


def server_argv(port: int) -> list[str]:
    return [
        PYTHON, "-m", "llama_cpp.server", "--model", str(default_model_path()), "--host", "127.0.0.1",
        "--port", str(port), "--n_ctx", "2048", "--seed", "42", "--n_threads", "1",
        "--n_threads_batch", "1",
    ]  # fmt: skip


def one(url: str, out: Path, stream: bool, items: int, tokens: int, server_log: Path) -> dict[str, float]:
    before = server_log.stat().st_size
    argv = [PYTHON, "-m", "servediff", "run", "--engine", "http", "--base-url", url, "--suite", "prompts"]
    argv += ["--limit", str(items), "--max-tokens", str(tokens), "--label", out.stem, "--out", str(out)]
    argv += ["--no-progress", *(["--stream"] if stream else [])]
    timed = run_timed(argv)
    with server_log.open("rb") as f:
        f.seek(before)
        engine_ms = sum(float(m) for m in TOTAL.findall(f.read().decode("utf-8", "replace")))
    run = read_run(out)
    n = sum(it.n_tokens or 0 for it in run.items.values())
    latency = sum(it.latency_s for it in run.items.values())
    return {
        "wall": timed.seconds,
        "cpu_per_token_ms": timed.cpu_s / n * 1000,
        "ours": n / latency,
        "engine": n / (engine_ms / 1000),
        "tokens": n,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with TemporaryDirectory() as tmp:
        work, port = Path(tmp), free_port()
        with Server(server_argv(port), "/v1/models", work / "server.log", port) as server:
            one(server.base_url, work / "warmup.jsonl", False, 1, 8, work / "server.log")
            for rep in range(a.repeats):
                for stream in (False, True) if rep % 2 == 0 else (True, False):
                    name = f"{'stream' if stream else 'plain'}-{rep}.jsonl"
                    r = one(server.base_url, work / name, stream, a.items, a.max_tokens, work / "server.log")
                    results[stream].append(r)
                    log(f"stream={stream} #{rep + 1}: {r}")
    print("| streaming | wall s | client CPU per output token | servediff tokens/s | engine's own tokens/s |")
    print("|---|---|---|---|---|")
    for stream, rows in results.items():
        m = {k: median([r[k] for r in rows]) for k in rows[0]}
        print(
            f"| {'on' if stream else 'off'} | {m['wall']:.2f} | {m['cpu_per_token_ms']:.2f} ms "
            f"| {m['ours']:.1f} | {m['engine']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
