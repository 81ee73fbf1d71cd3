"""One comparison, finished: a control (a configuration against its own repeat) or a pair of
configurations, with every divergence split where the texts part, its class, both sides' top-k
and gaps and where they came from, the drift, the hazard and the survival curve.

    servediff compare runs/*.jsonl --md report.md --html report.html   # "Every divergence", "Why"

Each comparison's token alignment comes from ``compare.divergence`` (one alignment); its gaps,
classes, drift and hazard from ``compare.mechanism`` (one gap, one class, one hazard, one
threshold: ``options.near_tie``). The report's sections only lay these out.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import msgspec

from servediff.compare.divergence import Divergence, first_char_difference
from servediff.compare.mechanism import (
    CLASSES,
    RECORDED,
    Distribution,
    Explanation,
    PairMechanism,
    classes,
    measure_pair,
    measured,
)
from servediff.compare.precision import Drift, Precision
from servediff.compare.report_options import ReportOptions
from servediff.compare.sampled import is_sampled
from servediff.compare.stats.hazard import HazardView, kaplan_meier
from servediff.compare.study import PairResult
from servediff.compare.vocabulary import ControlVerdict, DivergenceClass, Kind
from servediff.records import Item

TopK = tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class Side:
    """One side's numbers at a divergence: top-k, gap and where they came from."""

    top: TopK
    gap: float | None
    source: str  # "recorded during the run" or "probe: <method>"
    cite: str  # "run", "probe [n]" (footnote of the comparison's probe legend)
    steps: float | None = None  # the gap in steps of a coarse logprob grid (None: not coarse)


# A msgspec struct, not a frozen dataclass: one per divergence (300,000 in a million-item shadow
# compare), and a frozen dataclass sets each of its 21 fields through object.__setattr__ (2.9 µs
# a view, a struct 0.2). The summary (``render.summary``) lays out its fields and properties as a
# dataclass's, so --json is the same.
class DivergenceView(msgspec.Struct, frozen=True, gc=False):
    item_id: str
    char_index: int
    token_index: int | None
    alignment: str
    a_token: str | None  # the two diverging tokens as text (None: end of sequence / unknown)
    b_token: str | None
    prefix: str  # what both completions share before the first differing token (or character)
    a_first: str  # A's first differing token (or character) as shown, and the rest of A
    a_rest: str
    b_first: str
    b_rest: str
    a_tokens: int | None
    b_tokens: int | None
    cls: DivergenceClass
    note: str
    a: Side | None
    b: Side | None
    a_probe: Side | None  # a probe beside a recorded side: shown to expose the probe's error
    b_probe: Side | None
    shift_a: float | None  # logprob of A's token under B minus under A
    shift_b: float | None

    @property
    def prefix_length(self) -> int:
        """Characters both completions share before the first differing token."""
        return len(self.prefix)


@dataclass(frozen=True, slots=True)
class ProbeCheck:
    """How far a probe's gap is from the gap recorded during the run, where both exist."""

    label: str
    n: int
    max_gap_diff: float
    top1_differs: int


@dataclass(frozen=True, slots=True)
class Comparison:
    """A control (a configuration against its own repeat) or a pair of configurations."""

    suite: str
    a: str
    b: str
    kind: Kind
    a_repeat: int
    b_repeat: int
    identical: int
    total: int
    errors: int  # left out: an engine error or no answer yet on either side
    missing: int  # of errors: one side has not answered the item yet (an interrupted run)
    # controls: "deterministic", "NOT deterministic", "nothing to compare"; sampled runs:
    # "seeds honoured", "seeds NOT honoured"
    verdict: ControlVerdict | None
    threshold: float
    divergences: Sequence[DivergenceView]  # a DivergenceViews, or a tuple
    classes: tuple[tuple[DivergenceClass, int], ...]  # every class, in a fixed order, with its count
    gap_median: float | None  # A's gap over the divergences that have one
    gap_max: float | None
    drift: Drift | None
    hazard: HazardView | None
    no_token_data: int  # items left out of the hazard
    times: tuple[tuple[int, bool], ...]  # (tokens at risk, diverged): the hazard's own input
    precision: Precision
    probe_sources: tuple[str, ...]  # footnotes: "probe [n]" is probe_sources[n - 1]
    probe_checks: tuple[ProbeCheck, ...]
    # Sampled runs (temperature > 0): a control then checks that per-request seeds reproduce.
    sampled: bool = False
    # Kaplan–Meier from ``times``: (x, P(the first x tokens are identical)) at 0 and at each event.
    survival: tuple[tuple[float, float], ...] = ()
    # Divergences with no token position: when any, no hazard and no curve (``pair_hazard``).
    unlocated: int = 0


def comparison(p: PairResult, options: ReportOptions) -> Comparison:
    m = measure_pair(p, options.probes, options.near_tie)
    # Coarse logits (bf16): each gap is also given in steps of the logprob grid.
    step = m.precision.smallest_step if m.precision.coarse else None
    explained = m.explanations  # one per divergence, in order
    legend = probe_legend(measured(explained))
    counts = classes(explained)
    gaps = sorted(e.a.gap for e in measured(explained) if e.a is not None and e.a.gap is not None)
    views = DivergenceViews(p.divergences, explained, legend, step, len(gaps))
    return Comparison(
        suite=p.suite,
        a=p.a,
        b=p.b,
        kind=p.kind,
        a_repeat=p.a_run.header.repeat,
        b_repeat=p.b_run.header.repeat,
        identical=p.identical,
        total=p.total,
        errors=p.errors,
        missing=p.missing,
        verdict=control_verdict(p) if p.kind == "control" else None,
        threshold=options.near_tie,
        divergences=views,
        classes=tuple((c, counts[c]) for c in CLASSES),
        # An even count: the mean of the middle two (statistics.median), not the upper one.
        gap_median=statistics.median(gaps) if gaps else None,
        gap_max=gaps[-1] if gaps else None,
        drift=m.drift,
        hazard=HazardView.of(m.hazard, max((t for t, _ in m.times), default=None)),
        no_token_data=m.no_token_data,
        times=m.times,
        precision=m.precision,
        probe_sources=tuple(legend),
        probe_checks=probe_checks(m),
        sampled=is_sampled(p.a_run),
        survival=tuple(zip(*kaplan_meier(m.times))),
        unlocated=m.unlocated,
    )


class DivergenceViews(Sequence[DivergenceView]):
    """Every divergence's view, in order, each made when it is first read.

    A million-item shadow compare holds 300,000 divergences: a Markdown report shows the first
    1,000 and counts the rest (from the explanations, which are all made), while --json and the
    HTML's histogram read them all. Equal to the tuple of the same views."""

    __slots__ = ("_divergences", "_explained", "_legend", "_made", "_step", "gapped")

    def __init__(
        self,
        divergences: Sequence[Divergence],
        explained: Sequence[Explanation],
        legend: list[str],
        step: float | None,
        gapped: int,
    ) -> None:
        self._divergences, self._explained = divergences, explained
        self._legend, self._step = legend, step
        self._made: list[DivergenceView | None] = [None] * len(divergences)
        self.gapped = gapped  # views whose A side has a gap (the report's histogram counts them)

    def __len__(self) -> int:
        return len(self._made)

    @overload
    def __getitem__(self, i: int) -> DivergenceView: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[DivergenceView, ...]: ...

    def __getitem__(self, i: int | slice) -> DivergenceView | tuple[DivergenceView, ...]:
        if isinstance(i, slice):
            return tuple(self._view(j) for j in range(*i.indices(len(self))))
        return self._view(range(len(self))[i])

    def __iter__(self) -> Iterator[DivergenceView]:
        return (self._view(j) for j in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == len(self) and all(x == y for x, y in zip(self, other))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"DivergenceViews({len(self)} divergences)"

    def passing(self, j: int) -> DivergenceView:
        """The ``j``-th view, not kept where it was not already: a reader that passes over every
        view once (the JSON summary, a slice at a time) need not hold 300,000 of them at once."""
        made = self._made[j]
        if made is None:
            d = self._divergences[j]
            made = divergence_view(d, d.made(), self._explained[j], self._legend, self._step)
        return made

    def _view(self, j: int) -> DivergenceView:
        made = self._made[j]
        if made is None:
            made = self._made[j] = self.passing(j)
        return made


def gapped(views: Sequence[DivergenceView]) -> int:
    """Views whose A side has a gap, counted without making the views where they are made lazily."""
    if isinstance(views, DivergenceViews):
        return views.gapped
    return sum(1 for d in views if d.a is not None and d.a.gap is not None)


def probe_legend(explained: Sequence[Explanation]) -> list[str]:
    """Each probe's source once, numbered in the order the views cite them (A, B, A's probe,
    B's probe, divergence by divergence): footnote n is ``legend[n - 1]``."""
    legend: list[str] = []
    for e in explained:
        for d in (e.a, e.b, e.a_probe, e.b_probe):
            if d is not None and d.source != RECORDED and d.source not in legend:
                legend.append(d.source)
    return legend


def control_verdict(p: PairResult) -> ControlVerdict:
    if p.total == 0:
        return "nothing to compare"
    if is_sampled(p.a_run):  # sampled: identical texts say the engine honoured each draw's seed
        return "seeds honoured" if p.identical == p.total else "seeds NOT honoured"
    return "deterministic" if p.identical == p.total else "NOT deterministic"


def _side(d: Distribution | None, legend: list[str], step: float | None) -> Side | None:
    if d is None:
        return None
    steps = d.gap / step if step and d.gap is not None else None
    if d.source == RECORDED:
        return Side(d.top, d.gap, d.source, "run", steps)
    if d.source not in legend:
        legend.append(d.source)
    return Side(d.top, d.gap, d.source, f"probe [{legend.index(d.source) + 1}]", steps)


def _tokens_match_text(item: Item) -> bool:
    return item.tokens is not None and "".join(item.tokens) == item.text


def _split(d: Divergence, c: int, a: Item, b: Item) -> tuple[str, str, str, str, str]:
    """prefix | A's first differing token | A's rest | B's token | B's rest; by character
    when the records hold no token texts that spell the completion."""
    t = d.token_index
    if (
        t is not None
        and a.tokens is not None
        and b.tokens is not None
        and _tokens_match_text(a)
        and (_tokens_match_text(b))
    ):
        prefix = "".join(a.tokens[:t])
        a_first = a.tokens[t] if t < len(a.tokens) else ""
        b_first = b.tokens[t] if t < len(b.tokens) else ""
        return (
            prefix,
            a_first,
            a.text[len(prefix) + len(a_first) :],
            b_first,
            b.text[len(prefix) + len(b_first) :],
        )
    return a.text[:c], a.text[c : c + 1], a.text[c + 1 :], b.text[c : c + 1], b.text[c + 1 :]


def divergence_view(
    d: Divergence, items: tuple[Item, Item], e: Explanation, legend: list[str], step: float | None
) -> DivergenceView:
    c = first_char_difference(items[0].text, items[1].text)  # d.char_index, from these items
    prefix, a_first, a_rest, b_first, b_rest = _split(d, c, *items)
    point = e.point
    # Positional, in the struct's field order: 300,000 views in a million-item shadow compare,
    # and a call by keyword builds a dictionary of 21 names for each.
    return DivergenceView(
        d.item_id,
        c,
        point.index,
        point.alignment,
        point.a_token,
        point.b_token,
        prefix,
        a_first,
        a_rest,
        b_first,
        b_rest,
        items[0].n_tokens,
        items[1].n_tokens,
        e.cls,
        e.note,
        # Most sides are None (no top-k measured): asked here, not in a call each (300,000 views).
        None if e.a is None else _side(e.a, legend, step),
        None if e.b is None else _side(e.b, legend, step),
        None if e.a_probe is None else _side(e.a_probe, legend, step),
        None if e.b_probe is None else _side(e.b_probe, legend, step),
        e.shift_a_token,
        e.shift_b_token,
    )


def probe_checks(m: PairMechanism) -> tuple[ProbeCheck, ...]:
    out = []
    sides = (
        (m.a, [(e.a_probe, e.a) for e in measured(m.explanations) if e.a_probe is not None]),
        (m.b, [(e.b_probe, e.b) for e in measured(m.explanations) if e.b_probe is not None]),
    )
    for label, probed in sides:
        both = [(p, r) for p, r in probed if r is not None]
        diffs = [abs(p.gap - r.gap) for p, r in both if p.gap is not None and r.gap is not None]
        if diffs:
            flips = sum(1 for p, r in both if p.top[0][0] != r.top[0][0])
            out.append(ProbeCheck(label, len(diffs), max(diffs), flips))
    return tuple(out)
