"""Part 1: client throughput against an instant local OpenAI-compatible server.

    .venv/bin/python bench/main.py --parts throughput

The stub (stub_server.py) runs in its own process pinned to one core, each client in its own
process pinned to the other, so neither shares the other's event loop or core. Every client
sends the same requests (workload.py) in the same number; the best of the repeats is what the
machine allows, the median is what the table shows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common import BENCH, BENCH_PYTHON, PYTHON, Row, Server, free_port, log, median, run_timed

CONCURRENCY = (1, 8, 64, 256)
THREADS = 8  # the hand-written baseline's pool size
WRK_BODY = (
    '{"model":"stub","messages":[{"role":"user","content":"Question 1: what is 1 plus 1?"}],"max_tokens":16}'
)


@dataclass(frozen=True, slots=True)
class Config:
    requests: int = 3000
    repeats: int = 3


def _pins() -> tuple[int | None, int | None]:
    """(server core, client core): separate cores when there are at least two."""
    cores = sorted(os.sched_getaffinity(0))
    return (cores[-1], cores[0]) if len(cores) >= 2 else (None, None)


def _client(script: str, python: str, url: str, c: int, cfg: Config, cpu: int | None) -> float:
    argv = [
        python,
        str(BENCH / script),
        "--url",
        url,
        "--requests",
        str(cfg.requests),
        "--concurrency",
        str(c),
    ]
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    out = json.loads(run_timed(argv, timeout=600).stdout.strip().splitlines()[-1])
    if out["ok"] != cfg.requests:
        raise RuntimeError(f"{script} at concurrency {c}: only {out['ok']}/{cfg.requests} requests succeeded")
    return float(out["requests"] / out["seconds"])


def _ceiling(url: str, cpu: int | None) -> tuple[float, str]:
    """The stub's own ceiling: wrk (C, one thread, 64 connections) when installed."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return 0.0, "wrk not installed (`apt-get install wrk`): ceiling not measured"
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(f"wrk.method = 'POST'\nwrk.body = '{WRK_BODY}'\n")
        f.write("wrk.headers['Content-Type'] = 'application/json'\n")
    argv = [wrk, "-t1", "-c64", "-d4s", "-s", f.name, f"{url}/v1/chat/completions"]
    if cpu is not None and shutil.which("taskset"):
        argv = ["taskset", "-c", str(cpu), *argv]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    Path(f.name).unlink()
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return (float(m.group(1)), "wrk, 64 connections") if m else (0.0, "wrk printed no rate")


def measure(cfg: Config, logdir: Path) -> list[Row]:
    server_cpu, client_cpu = _pins()
    port = free_port()
    argv = [BENCH_PYTHON, str(BENCH / "stub_server.py"), "--port", str(port)]
    if server_cpu is not None:
        argv += ["--cpu", str(server_cpu)]
    rates: dict[str, list[float]] = {}
    with Server(argv, "/v1/models", logdir / "stub.log", port) as server:
        url = server.base_url
        ceilings = []
        for rep in range(cfg.repeats):
            log(f"throughput: repeat {rep + 1}/{cfg.repeats}")
            for c in CONCURRENCY:
                rates.setdefault(f"servediff/{c}", []).append(
                    _client("client_servediff.py", PYTHON, url, c, cfg, client_cpu)
                )
                rates.setdefault(f"lm-eval/{c}", []).append(
                    _client("client_lmeval.py", BENCH_PYTHON, url, c, cfg, client_cpu)
                )
            rates.setdefault("urllib", []).append(
                _client("client_urllib.py", PYTHON, url, THREADS, cfg, client_cpu)
            )
            ceilings.append(_ceiling(url, client_cpu))
    return _rows(cfg, rates, ceilings)


def _rows(cfg: Config, rates: dict[str, list[float]], ceilings: list[tuple[float, str]]) -> list[Row]:
    m = {k: median(v) for k, v in rates.items()}
    part = "1. client throughput (req/s)"
    rows = []
    for c in CONCURRENCY:
        sd, lm = m[f"servediff/{c}"], m[f"lm-eval/{c}"]
        rows.append(Row(part, f"servediff HTTP engine, concurrency {c}", f"{sd:,.0f}"))
        rows.append(
            Row(part, f"lm-eval local-chat-completions, num_concurrent {c}", f"{lm:,.0f} ({sd / lm:.1f}×)")
        )
    urllib = m["urllib"]
    rows.append(Row(part, f"plain {THREADS}-thread urllib client", f"{urllib:,.0f}"))
    r_lm = m["servediff/64"] / m["lm-eval/64"]
    r_ul = m["servediff/64"] / urllib
    rows.append(Row(part, "servediff ÷ lm-eval at concurrency 64", f"{r_lm:.1f}×", "≥ 3×", r_lm >= 3))
    rows.append(Row(part, f"servediff (64) ÷ {THREADS}-thread urllib", f"{r_ul:.1f}×", "≥ 5×", r_ul >= 5))
    best, how = max(ceilings)
    note = f"{best:,.0f} ({how})" if best else how
    rows.append(Row(part, "the stub server's own ceiling", note))
    rows.append(
        Row(
            part,
            "setup",
            f"{cfg.requests:,} requests per client and setting, median of {cfg.repeats} runs; "
            "(n×): servediff's rate at the same concurrency ÷ lm-eval's",
        )
    )
    return rows
