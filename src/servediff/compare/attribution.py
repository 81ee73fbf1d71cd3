"""Which factor did it: divergences and quality changes attributed to the factors of a design.

    servediff experiment examples/tuned-factors.toml      # the "Which factor" section

An experiment with factors runs the control and combinations of named changes to it (see
``experiment.factors``); each run header names the factors its configuration turns on. Here,
from the records alone, every combination is compared with the control on the same items:

- per factor, what it does alone (+F against the control) and what its removal prevents
  (items that diverge with every factor on and not with all but F);
- per diverging item, the smallest set of factors that reproduces its divergence, found over
  the combinations already run, as delta debugging would narrow it: a set is *established*
  (settled: 1-minimal, in delta debugging's terms) when every set one factor smaller was run and
  left the item identical to the control; otherwise it is an upper bound, and the sets that would
  settle it are listed (not run; ``experiment.bisection`` runs them on request);
- interactions: items whose established smallest set has two or more factors, i.e. that diverge
  only when those factors are on together.

"Diverges" means the completion differs from the control's first run. The attribution assumes
the control is deterministic; where its repeat differed, the report says so. Pure functions.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast, get_args

from servediff.compare.divergence import survival_time
from servediff.compare.mechanism import unlocated
from servediff.compare.quality import PairQuality, compare_scored, is_scored
from servediff.compare.stats import hazard as hz
from servediff.compare.stats.hazard import pair_hazard
from servediff.compare.study import Configuration, PairResult, Study, compare_runs
from servediff.compare.vocabulary import DesignKind
from servediff.records import Run

FactorSet = tuple[str, ...]


def design_sets(kind: DesignKind, names: Sequence[str]) -> list[FactorSet]:
    """The factor sets a design runs besides the control's empty set, each in factor order:
    ``factorial`` every combination; ``one-at-a-time`` each factor alone, all minus each one
    and all of them (with three factors, that is every combination too); ``all`` all of them
    only."""
    names = tuple(names)
    n = len(names)
    if kind == "all":  # the tuned configuration alone: ``--bisect`` narrows its divergences down
        return [names]
    if kind == "factorial":
        sets = [c for k in range(1, n + 1) for c in itertools.combinations(names, k)]
    else:
        sets = [(f,) for f in names]
        sets += [tuple(g for g in names if g != f) for f in names] if n > 2 else []
        sets.append(names)
    return list(dict.fromkeys(sets))  # one or two factors: "all" is also a single or the pair


@dataclass(frozen=True, slots=True)
class Cell:
    """One combination of factors against the control, on one suite."""

    label: str
    on: FactorSet
    identical: int
    total: int  # items compared: error-free under both
    errors: int
    diverged: tuple[str, ...]  # item ids
    left_out: tuple[str, ...]  # item ids not compared: errored or missing under either
    hazard: hz.Hazard | None
    quality: PairQuality | None  # scored suites: accuracy of this combination minus the control's
    prompt_tokens: int  # over the compared items, where the engine recorded them
    cached_tokens: int | None  # of those, reused from the KV cache (None: not recorded)


@dataclass(frozen=True, slots=True)
class FactorEffect:
    factor: str
    alone: Cell | None  # +F: None when the design did not run it alone
    without: Cell | None  # every factor but F
    prevents: tuple[str, ...] | None  # diverge with all factors, not without F (None: not run)
    sole: tuple[str, ...]  # items whose established smallest set is F alone


@dataclass(frozen=True, slots=True)
class ItemCause:
    item_id: str
    diverges_under: tuple[str, ...]  # labels of the combinations where it diverges
    smallest: tuple[FactorSet, ...]  # the smallest factor sets run that reproduce it
    established: bool  # every set one factor smaller was run and does not diverge
    untried: tuple[FactorSet, ...]  # the sets that would settle it (not run)
    masked: tuple[str, ...]  # combinations containing a smallest set where it does not diverge


@dataclass(frozen=True, slots=True)
class Interaction:
    factors: FactorSet
    items: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SuiteAttribution:
    suite: str
    design: DesignKind
    control: str
    factors: FactorSet
    control_deterministic: bool | None  # None: the control was not repeated
    cells: tuple[Cell, ...]
    effects: tuple[FactorEffect, ...]
    items: tuple[ItemCause, ...]
    interactions: tuple[Interaction, ...]
    missing: tuple[FactorSet, ...]  # sets the design runs that have no record here


@dataclass(frozen=True, slots=True)
class Place:
    """A run's place in a design, as its header records it."""

    design: DesignKind
    names: FactorSet
    on: FactorSet


def place(run: Run) -> Place | None:
    value = run.header.extra.get("experiment", {}).get("factors")
    if not isinstance(value, dict):
        return None
    names, on = value.get("names"), value.get("on")
    design = value.get("design")
    if not isinstance(names, list) or not isinstance(on, list) or design not in get_args(DesignKind):
        return None
    return Place(cast(DesignKind, design), tuple(map(str, names)), tuple(map(str, on)))


def attribute(study: Study, margin: float) -> tuple[SuiteAttribution, ...]:
    """One attribution per suite whose records include a factor design's control."""
    out = []
    for suite in study.suites:
        placed = [(c, p) for c in study.configurations if c.suite == suite and (p := place(c.runs[0]))]
        control = next(((c, p) for c, p in placed if not p.on), None)
        if control is not None:
            mine = [(c, p) for c, p in placed if p.on and p.names == control[1].names]
            out.append(suite_attribution(study, control, mine, margin))
    return tuple(out)


def suite_attribution(
    study: Study,
    control: tuple[Configuration, Place],
    configs: Sequence[tuple[Configuration, Place]],
    margin: float,
) -> SuiteAttribution:
    base, meta = control
    names, kind = meta.names, meta.design
    sets = design_sets(kind, names)
    cells = [cell(compare_runs(base.runs[0], c.runs[0], "pair"), p.on, margin) for c, p in configs]
    cells.sort(key=lambda x: sets.index(x.on) if x.on in sets else len(sets))
    by_set = {x.on: x for x in cells}
    items = causes(cells, names)
    repeats = [p for p in study.controls if p.suite == base.suite and p.a == base.label]
    return SuiteAttribution(
        suite=base.suite,
        design=kind,
        control=base.label,
        factors=names,
        control_deterministic=all(p.identical == p.total for p in repeats) if repeats else None,
        cells=tuple(cells),
        effects=tuple(effect(f, names, by_set, items) for f in names),
        items=items,
        interactions=interactions(items),
        missing=tuple(s for s in sets if s not in by_set),
    )


def cell(p: PairResult, on: FactorSet, margin: float) -> Cell:
    points = {d.item_id: d.token for d in p.divergences}
    times = []
    left_out = []
    prompt = 0
    cached: int | None = None
    for item_id in p.a_run.header.suite.item_ids:
        a, b = p.a_run.items.get(item_id), p.b_run.items.get(item_id)
        if a is None or b is None or a.error or b.error:
            left_out.append(item_id)
            continue
        times.append(survival_time(a, b, points.get(item_id)))
        meta = b.metadata.get("engine")
        if isinstance(meta, dict) and isinstance(meta.get("cached_prompt_tokens"), int):
            prompt += int(meta.get("prompt_tokens") or 0)
            cached = (cached or 0) + int(meta["cached_prompt_tokens"])
    hazard, _ = pair_hazard(times, unlocated(p.divergences))
    scored = is_scored(p.a_run) and is_scored(p.b_run)
    return Cell(
        label=p.b,
        on=on,
        identical=p.identical,
        total=p.total,
        errors=p.errors,
        diverged=tuple(points),
        left_out=tuple(left_out),
        hazard=hazard,
        quality=compare_scored(p, margin) if scored else None,
        prompt_tokens=prompt,
        cached_tokens=cached,
    )


def causes(cells: Sequence[Cell], names: FactorSet) -> tuple[ItemCause, ...]:
    """Per item that diverges anywhere: the smallest reproducing factor sets among those run."""
    ids = list(dict.fromkeys(i for c in cells for i in c.diverged))
    return tuple(item_cause(i, cells, names) for i in ids)


def item_cause(item_id: str, cells: Sequence[Cell], names: FactorSet) -> ItemCause:
    # What was observed for this item: factor set -> diverged (items that errored are unknown).
    seen: dict[frozenset[str], bool] = {frozenset(): False}
    label = {}
    for c in cells:
        if item_id not in c.left_out:
            seen[frozenset(c.on)] = item_id in c.diverged
        label[frozenset(c.on)] = c.label
    reproducing = [s for s, d in seen.items() if d]
    least = min(len(s) for s in reproducing)
    smallest = [s for s in reproducing if len(s) == least]
    below = {s - {f} for s in smallest for f in s}
    order = {n: i for i, n in enumerate(names)}

    def ordered(s: frozenset[str]) -> FactorSet:
        return tuple(sorted(s, key=order.__getitem__))

    return ItemCause(
        item_id=item_id,
        diverges_under=tuple(label[s] for s in reproducing),
        smallest=tuple(sorted(map(ordered, smallest))),
        established=all(seen.get(s) is False for s in below),
        untried=tuple(sorted(ordered(s) for s in below if s not in seen)),
        masked=tuple(label[s] for s, d in seen.items() if s and not d and any(m <= s for m in smallest)),
    )


def effect(
    factor: str, names: FactorSet, by_set: dict[FactorSet, Cell], items: Sequence[ItemCause]
) -> FactorEffect:
    full = by_set.get(names)
    without = by_set.get(tuple(n for n in names if n != factor)) if len(names) > 1 else None
    prevents = None
    if full is not None and without is not None:
        prevents = tuple(i for i in full.diverged if i not in without.diverged)
    return FactorEffect(
        factor=factor,
        alone=by_set.get((factor,)),
        without=without,
        prevents=prevents,
        sole=tuple(c.item_id for c in items if c.established and c.smallest == ((factor,),)),
    )


def interactions(items: Sequence[ItemCause]) -> tuple[Interaction, ...]:
    """Established smallest sets of two or more factors, with the items that need them."""
    found: dict[FactorSet, list[str]] = {}
    for c in items:
        if c.established:
            for s in c.smallest:
                if len(s) > 1:
                    found.setdefault(s, []).append(c.item_id)
    return tuple(Interaction(s, tuple(ids)) for s, ids in sorted(found.items()))
