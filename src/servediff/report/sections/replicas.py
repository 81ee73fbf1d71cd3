"""Whether the replicas of one configuration agree (an A/A across replicas on shared items).

servediff experiment examples/ray-replicas.toml
"""

from __future__ import annotations

from servediff.report import wording
from servediff.report.document import Block, Bullets, Heading, Item, Paragraph, plain, spans, strong
from servediff.report.model import ReplicaCheck, Report

INTRO = (
    "Every replica answered the same first items of the suite (an A/A across replicas); each item of the "
    "main run records which replica served it."
)


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.replica_checks:
        return ()
    return (
        Heading(2, spans("Do the replicas of a configuration agree?"), "replicas"),
        Paragraph(spans(INTRO), "muted"),
        Bullets(tuple(_item(c) for c in r.replica_checks)),
    )


def _item(c: ReplicaCheck) -> Item:
    line = wording.replica_line(c)
    groups = " / ".join(str(g) for g in c.groups)
    return Item(
        spans(strong(line) if c.heterogeneous else plain(line), f" (groups: {groups})"),
        "warn" if c.heterogeneous else None,
    )
