"""Part 2: what ``servediff run`` adds to a real engine's time.

    .venv/bin/python bench/main.py --parts overhead

Against ``python -m llama_cpp.server`` with SmolLM2-135M-Instruct (the same server the tests
use), the wall time of the whole ``servediff run`` process (start-up, discovery, requests at
concurrency 1, retokenization, record file) versus a bare httpx loop process that sends the
identical request bodies and does nothing else. The two alternate (A B B A …) so that drift in
the machine's load falls on both; the medians are compared. The prompts suite runs with
``--max-tokens 64`` on both sides to bound the benchmark's time: shorter generations make any
per-request cost a larger share, so this errs against servediff. Because wall time on a shared
machine stretches with others' load, the table also gives the CPU time each client process
used: servediff's extra CPU over the bare loop, as a share of the run, bounds its overhead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from common import BENCH, BENCH_PYTHON, PYTHON, Row, Server, free_port, log, median, run_timed

from servediff.engines.knobs import default_model_path
from servediff.engines.openai_http import HTTPEngine, HTTPOptions
from servediff.records import read_run
from servediff.suites import SUITES, SuiteOptions, load_suite
from servediff.types import SamplingParams

ITEMS = 20
TARGET = 0.03


@dataclass(frozen=True, slots=True)
class Config:
    repeats: int = 3
    threads: int = 1  # llama.cpp threads (see bench/README.md: why 1 on a shared 2-core machine)
    max_tokens: dict[str, int] = field(default_factory=lambda: {"prompts": 64})


def _llama_argv(port: int, threads: int) -> list[str]:
    return [
        PYTHON, "-m", "llama_cpp.server", "--model", str(default_model_path()), "--host", "127.0.0.1",
        "--port", str(port), "--n_ctx", "2048", "--seed", "42", "--n_threads", str(threads),
        "--n_threads_batch", str(threads),
    ]  # fmt: skip


def _cli_args(suite: str, cfg: Config) -> list[str]:
    args = ["--suite", suite, "--limit", str(ITEMS)]
    if suite in cfg.max_tokens:
        args += ["--max-tokens", str(cfg.max_tokens[suite])]
    return args


def write_requests(base_url: str, suite_name: str, path: Path, cfg: Config) -> None:
    """The bodies ``servediff run`` will send, built by the engine itself (so they are identical)."""
    suite = load_suite(suite_name, SuiteOptions(limit=ITEMS))
    max_tokens = cfg.max_tokens.get(suite_name) or suite.max_tokens or 300
    params = SamplingParams(seed=42, max_tokens=max_tokens)
    engine = HTTPEngine(HTTPOptions(base_url=base_url))
    with path.open("w", encoding="utf-8") as f:
        for s in suite.samples:
            url, body = engine.payload(s, params)
            f.write(json.dumps({"id": s.id, "url": url, "body": body}) + "\n")


def _one_suite(
    url: str, suite: str, cfg: Config, work: Path, part: str = "2. overhead on llama.cpp server"
) -> list[Row]:
    reqs = work / f"{suite}-requests.jsonl"
    write_requests(url, suite, reqs, cfg)
    times: dict[str, list[float]] = {"servediff": [], "bare": []}
    cpu: dict[str, list[float]] = {"servediff": [], "bare": []}
    texts = work / f"{suite}-bare.json"
    for rep in range(cfg.repeats):
        order = ("servediff", "bare") if rep % 2 == 0 else ("bare", "servediff")
        for who in order:
            if who == "servediff":
                out = work / f"{suite}-run-{rep}.jsonl"
                argv = [PYTHON, "-m", "servediff", "run", "--engine", "http", "--base-url", url]
                argv += [*_cli_args(suite, cfg), "--label", "bench", "--out", str(out), "--no-progress"]
            else:
                argv = [
                    BENCH_PYTHON,
                    str(BENCH / "bare_httpx.py"),
                    "--requests",
                    str(reqs),
                    "--out",
                    str(texts),
                ]
            timed = run_timed(argv)
            times[who].append(timed.seconds)
            cpu[who].append(timed.cpu_s)
            log(f"overhead {suite} #{rep + 1} {who}: {timed.seconds:.2f} s wall, {timed.cpu_s:.2f} s CPU")
    record = read_run(work / f"{suite}-run-0.jsonl")
    bare = json.loads(texts.read_text(encoding="utf-8"))
    same = sum(1 for i, t in bare.items() if i in record.items and record.items[i].text == t)
    sd, b = median(times["servediff"]), median(times["bare"])
    extra_cpu = (median(cpu["servediff"]) - median(cpu["bare"])) / b
    ratio, n = sd / b - 1, len(bare)
    tokens = cfg.max_tokens.get(suite)
    what = f"{suite}, {n} items" + (f", max_tokens {tokens}" if tokens else "")
    return [
        Row(part, f"`servediff run` ({what}), wall s", f"{sd:.2f}"),
        Row(part, f"bare httpx loop, same {n} requests, wall s", f"{b:.2f} (same texts: {same}/{n})"),
        Row(part, f"servediff overhead on wall time, {suite}", f"{ratio:+.1%}", "≤ 3 %", ratio <= TARGET),
        Row(
            part,
            f"servediff's extra client CPU ÷ bare wall time, {suite} (upper bound, load-independent)",
            f"{extra_cpu:+.1%}",
            "≤ 3 %",
            extra_cpu <= TARGET,
        ),
    ]


def measure(cfg: Config, work: Path) -> list[Row]:
    port = free_port()
    rows: list[Row] = []
    with Server(_llama_argv(port, cfg.threads), "/v1/models", work / "llama-server.log", port) as server:
        # Warm up: page the model in and settle the server before anything is timed.
        run_timed([BENCH_PYTHON, "-c", _WARMUP.format(url=server.base_url)])
        for suite in ("prompts", "mmlu"):
            if suite not in SUITES:
                rows.append(
                    Row("2. overhead on llama.cpp server", f"{suite} suite", "not available in this build")
                )
                continue
            rows += _one_suite(server.base_url, suite, cfg, work)
    return rows


def measure_llama_server(cfg: Config, work: Path) -> list[Row]:
    """The same comparison against llama.cpp's C++ server (one slot, ``cfg.threads`` threads)."""
    from servediff.engines.llama_server import ToolMissing, find_tool

    part = "2b. overhead on llama-server (C++)"
    try:
        binary = find_tool()
    except ToolMissing as exc:
        return [Row(part, "llama-server", f"not measured: {exc}")]
    port = free_port()
    argv = [
        str(binary), "-m", str(default_model_path()), "--host", "127.0.0.1", "--port", str(port),
        "-c", "2048", "--seed", "42", "-t", str(cfg.threads), "-tb", str(cfg.threads), "-np", "1",
    ]  # fmt: skip
    with Server(argv, "/health", work / "llama-cpp-server.log", port) as server:
        run_timed([BENCH_PYTHON, "-c", _WARMUP.format(url=server.base_url)])
        return _one_suite(server.base_url, "prompts", cfg, work, part)


_WARMUP = (
    "import httpx; httpx.post('{url}/v1/chat/completions', timeout=120, json={{'messages': "
    "[{{'role': 'user', 'content': 'Hello'}}], 'max_tokens': 16, 'temperature': 0}})"
)
