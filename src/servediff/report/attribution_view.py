"""The report's "Which factor" section: ``compare.attribution`` turned into the report model.

    servediff experiment examples/tuned-factors.toml      # report.md, report.html: Which factor

Only for studies whose run headers place them in a factor design; other studies get none.
"""

from __future__ import annotations

from servediff.compare import attribution as at
from servediff.compare.hazard import HazardView
from servediff.compare.study import Study
from servediff.report.model import (
    AttributionView,
    FactorCell,
    FactorRow,
    ItemCauseView,
)


def cell(c: at.Cell) -> FactorCell:
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


def row(e: at.FactorEffect, full: at.Cell | None) -> FactorRow:
    return FactorRow(
        factor=e.factor,
        alone=cell(e.alone) if e.alone else None,
        without=cell(e.without) if e.without else None,
        prevents=None if e.prevents is None else len(e.prevents),
        diverging_with_all=None if full is None else len(full.diverged),
        sole=e.sole,
    )


def view(a: at.SuiteAttribution) -> AttributionView:
    full = next((c for c in a.cells if c.on == a.factors), None)
    return AttributionView(
        suite=a.suite,
        design=a.design,
        control=a.control,
        factors=a.factors,
        control_deterministic=a.control_deterministic,
        cells=tuple(cell(c) for c in a.cells),
        rows=tuple(row(e, full) for e in a.effects),
        items=tuple(
            ItemCauseView(i.item_id, i.diverges_under, i.smallest, i.established, i.untried, i.masked)
            for i in a.items
        ),
        interactions=tuple((i.factors, i.items) for i in a.interactions),
        missing=a.missing,
    )


def attribution(study: Study, margin: float) -> tuple[AttributionView, ...]:
    return tuple(view(a) for a in at.attribute(study, margin))
