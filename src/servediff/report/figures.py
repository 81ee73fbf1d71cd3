"""The HTML report's plots: matplotlib figures rendered to inline SVG strings.

    servediff report runs/*.jsonl --html report.html

No pyplot and no display: each function builds a ``Figure``, saves it as SVG into memory and
returns the ``<svg>`` element. Text stays text (``svg.fonttype: none``) so the page stays small
and searchable; matplotlib escapes it as XML, and every string passed in goes through
``plain`` first so that a ``$`` in a label cannot switch on mathtext.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, ParamSpec

import numpy as np
from markupsafe import escape

from servediff.compare.comparison import Comparison
from servediff.compare.concurrency import LoadSweep
from servediff.compare.kl_runs import KlRow
from servediff.compare.quality import Accuracy, Subjects
from servediff.compare.sampled import SampledPair
from servediff.report.model import Matrix
from servediff.report.rows.speed_table import SpeedRow
from servediff.report.rows.verdicts import Verdict
from servediff.report.xmltext import xml_text

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn: Markdown alone draws none
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

P = ParamSpec("P")
WIDTH = 7.0  # inches; the page scales the SVG to its column
CLASS_COLORS = {"near-tie flip": "#66bb6a", "rank change": "#ffa726", "unexplained": "#ef5350"}


def plain(text: str) -> str:
    """A label matplotlib draws literally: no mathtext (``$…$``), and nothing the SVG, which is
    XML, cannot hold (``xml_text``)."""
    return xml_text(text).replace("$", r"\$")


def drawn(draw: Callable[P, str], *args: P.args, **kwargs: P.kwargs) -> str:
    """The figure's SVG, or a note where it would have been if the plotting library fails: a plot
    only shows numbers the tables beside it already give, so it must never cost the reader the
    report (matplotlib once refused an error bar 1e-16 below zero and `report --html` exited
    with nothing written)."""
    try:
        return draw(*args, **kwargs)
    except Exception as exc:  # any failure of the plotting library: see the docstring
        why = f"{type(exc).__name__}: {str(exc)[:300]}"
        note = f"Figure not drawn ({escape(why)}); the numbers are in the tables."
        return f'<p class="muted figure-failed">{note}</p>'


def later(draw: Callable[P, str], *args: P.args, **kwargs: P.kwargs) -> Callable[[], str]:
    """``drawn`` when the HTML asks for the figure, not before."""
    return lambda: drawn(draw, *args, **kwargs)


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def _integer_ticks() -> MaxNLocator:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def error_bars(values: Sequence[float], lows: Sequence[float], highs: Sequence[float]) -> list[list[float]]:
    """matplotlib's ``[[below…], [above…]]`` distances of an interval from its estimate, never
    negative: an interval computed in floating point can miss its own estimate by an ulp (a
    Wilson bound of 0.9999999999999999 at 10/10), and matplotlib refuses the whole figure then."""
    return [
        [max(0.0, v - lo) for v, lo in zip(values, lows)],
        [max(0.0, hi - v) for v, hi in zip(values, highs)],
    ]


def to_svg(fig: Figure, salt: str) -> str:
    from matplotlib import rc_context

    buf = io.StringIO()
    # A per-figure salt keeps element ids (clip paths, glyphs) unique across the inline SVGs
    # of one page; no date in the metadata keeps the output reproducible.
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def survival_svg(curves: Sequence[Comparison]) -> str:
    """Kaplan–Meier per pair from the same (tokens at risk, diverged) times as the hazard, with
    the constant-hazard fit drawn only as far as that pair's longest observed completion: a suite
    of 16-token answers says nothing about token 300."""
    fig = _figure(WIDTH, 3.6)
    ax = fig.subplots()
    horizon = max(max(t for t, _ in c.times) for c in curves) + 1
    for n, c in enumerate(curves):
        xs, ys = [x for x, _ in c.survival], [y for _, y in c.survival]
        color = f"C{n % 10}"
        seen = max(t for t, _ in c.times)
        name = f"{c.a} vs {c.b} ({c.suite})"
        ax.step([*xs, seen], [*ys, ys[-1]], where="post", color=color, label=plain(f"{name}, Kaplan–Meier"))
        h = c.hazard
        if h is not None:
            grid = np.linspace(0, seen, 200)
            rate, low, high = h.per_1000 / 1000, h.low_1000 / 1000, h.high_1000 / 1000
            ax.plot(
                grid,
                np.exp(-rate * grid),
                color=color,
                linestyle="--",
                linewidth=1,
                label=plain(f"{name}, constant hazard {rate:.2g}/token [{low:.2g}, {high:.2g}]"),
            )
            ax.fill_between(grid, np.exp(-high * grid), np.exp(-low * grid), color=color, alpha=0.12)
    ax.xaxis.set_major_locator(_integer_ticks())
    ax.set_xlabel("tokens generated")
    ax.set_ylabel("share of items still identical")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(0, horizon)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return to_svg(fig, "survival")


def gap_histogram_svg(pairs: Sequence[Comparison], threshold: float | None = None) -> str:
    """Stacked by class: near-tie flips sit left of the threshold by definition."""
    gaps: dict[str, list[float]] = {}
    for c in pairs:
        for d in c.divergences:
            if d.a is not None and d.a.gap is not None:
                gaps.setdefault(d.cls, []).append(d.a.gap)
    return _gap_histogram(gaps, threshold)


def _gap_histogram(gaps: Mapping[str, Sequence[float]], threshold: float | None) -> str:
    fig = _figure(WIDTH, 3.0)
    ax = fig.subplots()
    every = [g for values in gaps.values() for g in values]
    top = max(max(every), (threshold or 0) * 1.5, 0.05) if every else 1.0
    bins = [float(x) for x in np.linspace(0.0, top * 1.05, min(30, max(5, len(every))) + 1)]
    names = [k for k in gaps if gaps[k]]
    colors = [CLASS_COLORS.get(k, "C7") for k in names]
    ax.hist(
        [list(gaps[k]) for k in names], bins=bins, stacked=True, color=colors, label=[plain(k) for k in names]
    )
    if threshold is not None:
        ax.axvline(
            threshold, color="black", linestyle="--", linewidth=1, label=f"near-tie threshold {threshold:.3g}"
        )
    ax.legend(fontsize=8)
    ax.yaxis.set_major_locator(_integer_ticks())
    ax.set_xlabel("A's top-1 − top-2 logprob gap at the first differing token (nats)")
    ax.set_ylabel("divergences")
    ax.grid(alpha=0.3)
    return to_svg(fig, "gaps")


def accuracy_svg(rows: Sequence[Accuracy]) -> str:
    fig = _figure(WIDTH, 0.9 + 0.38 * len(rows))
    ax = fig.subplots()
    y = np.arange(len(rows))[::-1]
    values = np.array([r.accuracy for r in rows])
    err = error_bars([r.accuracy for r in rows], [r.ci.low for r in rows], [r.ci.high for r in rows])
    suites = list(dict.fromkeys(r.suite for r in rows))
    colors = [f"C{suites.index(r.suite) % 10}" for r in rows]
    ax.barh(y, values, xerr=err, color=colors, alpha=0.8, capsize=3)
    ax.set_yticks(
        y, [plain(f"{r.suite} · {r.label} #{r.repeat}  ({r.correct}/{r.n})") for r in rows], fontsize=8
    )
    ax.set_xlim(0, 1)
    ax.set_xlabel("accuracy (bars: 95 % Wilson interval)")
    ax.grid(axis="x", alpha=0.3)
    return to_svg(fig, "accuracy")


def subject_agreement_svg(s: Subjects) -> str:
    rows, title = s.rows, f"{s.suite}: {s.a} vs {s.b}"
    fig = _figure(WIDTH, 0.9 + 0.22 * len(rows))
    ax = fig.subplots()
    y = np.arange(len(rows))[::-1]
    ax.barh(y, [r.same_share for r in rows], color="C2", alpha=0.8)
    ax.set_yticks(y, [plain(f"{r.subject} ({r.n})") for r in rows], fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of items with the same extracted answer")
    ax.set_title(plain(title), fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return to_svg(fig, f"subjects-{title}")


def agreement_matrix_svg(m: Matrix) -> str:
    k = len(m.labels)
    fig = _figure(1.6 + 0.9 * k, 1.2 + 0.8 * k)
    ax = fig.subplots()
    data = np.array([[math.nan if x is None else x for x in row] for row in m.identical], dtype=float)
    # pcolormesh, not imshow: vector cells, where imshow would embed a raster image that the
    # page's Content-Security-Policy (no images at all) blocks.
    edges = np.arange(k + 1) - 0.5
    im = ax.pcolormesh(edges, edges, np.ma.masked_invalid(data), vmin=0, vmax=1, cmap="viridis")
    ax.set_aspect("equal")
    ax.invert_yaxis()
    ax.set_xticks(range(k), [plain(x) for x in m.labels], rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(k), [plain(x) for x in m.labels], fontsize=8)
    for i in range(k):
        for j in range(k):
            text = "–" if math.isnan(data[i, j]) else f"{data[i, j]:.0%}"
            ax.text(j, i, text, ha="center", va="center", color="white" if data[i, j] < 0.6 else "black")
    bar = fig.colorbar(im, ax=ax, label="byte-identical share")
    if bar.solids is not None:
        bar.solids.set_rasterized(False)  # matplotlib rasterizes long colorbars; keep it a vector
    ax.set_title(plain(f"{m.suite}: byte-identical completions"), fontsize=9)
    return to_svg(fig, f"matrix-{m.suite}")


# --- speed (#21) --------------------------------------------------------------------------------
def speed_quality_svg(verdicts: Sequence[Verdict]) -> str:
    """Speedup (x, log) against paired Δ accuracy (y, pp), one point per (configuration, suite),
    with both 95 % intervals as error bars; the reference sits at (1, 0)."""
    fig = _figure(WIDTH, 3.8)
    ax = fig.subplots()
    n = 0
    for v in verdicts:
        s = v.speedup
        if s is None:
            continue
        for q in v.quality:
            color = f"C{n % 10}"
            n += 1
            ax.errorbar(
                [s.value],
                [q.delta * 100],
                xerr=error_bars([s.value], [s.low], [s.high]),
                yerr=error_bars([q.delta * 100], [q.low * 100], [q.high * 100]),
                fmt="o",
                color=color,
                capsize=4,
                label=plain(f"{v.label} vs {v.reference} ({q.suite})"),
            )
    ax.axvline(1.0, color="0.5", linestyle="--", linewidth=1)
    ax.axhline(0.0, color="0.5", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("speedup in output tokens/s against the reference (log scale)")
    ax.set_ylabel("Δ accuracy (pp)")
    ax.legend(fontsize=8)
    return to_svg(fig, "speed-quality")


def throughput_svg(levels: Sequence[SpeedRow]) -> str:
    """Output tokens/s against concurrency, one line per load sweep, with 95 % intervals."""
    fig = _figure(WIDTH, 3.4)
    ax = fig.subplots()
    sweeps: dict[str, list[SpeedRow]] = {}
    for s in levels:
        sweeps.setdefault(f"{s.sweep} ({s.suite})", []).append(s)
    for n, (name, rows) in enumerate(sweeps.items()):
        rows = sorted((r for r in rows if r.tokens_per_s is not None), key=lambda r: r.concurrency)
        xs = [r.concurrency for r in rows]
        speeds = [r.tokens_per_s for r in rows if r.tokens_per_s]
        ys = [s.value for s in speeds]
        bars = error_bars(ys, [s.low for s in speeds], [s.high for s in speeds])
        ax.errorbar(xs, ys, yerr=bars, fmt="o-", color=f"C{n % 10}", capsize=4, label=plain(name))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(_integer_ticks())
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("output tokens/s")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return to_svg(fig, "throughput")


def load_svg(sweeps: Sequence[LoadSweep]) -> str:
    """What each step of concurrency buys and costs: output tokens/s (x) against the divergence
    hazard per 1,000 tokens vs the base run (y), one line per sweep, each point its concurrency."""
    fig = _figure(WIDTH, 3.6)
    ax = fig.subplots()
    for n, s in enumerate(sweeps):
        rows = [x for x in s.levels if x.tokens_per_s is not None and x.hazard is not None]
        if not rows:
            continue
        xs = [x.tokens_per_s.value for x in rows if x.tokens_per_s]
        rates = [(h.rate_1000, h.low_1000, h.high_1000) for x in rows if (h := x.hazard)]
        speed = [x.tokens_per_s for x in rows if x.tokens_per_s]
        xerr = error_bars([t.value for t in speed], [t.low for t in speed], [t.high for t in speed])
        yerr = error_bars([r for r, _, _ in rates], [lo for _, lo, _ in rates], [hi for _, _, hi in rates])
        ys = [r for r, _, _ in rates]
        color = f"C{n % 10}"
        label = plain(f"{s.label} ({s.suite})")
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="o-", color=color, capsize=3, label=label)
        for x, y, level in zip(xs, ys, rows):
            ax.annotate(
                f"c={level.concurrency}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7
            )
    ax.set_xlabel("output tokens/s (95 % bootstrap interval)")
    ax.set_ylabel("divergences per 1,000 tokens vs the base")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return to_svg(fig, "load")


def first_divergence_svg(pairs: Sequence[SampledPair]) -> str:
    """Empirical share of coupled draws diverged by token x (the control's curve is the floor)."""
    fig = _figure(WIDTH, 3.2)
    ax = fig.subplots()
    for n, p in enumerate(pairs):
        f = p.first
        if f is None or not f.compared:
            continue
        xs = [0, *f.positions]
        ys = [0.0, *((i + 1) / f.compared for i in range(len(f.positions)))]
        xs.append(max(xs) + 1)
        ys.append(ys[-1])
        label = plain(f"{p.a} vs {p.b} ({p.suite}, {p.kind}): {f.diverged}/{f.compared}")
        ax.step(xs, ys, where="post", color=f"C{n % 10}", label=label)
    ax.xaxis.set_major_locator(_integer_ticks())
    ax.set_xlabel("first differing token")
    ax.set_ylabel("share of draws diverged")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return to_svg(fig, "sampled-divergence")


def kl_distribution_svg(rows: Sequence[KlRow]) -> str:
    """Per-position KL of each scoring pair: the share of positions per log-spaced bin (a step
    line per pair), with its median and 99th percentile marked. The first bin holds every value
    below its upper edge, 0 included (an A/A pair sits there entirely)."""
    fig = _figure(WIDTH, 3.4)
    ax = fig.subplots()
    for n, k in enumerate(rows):
        if not k.kl_hist_counts:
            continue
        color = f"C{n % 10}"
        edges = np.asarray(k.kl_hist_edges)
        share = np.asarray(k.kl_hist_counts, dtype=float) / max(sum(k.kl_hist_counts), 1)
        label = plain(f"{k.b} vs {k.a} ({k.suite}), mean {k.kl_mean.value:.3g}")
        ax.stairs(share, edges, color=color, label=label, linewidth=1.4)
        pct = dict(k.kl_percentiles)
        for q, style in ((50.0, "--"), (99.0, ":")):
            value = min(max(pct.get(q, 0.0), edges[0]), edges[-1])
            ax.axvline(value, color=color, linestyle=style, linewidth=0.9, alpha=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("KL(A‖B) at one position, nats (top-k + tail)")
    ax.set_ylabel("share of positions")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return to_svg(fig, "kl-distribution")
