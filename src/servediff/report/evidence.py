"""What the HTML report shows about divergences, computed from a Study (records and probes only).

    servediff report runs/*.jsonl probes.jsonl --html report.html

Pure functions: the side-by-side view of each divergence (common prefix, the first differing
token, both continuations) joined with ``compare.mechanism``'s explanation of it (each side's
top-k there, the gap, the class and which computation produced the numbers), and the survival
of "tokens until first divergence" per configuration pair (Kaplan–Meier) beside the constant
hazard of ``compare.hazard``, so the HTML and Markdown reports state the same rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servediff.compare import hazard as hz
from servediff.compare.divergence import Divergence
from servediff.compare.mechanism import DEFAULT_THRESHOLD, Explanation, ProbeSet, measure_pair
from servediff.compare.study import PairResult
from servediff.record import Item

TopK = tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class DivergenceView:
    """One divergence, split for display: prefix | first differing token | rest, for A and B."""

    item_id: str
    char_index: int
    token_index: int | None
    prefix: str  # what both completions share, up to the first differing token (or character)
    a_first: str  # A's first differing token (or character when there is no token data)
    a_rest: str
    b_first: str
    b_rest: str
    a_top: TopK  # A's top-k at the divergence (recorded during the run, else a probe's)
    b_top: TopK
    gap: float | None  # A's top-1 − top-2 logprob there, in nats
    klass: str | None  # near-tie flip / rank change / unexplained
    a_source: str  # which computation produced A's numbers ("recorded during the run", "probe: …")
    b_source: str
    note: str = ""


def _tokens_match_text(item: Item) -> bool:
    return item.tokens is not None and "".join(item.tokens) == item.text


def view(d: Divergence, a: Item, b: Item, e: Explanation | None) -> DivergenceView:
    t = d.token_index
    if (
        t is not None
        and _tokens_match_text(a)
        and _tokens_match_text(b)
        and a.tokens is not None
        and b.tokens is not None
    ):
        prefix = "".join(a.tokens[:t])
        a_first = a.tokens[t] if t < len(a.tokens) else ""
        b_first = b.tokens[t] if t < len(b.tokens) else ""
        a_rest, b_rest = a.text[len(prefix) + len(a_first) :], b.text[len(prefix) + len(b_first) :]
    else:
        c = d.char_index
        prefix, a_first, b_first = a.text[:c], a.text[c : c + 1], b.text[c : c + 1]
        a_rest, b_rest = a.text[c + 1 :], b.text[c + 1 :]
    ea, eb = (e.a, e.b) if e is not None else (None, None)
    return DivergenceView(
        item_id=d.item_id,
        char_index=d.char_index,
        token_index=t,
        prefix=prefix,
        a_first=a_first,
        a_rest=a_rest,
        b_first=b_first,
        b_rest=b_rest,
        a_top=ea.top if ea else (),
        b_top=eb.top if eb else (),
        gap=ea.gap if ea else None,
        klass=e.cls if e else None,
        a_source=ea.source if ea else "no logprobs recorded or probed",
        b_source=eb.source if eb else "no logprobs recorded or probed",
        note=e.note if e else "",
    )


def views(
    p: PairResult, probes: Sequence[ProbeSet] = (), threshold: float = DEFAULT_THRESHOLD
) -> list[DivergenceView]:
    why = {e.point.item_id: e for e in measure_pair(p, probes, threshold).explanations}
    return [
        view(d, p.a_run.items[d.item_id], p.b_run.items[d.item_id], why.get(d.item_id)) for d in p.divergences
    ]


# --- survival of "tokens until first divergence" -------------------------------------------


@dataclass(frozen=True, slots=True)
class Survival:
    """Per item of one pair: tokens both completions shared, and whether they then diverged.

    An identical pair of completions is censored at its length: it never diverged within the
    tokens it generated. Items without token data on both sides are left out (``missing``)."""

    label: str
    durations: tuple[int, ...]
    events: tuple[bool, ...]
    missing: int

    @property
    def n_events(self) -> int:
        return sum(self.events)

    @property
    def exposure(self) -> int:
        """Token positions at risk: an event at index t was at risk at positions 0..t."""
        return sum(d + 1 if e else d for d, e in zip(self.durations, self.events))


def _length(item: Item) -> int | None:
    if item.token_ids is not None:
        return len(item.token_ids)
    if item.tokens is not None:
        return len(item.tokens)
    return item.n_tokens


def survival(p: PairResult) -> Survival:
    by_id = {d.item_id: d for d in p.divergences}
    durations: list[int] = []
    events: list[bool] = []
    missing = 0
    for item_id in p.a_run.header.suite.item_ids:
        a, b = p.a_run.items.get(item_id), p.b_run.items.get(item_id)
        if a is None or b is None or a.error or b.error:
            continue
        d = by_id.get(item_id)
        if d is not None and d.token_index is not None:
            durations.append(d.token_index)
            events.append(True)
            continue
        n = _length(a)
        if d is not None or n is None:
            missing += 1
            continue
        durations.append(n)
        events.append(False)
    return Survival(f"{p.a} vs {p.b}", tuple(durations), tuple(events), missing)


def kaplan_meier(s: Survival) -> tuple[np.ndarray, np.ndarray]:
    """Step function S(x) = P(the first x tokens are identical), at x = 0 and after each event."""
    d = np.asarray(s.durations, dtype=float)
    e = np.asarray(s.events, dtype=bool)
    xs, ys, surv = [0.0], [1.0], 1.0
    for t in np.unique(d[e]):
        at_risk = int(np.sum((d > t) | ((d == t) & e)))
        surv *= 1.0 - int(np.sum((d == t) & e)) / at_risk
        xs.append(t + 1.0)
        ys.append(surv)
    return np.asarray(xs), np.asarray(ys)


def hazard(s: Survival) -> hz.Hazard | None:
    """The constant per-token hazard (exact Poisson interval) of ``compare.hazard``."""
    return hz.estimate(s.n_events, s.exposure) if s.exposure > 0 else None


def survivals(pairs: Sequence[PairResult]) -> list[Survival]:
    return [s for s in map(survival, pairs) if s.durations]
