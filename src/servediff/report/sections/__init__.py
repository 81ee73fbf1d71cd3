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
3. Register it in ``SECTIONS`` below, where it should appear. Both the Markdown and the HTML
   report then show it (``report.markdown_doc`` and ``report.html_doc`` lay the tree out, and
   each template places a section with ``{{ section("<name>") }}``).

A section that has not been ported yet is still written in both templates; ported ones are
only a ``section(...)`` call there.
"""

from __future__ import annotations

from collections.abc import Callable

from servediff.report.document import Block
from servediff.report.model import Report
from servediff.report.sections import claims, placements, replicas, sampled, verdicts

Section = Callable[[Report], tuple[Block, ...]]

SECTIONS: dict[str, Section] = {
    "verdicts": verdicts.blocks,
    "claims": claims.blocks,
    "placements": placements.blocks,
    "replicas": replicas.blocks,
    "sampled": sampled.blocks,
}


def blocks(name: str, report: Report) -> tuple[Block, ...]:
    return SECTIONS[name](report)
