"""Two engines' load sweeps of one prompt suite side by side: one table, one plot.

    python scripts/load_beside.py --suite prompts \\
        --study "llama-server (H200)=docs/studies/gpu-h200-load/study.tar.xz:load" \\
        --study "vLLM 0.24.0 (H100)=docs/studies/vllm-h100-load/load.tar.xz:load" \\
        --md table.md --svg docs/studies/vllm-h100-load/beside.svg

Each study is a tarball (or folder) of an experiment's records and the folder inside it that
holds them (``runs/`` and ``sweep/``). The numbers are the report's own (``load_sweeps``, the same
code as the report's "Under load" section of each study), so every cell can be checked against
that study's report; the plot is the report's throughput-against-hazard figure, both sweeps on
one set of axes.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from dataclasses import replace
from pathlib import Path

from servediff.compare.concurrency import LoadLevel, LoadSweep, load_sweeps
from servediff.compare.loader import load
from servediff.report import fmt
from servediff.report.figures import load_svg


def records(source: Path, inner: str, scratch: Path) -> list[Path]:
    folder = source
    if source.name.endswith((".tar.gz", ".tar.xz")):
        folder = scratch / source.name
        with tarfile.open(source) as tar:
            tar.extractall(folder, filter="data")
    root = folder / inner
    files = sorted([*root.glob("runs/*/*.jsonl"), *root.glob("sweep/*/*.jsonl")])
    if not files:
        raise SystemExit(f"load_beside: no records under {source}:{inner} (runs/*/ and sweep/*/)")
    return files


def sweep_of(files: list[Path], suite: str) -> LoadSweep:
    study, options = load(files)
    sweeps = [
        s for s in load_sweeps(study, options.warmup, options.margin, options.near_tie) if s.suite == suite
    ]
    if len(sweeps) != 1:
        raise SystemExit(
            f"load_beside: {len(sweeps)} sweeps of suite {suite!r} in these records, expected one"
        )
    return sweeps[0]


def cell(level: LoadLevel | None) -> str:
    if level is None:
        return "–"
    # the report's own formats, so that a cell reads as the same number in each study's report
    speed = fmt.per_s(level.tokens_per_s.value if level.tokens_per_s else None)
    hazard = fmt.rate(level.hazard.rate_1000) if level.hazard else "n/a"
    return f"{fmt.ratio(level.identical, level.compared)} · {hazard} · {speed}"


def table(named: list[tuple[str, LoadSweep]]) -> str:
    levels = sorted({x.concurrency for _, s in named for x in s.levels})
    head = "| requests in flight | " + " | ".join(name for name, _ in named) + " |"
    rule = "|---|" + "---|" * len(named)
    rows = []
    for c in levels:
        by = [next((x for x in s.levels if x.concurrency == c), None) for _, s in named]
        rows.append(f"| {c} | " + " | ".join(cell(x) for x in by) + " |")
    note = (
        "Each cell: (repeat, item) pairs byte-identical to the same sweep's first run at 1 in flight"
        " · divergences per 1,000 tokens against it · output tokens/s."
    )
    return "\n".join([head, rule, *rows, "", note, ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", required=True, help="the suite both sweeps ran (e.g. prompts)")
    p.add_argument("--study", action="append", required=True, help="NAME=TARBALL_OR_FOLDER:INNER_FOLDER")
    p.add_argument("--md", type=Path, help="write the table here (default: print it)")
    p.add_argument("--svg", type=Path, help="write the plot here")
    args = p.parse_args(argv)
    named: list[tuple[str, LoadSweep]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.study:
            name, _, where = spec.partition("=")
            source, _, inner = where.rpartition(":")
            if not name or not source:
                p.error(f"--study {spec!r}: expected NAME=TARBALL_OR_FOLDER:INNER_FOLDER")
            named.append((name, sweep_of(records(Path(source), inner, Path(tmp)), args.suite)))
    text = table(named)
    if args.md:
        args.md.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if args.svg:
        relabelled = [replace(s, label=name) for name, s in named]
        args.svg.write_text(load_svg(relabelled) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
