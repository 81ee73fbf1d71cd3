"""The attribution of a factor design in the form the report shows it: per combination its
identity, hazard rates and Δ accuracy against the control; per factor what it does alone and
what its removal prevents, counted; per diverging item its smallest reproducing factor set.

    servediff experiment examples/tuned-factors.toml      # report.md, report.html: Which factor

``compare.attribution`` finds the causes (item sets); this module counts them and turns each
hazard into rates. Only for studies whose run headers place them in a factor design.
"""

from __future__ import annotations

from dataclasses import dataclass

from servediff.compare import attribution as at
from servediff.compare.quality import PairQuality
from servediff.compare.stats.hazard import HazardView
from servediff.compare.study import Study
from servediff.compare.vocabulary import DesignKind


@dataclass(frozen=True, slots=True)
class FactorCell:
    """One combination of factors against the control, on one suite."""

    label: str
    on: tuple[str, ...]
    identical: int
    total: int
    errors: int
    hazard: HazardView | None
    quality: PairQuality | None  # scored suites: the combination minus the control
    prompt_tokens: int
    cached_tokens: int | None  # prompt tokens reused from the KV cache (None: not recorded)


@dataclass(frozen=True, slots=True)
class FactorRow:
    factor: str
    alone: FactorCell | None
    without: FactorCell | None  # every factor but this one
    prevents: int | None  # items diverging with all factors that do not without this one
    diverging_with_all: int | None
    sole: tuple[str, ...]  # items this factor alone is established to cause


@dataclass(frozen=True, slots=True)
class CauseRow:
    item_id: str
    diverges_under: tuple[str, ...]
    smallest: tuple[tuple[str, ...], ...]
    established: bool
    untried: tuple[tuple[str, ...], ...]  # factor sets that would settle it; not run
    masked: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FactorTable:
    suite: str
    design: DesignKind
    control: str
    factors: tuple[str, ...]
    control_deterministic: bool | None
    cells: tuple[FactorCell, ...]
    rows: tuple[FactorRow, ...]
    items: tuple[CauseRow, ...]
    interactions: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # (factors, items)
    missing: tuple[tuple[str, ...], ...]  # combinations the design runs with no record here

    @property
    def settled(self) -> int:
        """Diverging items whose smallest reproducing factor set is established."""
        return sum(1 for i in self.items if i.established)

    @property
    def upper_bounds(self) -> int:
        """Diverging items whose smallest set found is only an upper bound (a smaller set not run)."""
        return len(self.items) - self.settled


def factor_cell(c: at.Cell) -> FactorCell:
    return FactorCell(
        label=c.label,
        on=c.on,
        identical=c.identical,
        total=c.total,
        errors=c.errors,
        hazard=HazardView.of(c.hazard),
        quality=c.quality,
        prompt_tokens=c.prompt_tokens,
        cached_tokens=c.cached_tokens,
    )


def factor_row(e: at.FactorEffect, full: at.Cell | None) -> FactorRow:
    return FactorRow(
        factor=e.factor,
        alone=factor_cell(e.alone) if e.alone else None,
        without=factor_cell(e.without) if e.without else None,
        prevents=None if e.prevents is None else len(e.prevents),
        diverging_with_all=None if full is None else len(full.diverged),
        sole=e.sole,
    )


def factor_table(a: at.SuiteAttribution) -> FactorTable:
    full = next((c for c in a.cells if c.on == a.factors), None)
    return FactorTable(
        suite=a.suite,
        design=a.design,
        control=a.control,
        factors=a.factors,
        control_deterministic=a.control_deterministic,
        cells=tuple(factor_cell(c) for c in a.cells),
        rows=tuple(factor_row(e, full) for e in a.effects),
        items=tuple(
            CauseRow(i.item_id, i.diverges_under, i.smallest, i.established, i.untried, i.masked)
            for i in a.items
        ),
        interactions=tuple((i.factors, i.items) for i in a.interactions),
        missing=a.missing,
    )


def factor_tables(study: Study, margin: float) -> tuple[FactorTable, ...]:
    return tuple(factor_table(a) for a in at.attribute(study, margin))
