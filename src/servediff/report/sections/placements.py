"""Where each configuration ran, when a cluster executor placed its runs.

servediff experiment examples/ray-replicas.toml --executor ray
"""

from __future__ import annotations

from servediff.report.document import Block, Heading, Table, cell, code, spans
from servediff.report.model import Report

HEADER = ("configuration", "run", "executor", "node", "node id", "GPUs")


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.placements:
        return ()
    rows = tuple(
        (
            cell(code(p.label)),
            cell(f"{p.suite} #{p.repeat}"),
            cell(p.executor),
            cell(p.node),
            cell(p.node_id),
            cell(p.gpus),
        )
        for p in r.placements
    )
    return (Heading(2, spans("Where each configuration ran"), "placement"), Table(HEADER, rows))
