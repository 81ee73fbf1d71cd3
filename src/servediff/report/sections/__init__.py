"""The report's sections, in the order a reader meets them; each one a module of this package.

    servediff report runs/*.jsonl --md report.md --html report.html

How to add a section
--------------------
1. Compute its numbers in ``compare/`` (a module of pure functions over the Study or records),
   into a frozen dataclass with ``Literal`` vocabularies, and put that dataclass in the report
   model (``report.model.Report``, built in ``report.assembly.build``): then summary.json holds
   every number the section shows, and the consistency test can find each one there.
2. Write ``report/sections/<name>.py`` with one function ``blocks(r: Report) -> tuple[Block, ...]``
   that lays its part of the model out as a document tree (``report.document``: headings,
   paragraphs, bullets, tables of cells with an optional tone, figures). It formats numbers with
   ``report.fmt`` and computes none; an empty tuple leaves the section out.
3. Register it in ``SECTIONS`` below: its name, its function and its slot (the place on the
   page, one of ``Slot``). Both the Markdown and the HTML report then show it:
   ``report.markdown_doc`` and ``report.html_doc`` lay the tree out where each template marks
   the slot with ``{{ slot("<slot>", r) }}``; no template changes.

Where Markdown and HTML need different layouts of one content (a dense table for report.md, a
card per divergence for report.html), a section returns a ``PerFormat`` block holding both.
The audit (``sections.audit``) is a page of its own, not a part of this report: its blocks are
laid out by the same backends in ``render.audit_markdown`` and ``render.audit_html``.

A section that has not been ported yet is still written in both templates; ported ones are
only a ``slot(...)`` call there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from servediff.report.document import Block
from servediff.report.model import Report
from servediff.report.sections import (
    claims,
    divergences,
    factors,
    identity,
    kl,
    load,
    method,
    placements,
    quality,
    replicas,
    runs,
    sampled,
    shadow,
    speed,
    summary,
    sweep,
    verdicts,
    verify,
    why,
)

Section = Callable[[Report], tuple[Block, ...]]
# Where on the page a section goes: each template marks these places with ``slot(...)``.
Slot = Literal[
    "top",
    "summary",
    "checks",
    "method",
    "identity",
    "factors",
    "sampled",
    "quality",
    "divergence",
    "speed",
    "appendix",
]


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    blocks: Section
    slot: Slot


# In page order within each slot.
SECTIONS: tuple[Entry, ...] = (
    Entry("verdicts", verdicts.blocks, "top"),
    Entry("summary", summary.blocks, "summary"),
    Entry("shadow", shadow.blocks, "summary"),
    Entry("claims", claims.blocks, "checks"),
    Entry("placements", placements.blocks, "checks"),
    Entry("replicas", replicas.blocks, "checks"),
    Entry("verify", verify.section, "checks"),
    Entry("method", method.blocks, "method"),
    Entry("identity", identity.blocks, "identity"),
    Entry("parts", identity.parts, "identity"),
    Entry("factors", factors.blocks, "factors"),
    Entry("sampled", sampled.blocks, "sampled"),
    Entry("quality", quality.blocks, "quality"),
    Entry("divergences", divergences.blocks, "divergence"),
    Entry("why", why.blocks, "divergence"),
    Entry("sweep", sweep.blocks, "divergence"),
    Entry("load", load.blocks, "divergence"),
    Entry("speed", speed.blocks, "speed"),
    Entry("kl", kl.blocks, "speed"),
    Entry("runs", runs.blocks, "appendix"),
)


def slot(where: Slot, report: Report) -> tuple[Block, ...]:
    """The blocks of every section in one place of the page, in registry order."""
    return tuple(b for e in SECTIONS if e.slot == where for b in e.blocks(report))
