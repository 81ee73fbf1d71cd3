"""Part 1, alternated: servediff's HTTP client at another revision and at this tree's, in turns.

    .venv/bin/python bench/alternate.py --against main                 # main's src vs this tree's
    .venv/bin/python bench/alternate.py --against HEAD~1 --rounds 4 --concurrency 64

Why it exists: on a small shared machine the speed of the same code moves by half from one
quarter hour to the next, so two numbers measured minutes apart compare the machine, not the
code. Here both revisions drive the same stub server (``stub_server.py``, pinned to one core,
the client to the other) in turns: every repeat runs the other revision, then this one (the
order flips each round), so a change in load falls on both. Each round also measures the stub's
own ceiling (wrk, when installed) between the clients, and in the same turns the floor under
any Python client (``client_floor.py``: pre-encoded requests, no validation). Besides
requests/s, each client reports its own CPU time for the requests, which other processes' load
stretches less.

The other revision's ``src/`` is taken with ``git archive`` into a temporary folder; the
client script is this tree's ``client_servediff.py`` for both, so only servediff differs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from common import BENCH, BENCH_PYTHON, PYTHON, ROOT, Server, free_port, log
from throughput import _ceiling, _pins


@dataclass(frozen=True, slots=True)
class Run:
    side: str  # "old" (the --against revision), "new" (this tree) or "floor" (client_floor.py)
    round: int
    concurrency: int
    rate: float  # requests/s, wall
    cpu_us: float  # the client's CPU µs per request


def _extract(rev: str, into: Path) -> Path:
    """The ``src/`` folder of ``rev``, written under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, "src"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(into, filter="data")
    return into / "src"


def _client(side: str, src: Path, url: str, c: int, requests: int, cpu: int | None) -> tuple[float, float]:
    script = "client_floor.py" if side == "floor" else "client_servediff.py"
    argv = [PYTHON, str(BENCH / script), "--url", url]
    argv += ["--requests", str(requests), "--concurrency", str(c)]
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got["ok"] != requests:
        raise RuntimeError(f"{src} at concurrency {c}: only {got['ok']}/{requests} requests succeeded")
    return got["requests"] / got["seconds"], got["cpu_s"] / requests * 1e6


def measure(args: argparse.Namespace, old_src: Path, new_src: Path) -> tuple[list[Run], list[float]]:
    server_cpu, client_cpu = _pins()
    port = free_port()
    stub = [BENCH_PYTHON if Path(BENCH_PYTHON).exists() else PYTHON, str(BENCH / "stub_server.py")]
    stub += ["--port", str(port)] + (["--cpu", str(server_cpu)] if server_cpu is not None else [])
    runs: list[Run] = []
    ceilings: list[float] = []
    with (
        tempfile.TemporaryDirectory() as logs,
        Server(stub, "/v1/models", Path(logs) / "stub.log", port) as s,
    ):
        for r in range(args.rounds):
            order = [("old", old_src), ("new", new_src), ("floor", new_src)]
            if r % 2:
                order.reverse()
            for c in args.concurrency:
                for _ in range(args.repeats):
                    for side, src in order:
                        rate, cpu_us = _client(side, src, s.base_url, c, args.requests, client_cpu)
                        runs.append(Run(side, r + 1, c, rate, cpu_us))
            ceilings.append(_ceiling(s.base_url, client_cpu)[0])
            log(f"round {r + 1}/{args.rounds} done; stub ceiling {ceilings[-1]:,.0f} req/s")
    return runs, ceilings


def report(args: argparse.Namespace, runs: list[Run], ceilings: list[float]) -> list[str]:
    """Markdown: per round and concurrency the median of each side, the ratio, the ceiling."""

    def med(side: str, c: int, rnd: int | None, key: str) -> float:
        picked = [x for x in runs if x.side == side and x.concurrency == c and rnd in (None, x.round)]
        return float(statistics.median(getattr(x, key) for x in picked))

    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        f"servediff at `{args.against}` (old) vs this tree (new), ended {when}: {args.requests:,} "
        f"requests per run, {args.repeats} runs per side, setting and round, {args.rounds} rounds, "
        "the sides alternating run by run; medians (in the last rows, new ÷ old is the median of "
        "the rounds' ratios).",
        "",
        "| round | in flight | old req/s | new req/s | new ÷ old | old CPU µs/req | new CPU µs/req "
        "| floor req/s | floor CPU µs/req | stub ceiling (wrk) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rnd in [*range(1, args.rounds + 1), None]:
        for c in args.concurrency:
            o, n = med("old", c, rnd, "rate"), med("new", c, rnd, "rate")
            oc, nc = med("old", c, rnd, "cpu_us"), med("new", c, rnd, "cpu_us")
            f, fc = med("floor", c, rnd, "rate"), med("floor", c, rnd, "cpu_us")
            ceil = ceilings[rnd - 1] if rnd is not None else statistics.median(ceilings)
            label = str(rnd) if rnd is not None else "all (median)"
            ratio = n / o
            if rnd is None:  # the rounds' own ratios: each compares runs minutes apart, not an hour
                rounds = range(1, args.rounds + 1)
                ratio = statistics.median(med("new", c, k, "rate") / med("old", c, k, "rate") for k in rounds)
            out.append(
                f"| {label} | {c} | {o:,.0f} | {n:,.0f} | {ratio:.2f}× | {oc:.1f} | {nc:.1f} "
                f"| {f:,.0f} | {fc:.1f} | {ceil:,.0f} |"
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="main", help="the revision to compare with (default main)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="runs per side, setting and round")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--json", type=Path, help="also write every run here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old_src = _extract(args.against, Path(tmp))
        runs, ceilings = measure(args, old_src, ROOT / "src")
    print("\n".join(report(args, runs, ceilings)))
    if args.json:
        rows = [asdict(r) for r in runs]
        args.json.write_text(json.dumps({"runs": rows, "ceilings": ceilings}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
