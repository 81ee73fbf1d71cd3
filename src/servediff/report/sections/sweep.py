"""Load-induced nondeterminism: distinct completions per prompt across the repeats of a sweep, at
each concurrency and over all of them.

    servediff experiment examples/llama-server.toml

Every number is a field of ``compare.sweep.Sweep``.
"""

from __future__ import annotations

from servediff.compare.sweep import Sweep, SweepLevel
from servediff.report import fmt
from servediff.report.document import Block, Cell, Heading, Paragraph, Table, cell, code, spans
from servediff.report.model import Report

INTRO = (
    "The same configuration, the same prompts at temperature 0, repeated at each concurrency: how many "
    "distinct completions does each prompt get across the repeats?"
)
LEVELS = (
    "concurrency",
    "repeats",
    "prompts",
    "prompts with >1 distinct output",
    "max distinct",
    "mean distinct",
)


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.sweeps:
        return ()
    out: list[Block] = [Heading(2, spans("Load-induced nondeterminism"), "sweep"), Paragraph(spans(INTRO))]
    for s in r.sweeps:
        out += _sweep(s)
    return tuple(out)


def _level(x: SweepLevel) -> tuple[Cell, ...]:
    counts = (x.concurrency, x.repeats, x.prompts, x.varied, x.most)
    return (*(cell(str(n)) for n in counts), cell(fmt.mean(x.mean)))


def _sweep(s: Sweep) -> list[Block]:
    levels = tuple(_level(x) for x in s.levels)
    out: list[Block] = [Heading(3, spans(code(s.name))), Table(LEVELS, levels)]
    if s.only_varied:
        note = f"(only the {len(s.items)} prompts with more than one distinct output are listed)"
        out.append(Paragraph(spans(note), "muted"))
    header = ("prompt", *(f"c={x.concurrency}" for x in s.levels), "all levels")
    rows = tuple(
        (cell(code(item_id)), *(cell("–" if n is None else str(n)) for n in per), cell(str(pooled)))
        for item_id, per, pooled in s.items
    )
    return [*out, Table(header, rows)]
