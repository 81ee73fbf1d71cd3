"""Is each configuration what it claims to be: one row per configuration and claim, with the runs
it holds for (a claim that reads the same in every run is said once).

    servediff experiment examples/llama-server.toml
"""

from __future__ import annotations

from servediff.report import wording
from servediff.report.document import (
    Block,
    Cell,
    Heading,
    Paragraph,
    Span,
    Table,
    Tone,
    cell,
    code,
    spans,
    strong,
)
from servediff.report.model import ClaimGroup, Report

HEADER = ("configuration", "engine", "start", "serves", "version", "runs", "claims", "status", "detail")


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.claim_groups:
        return ()
    return (
        Heading(2, spans("Is each configuration what it claims to be?"), "claims"),
        Table(HEADER, tuple(_row(g) for g in r.claim_groups)),
        Paragraph(spans(wording.verification_note()), "muted"),
    )


def _row(g: ClaimGroup) -> tuple[Cell, ...]:
    runs = ", ".join(f"{suite} #{repeat}" for suite, repeat in g.runs)
    return (
        cell(code(g.label)),
        cell(g.profile),
        cell(", ".join(g.starts)),
        cell(g.serves),
        cell(g.version),
        cell(runs),
        _claims(g.claims),
        cell(strong(g.status), tone="bad") if g.flagged else cell(g.status, tone=_tone(g.status)),
        cell(g.detail),
    )


def _claims(claims: tuple[str, ...]) -> Cell:
    if not claims:
        return cell("none claimed")
    parts: list[Span | str] = []
    for i, c in enumerate(claims):
        parts += [", ", code(c)] if i else [code(c)]
    return cell(*parts)


def _tone(status: str) -> Tone | None:
    return "good" if status == "verified" else None
