"""Shadow traffic: what became of the mirrored requests, one row per segment of a session.

    servediff compare shadow/*.jsonl --md report.md

Every number is a field of ``compare.shadow.ShadowSegment``.
"""

from __future__ import annotations

from servediff.compare.shadow import ShadowSegment
from servediff.report import fmt
from servediff.report.document import Block, Cell, Heading, Paragraph, Table, Tone, cell, code, spans
from servediff.report.model import Report

INTRO = (
    "Requests clients sent to the primary, answered from it and replayed on the candidate; each "
    "segment's two records are compared item by item. A request sampled without a seed is counted and "
    "never compared: nothing says its two answers should agree. Requests dropped by a full queue or "
    "sampled out never reached the records; the session's shadow.json counts them."
)
HEADER = (
    "segment",
    "primary",
    "candidate",
    "mirrored",
    "compared",
    "identical",
    "sampled without a seed (not compared)",
    "engine error on either side (left out)",
)


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.shadow:
        return ()
    rows = tuple(_row(s) for s in r.shadow)
    return Heading(2, spans("Shadow traffic"), "shadow"), Paragraph(spans(INTRO)), Table(HEADER, rows)


def _row(s: ShadowSegment) -> tuple[Cell, ...]:
    tone: Tone | None = "warn" if s.diverged else "good" if s.compared else None
    return (
        cell(f"{s.suite} (session {s.session})"),
        cell(code(s.primary)),
        cell(code(s.candidate)),
        cell(fmt.count(s.mirrored)),
        cell(fmt.count(s.compared)),
        cell(fmt.ratio(s.identical, s.compared), tone=tone),
        cell(fmt.count(s.noncomparable)),
        cell(fmt.count(s.errors)),
    )
