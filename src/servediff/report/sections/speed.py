"""Speed: what each configuration bought, per suite: output tokens/s, requests/s, latency,
TTFT, inter-token latency and the speedup against the suite's reference, with the HTML's
speed-against-quality and throughput-against-concurrency plots.

    servediff experiment examples/embedded.toml      # report.md, report.html: Speed

Every number is a field of ``report.rows.speed_table.SpeedRow`` (or a verdict's, for the plot).
"""

from __future__ import annotations

from servediff.compare.reruns import Speedup
from servediff.compare.speed import Interval
from servediff.report import figures, fmt, wording
from servediff.report.document import Block, Cell, Figure, Heading, Paragraph, Table, cell, code, spans
from servediff.report.model import Report
from servediff.report.rows.speed_table import SpeedRow

HEADER = (
    "suite",
    "configuration",
    "concurrency",
    "items (warm-up, errors left out)",
    "output tokens/s [95 % CI]",
    "requests/s [95 % CI]",
    "latency p50 / p90 / p99",
    "TTFT p50",
    "inter-token latency",
    "engine's own tokens/s",
    "speedup [95 % CI]",
)
SPEED_QUALITY = (
    "Each configuration against the reference: speedup in output tokens/s (x, log scale) against "
    "the paired Δ accuracy (y), both with their 95 % intervals; left of the dashed line is slower, "
    "below it less accurate."
)
THROUGHPUT = (
    "Output tokens/s per load-sweep level against the number of requests in flight, with 95 % "
    "bootstrap intervals."
)


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.speed:
        return ()
    out: list[Block] = [Heading(2, spans("Speed"), "speed"), Paragraph(spans(intro(r.warmup)))]
    if r.speed_vs_quality:
        svg = figures.later(figures.speed_quality_svg, r.speed_vs_quality)
        out.append(Figure("speed-quality", svg, SPEED_QUALITY))
    if r.sweep_speed:
        out.append(Figure("throughput", figures.later(figures.throughput_svg, r.sweep_speed), THROUGHPUT))
    out.append(Table(HEADER, tuple(_row(s) for s in r.speed)))
    return tuple(out)


def intro(warmup: int) -> str:
    first = "none" if warmup == 0 else ("the first item" if warmup == 1 else f"the first {warmup} items")
    return (
        "Output tokens/s and requests/s = tokens (requests) ÷ wall time from the first request sent to the "
        "last answer back, summed over the stretches a run was made in (interleaved blocks, a resume); "
        "latency is per request, sent to answered. The intervals of rates and latencies "
        "are 95 % percentile bootstraps over items (seeded): they say how precisely these runs were "
        "measured, not where a rerun would land. The speedup's interval includes run-to-run variance "
        "where a configuration ran more than once (a t interval over per-run throughputs, on the items "
        "every run completed); with one run each it is the item bootstrap, paired over the items both "
        "ran, and says it covers item sampling only. "
        f"Warm-up: {first} sent in each run is left out of every number and counted (ReportOptions.warmup)."
        " TTFT and inter-token latency exist only where tokens were seen arrive (in-process, or --stream); "
        "the engine's own rate is decoded tokens ÷ its own decode time (llama.cpp's perf counters, or a "
        "server's timings), which leaves out prompt processing, sampling and transport."
    )


def direction(x: Interval) -> str:
    """Plain words for a speedup: only an interval wholly on one side of 1 counts, and only
    one that includes run-to-run variance."""
    if isinstance(x, Speedup) and x.basis == "items":
        return "one run each"
    if x.high < 1:
        return "slower"
    if x.low > 1:
        return "faster"
    return "no clear difference"


def _row(s: SpeedRow) -> tuple[Cell, ...]:
    latency = " / ".join(fmt.seconds(x.value) for x in s.latency) or "not recorded"
    return (
        cell(s.suite),
        cell(code(s.label)),
        cell(str(s.concurrency)),
        cell(f"{s.items} ({s.warmup}, {s.errors})"),
        cell(fmt.interval(s.tokens_per_s, fmt.per_s)),
        cell(fmt.interval(s.requests_per_s, fmt.per_s)),
        cell(latency),
        cell(fmt.interval(s.ttft[0], fmt.seconds) if s.ttft else "not measured"),
        cell(fmt.interval(s.itl, fmt.seconds) if s.itl else "not measured"),
        cell(fmt.per_s(s.engine_tokens_per_s)),
        _speedup(s),
    )


def _speedup(s: SpeedRow) -> Cell:
    x, ref = s.speedup, s.reference
    if x is None or ref is None:
        return cell("—")
    if s.load is not None and s.load.unsteady:  # the machine may explain it: no interval
        return cell(f"{fmt.speedup(x.value)} ({wording.load_note(s.load, ref, s.label)}) vs ", code(ref))
    if x.basis == "items":
        return cell(
            f"{fmt.speedup(x.value)} {wording.speedup_interval(x)} ({wording.ONE_RUN_EACH}) vs ", code(ref)
        )
    shown = f"{fmt.speedup(x.value)} ({direction(x)}) {wording.speedup_interval(x)} vs "
    return cell(shown, code(ref))
