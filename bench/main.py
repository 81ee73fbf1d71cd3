"""Run the benchmarks, print the table, write BENCHMARKS.md.

    bash bench/run.sh                                   # set up, then everything
    .venv/bin/python bench/main.py --parts analysis     # one part, after the setup

Parts: throughput (client vs lm-eval vs urllib on an instant stub), overhead (servediff run vs
a bare httpx loop on the real llama.cpp server), analysis (compare on 100,000-item records),
embedded (servediff's llama.cpp engine vs llama_cpp.Llama directly). Benchmarks, not tests:
nothing here asserts a time; the table says which targets were met.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from common import BENCH_PYTHON, ROOT, Row, log

PARTS = ("throughput", "overhead", "analysis", "embedded", "llama-server")


def _bench_versions() -> dict[str, str]:
    code = (
        "from importlib import metadata as m\n"
        "for p in ('lm_eval', 'aiohttp', 'httpx', 'uvloop'):\n"
        "    try: print(p, m.version(p))\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    out = subprocess.run([BENCH_PYTHON, "-c", code], capture_output=True, text=True, check=False).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def machine() -> list[str]:
    """Where and with what the numbers were measured."""
    ours = {}
    for pkg in ("servediff", "aiohttp", "uvloop", "llama_cpp_python", "pydantic"):
        try:
            ours[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            ours[pkg] = "not installed"
    cpu = "unknown"
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    bench = _bench_versions()
    return [
        f"- Date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- CPU: {cpu}, {os.cpu_count()} cores available; load average at the end {load}",
        f"- OS: {platform.platform()}; Python {platform.python_version()}",
        "- servediff environment: " + ", ".join(f"{k} {v}" for k, v in ours.items()),
        "- benchmark environment: " + ", ".join(f"{k} {v}" for k, v in bench.items()),
    ]


def table(rows: list[Row]) -> list[str]:
    out = ["| part | measurement | measured | target | met |", "|---|---|---|---|---|"]
    for r in rows:
        met = "" if r.met is None else ("yes" if r.met else "**no**")
        out.append(f"| {r.part} | {r.what} | {r.measured} | {r.target} | {met} |")
    return out


def _runners(args: argparse.Namespace, work: Path) -> dict[str, Callable[[], list[Row]]]:
    # Imported lazily: a part's imports (llama_cpp, servediff) cost nothing when it is skipped.
    def throughput() -> list[Row]:
        import throughput as t

        return t.measure(t.Config(requests=args.requests, repeats=args.repeats), work)

    def overhead() -> list[Row]:
        import overhead as o

        return o.measure(o.Config(repeats=args.repeats), work)

    def analysis() -> list[Row]:
        import analysis as a

        return a.measure(a.Config(items=args.items), work)

    def embedded() -> list[Row]:
        import embedded as e

        return e.measure(e.Config(repeats=args.repeats), work)

    def llama_server() -> list[Row]:
        import overhead as o

        return o.measure_llama_server(o.Config(repeats=args.repeats), work)

    return {
        "throughput": throughput,
        "overhead": overhead,
        "analysis": analysis,
        "embedded": embedded,
        "llama-server": llama_server,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description="servediff benchmarks → table + BENCHMARKS.md")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement (the median is shown)")
    ap.add_argument("--requests", type=int, default=3000, help="requests per throughput client run")
    ap.add_argument("--items", type=int, default=100_000, help="items per synthetic run record")
    ap.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="servediff-bench-") as tmp:
        runners = _runners(args, Path(tmp))
        for part in args.parts:
            log(f"== {part}")
            rows += runners[part]()
    lines = table(rows)
    print("\n".join(lines))
    text = [
        "# Benchmarks",
        "",
        "Produced by `bash bench/run.sh` (see bench/README.md for what each part measures).",
        "",
        *machine(),
        "",
        *lines,
        "",
    ]
    notes = ROOT / "bench" / "NOTES.md"
    if notes.is_file():
        text += [notes.read_text(encoding="utf-8").rstrip(), ""]
    args.out.write_text("\n".join(text), encoding="utf-8")
    log(f"wrote {args.out}")
    return 0  # a missed target is a finding in the table, not a failure of the benchmark


if __name__ == "__main__":
    sys.exit(main())
