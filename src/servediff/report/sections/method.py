"""Method: each configuration's engine, the suites with their data hashes and sampling, the runs,
and the tool that made them.

    servediff compare runs/*.jsonl --md report.md
"""

from __future__ import annotations

from servediff.report.document import (
    Block,
    Bullets,
    Heading,
    Item,
    Paragraph,
    Spans,
    Table,
    cell,
    code,
    spans,
    strong,
)
from servediff.report.model import Report, SuiteMethod

HEADER = ("configuration", "engine", "model", "where", "version", "items asked through", "settings")


def blocks(r: Report) -> tuple[Block, ...]:
    rows = tuple(
        (
            cell(code(e.label)),
            cell(e.kind),
            cell(e.model),
            cell(e.where),
            cell(e.version),
            cell(e.asked),
            cell(code(e.settings)),
        )
        for e in r.engines
    )
    items = [Item(x) for s in r.suites for x in _suite(s)]
    items += [Item(spans(e.imported)) for e in r.engines if e.imported]
    t = r.tool
    git = f" (git {t.git_revision[:10]})" if t.git_revision else ""
    items.append(
        Item(
            spans(
                f"servediff {t.version}{git}, Python {t.python}, {t.platform}; first run created {t.created}."
            )
        )
    )
    return (
        Heading(2, spans("Method"), "method"),
        Table(HEADER, rows),
        *(Paragraph(spans(strong("Note:"), f" {n}"), "warn") for n in r.method_notes),
        Bullets(tuple(items)),
    )


def _recorded(x: object) -> str:
    return "not recorded" if x is None else str(x)


def _suite(s: SuiteMethod) -> tuple[Spans, Spans, Spans]:
    p = s.sampling
    drawn = (
        f" (each draw's own seed derived from it), top_p {p.top_p}, top_k {p.top_k or 'none'}, "
        f"{p.samples} draws per item"
        if p.temperature and p.temperature > 0
        else ""
    )
    thinking = "not sent" if p.enable_thinking is None else p.enable_thinking
    runs: list[Spans] = [spans(code(label), f" ×{n}") for label, n in s.runs]
    joined = tuple(x for i, part in enumerate(runs) for x in (spans(", ") if i else ()) + part)
    return (
        spans(
            "Suite ",
            code(s.name),
            f" v{s.version} ({s.source}), {s.items} items as {s.prompt_form}, content SHA-256 ",
            code(s.content_sha256[:16]),
            "…, data SHA-256 ",
            code(s.data_sha256[:16]),
            "….",
            *((f" Scored by {s.scoring}.",) if s.scoring else ()),
        ),
        spans(
            f"Sampling: temperature {_recorded(p.temperature)}, seed {_recorded(p.seed)}{drawn}, "
            f"max_tokens {p.max_tokens}, "
            f"top_logprobs {p.top_logprobs or 'not requested'}, enable_thinking {thinking}; "
            f"concurrency {s.concurrency}."
        ),
        (*spans("Runs: "), *joined, *spans(".")),
    )
