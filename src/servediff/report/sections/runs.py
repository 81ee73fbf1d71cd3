"""The runs the report is made of: one row per run record (``report.rows.runs``).

servediff compare runs/*.jsonl --md report.md
"""

from __future__ import annotations

from servediff.report import fmt
from servediff.report.document import Block, Heading, Table, cell, code, spans
from servediff.report.model import Report

HEADER = ("configuration", "suite", "run", "engine", "started", "items", "engine errors", "output tokens")


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.runs:
        return ()
    rows = tuple(
        (
            cell(code(x.label)),
            cell(x.suite),
            cell(f"#{x.repeat}"),
            cell(x.engine if x.concurrency == 1 else f"{x.engine}, concurrency {x.concurrency}"),
            cell(x.created),
            cell(fmt.count(x.items)),
            cell(fmt.count(x.errors), tone="bad" if x.errors else None),
            cell(fmt.count(x.output_tokens)),
        )
        for x in r.runs
    )
    return (Heading(2, spans("Runs"), "runs"), Table(HEADER, rows))
