"""How a number looks in a report: one format per kind of number, shared by Markdown and HTML.

    servediff report runs/*.jsonl --md report.md --html report.html

Both templates format through these functions (registered as Jinja filters), so a figure in
``summary.json`` reads the same in report.md and report.html; the consistency test formats the
JSON's numbers with them and finds each in both pages.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from servediff.compare.comparison import Side
from servediff.compare.sampled import Estimate
from servediff.compare.speed import Interval


def ratio(k: int, n: int) -> str:
    return f"{k}/{n}"


def nats(x: float | None) -> str:
    """A gap or logprob, to the 1e-4 nat that a float32 logit resolves with room to spare."""
    return "—" if x is None else f"{x:.4f}"


def logprob(x: float) -> str:
    return f"{x:.3f}"


def gap(s: Side | None) -> str:
    """A side's top-1 − top-2 gap, with its steps of the logprob grid where the logits are coarse."""
    if s is None or s.gap is None:
        return "—"
    if s.gap == 0:
        return "0 (exact tie)"
    if s.steps is not None:
        return f"{s.gap:.4f} ({s.steps:.0f} steps)"
    return f"{s.gap:.4f}"


def signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def small(x: float) -> str:
    """Drift and probe-vs-run differences: two significant figures."""
    return f"{x:.2g}"


def rate(x: float) -> str:
    """A hazard per 1,000 tokens."""
    return f"{x:.3g}"


def prob(x: float) -> str:
    return f"{x:.2%}"


def pp(x: float | None) -> str:
    """A share in percentage points (accuracy, interval bound)."""
    return "n/a" if x is None or math.isnan(x) else f"{x * 100:.1f}"


def spp(x: float | None) -> str:
    """A signed difference in percentage points."""
    return "n/a" if x is None or math.isnan(x) else f"{x * 100:+.1f}"


def pvalue(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def count(n: int) -> str:
    return f"{n:,}"


def share(x: float | None) -> str:
    return "–" if x is None else f"{x:.0%}"


def mean(x: float) -> str:
    return f"{x:.2f}"


def speedup(x: float | None) -> str:
    """A ratio of speeds: two significant figures (0.38×, 1.8×, 12×)."""
    return "n/a" if x is None else f"{x:.2g}×"


def per_s(x: float | None) -> str:
    """Tokens or requests per second: three significant figures, thousands separated."""
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def seconds(x: float | None) -> str:
    """A latency: milliseconds below one second, else seconds, three significant figures."""
    if x is None:
        return "n/a"
    return f"{x * 1000:.3g} ms" if x < 1 else f"{x:.3g} s"


def kld(x: float | None) -> str:
    """A divergence in nats (KL, ln PPL ratio, Δp): three significant digits, since an A/A
    floor of exactly 0 and a Q2_K mean of 0.3 share one column; 0 stays "0"."""
    if x is None or math.isnan(x):
        return "n/a"
    return "0" if x == 0 else f"{x:.3g}"


def interval(x: Interval | None, f: Callable[[float], str]) -> str:
    """An estimate with its interval, each in the format ``f``: 512 [498, 530]."""
    return "n/a" if x is None else f"{f(x.value)} [{f(x.low)}, {f(x.high)}]"


def estimate(e: Estimate | None) -> str:
    """A mean over items in percent with its interval: 43.1 % [38.0, 48.2]."""
    if e is None or e.n == 0:
        return "n/a"
    return f"{pp(e.mean)} % [{pp(e.ci.low)}, {pp(e.ci.high)}]"


def sestimate(e: Estimate | None) -> str:
    """A paired difference over items in percentage points: +1.2 pp [-3.0, +5.4]."""
    if e is None or e.n == 0:
        return "n/a"
    return f"{spp(e.mean)} pp [{spp(e.ci.low)}, {spp(e.ci.high)}]"


FILTERS: dict[str, Callable[..., str]] = {
    "kld": kld,
    "estimate": estimate,
    "sestimate": sestimate,
    "ratio": ratio,
    "nats": nats,
    "logprob": logprob,
    "gap": gap,
    "signed": signed,
    "small": small,
    "rate": rate,
    "prob": prob,
    "pp": pp,
    "spp": spp,
    "pvalue": pvalue,
    "count": count,
    "share": share,
    "mean": mean,
    "speedup": speedup,
    "per_s": per_s,
    "seconds": seconds,
}
