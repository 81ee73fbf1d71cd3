"""The verdict table that opens the report: one row per configuration (speed ×, identity,
Δ accuracy with its interval, verification), each cell toned by its verdict.

    servediff experiment examples/embedded.toml      # the table at the top of report.html

Every number is a field of ``Report.verdicts`` (compare's speed, identity and quality results).
"""

from __future__ import annotations

from servediff.report import fmt, wording
from servediff.report.document import Block, Cell, Heading, Table, Tone, cell, code, spans
from servediff.report.model import Report
from servediff.report.rows.verdicts import QualityDelta, Verdict

HEADER = (
    "configuration",
    "against",
    "output tokens/s",
    "byte-identical",
    "Δ accuracy (95 % CI)",
    "verification",
)
FLAGS = ("NOT ENGAGED", "NOT CONFIGURED")
QUALITY_TONE: dict[str, Tone] = {"non-inferior": "good", "inferior": "bad", "inconclusive": "warn"}


def blocks(r: Report) -> tuple[Block, ...]:
    if not r.verdicts:
        return ()
    rows = tuple(_row(v) for v in r.verdicts)
    return (Heading(2, spans("Verdicts"), "verdicts"), Table(HEADER, rows))


def _row(v: Verdict) -> tuple[Cell, ...]:
    return (
        cell(code(v.label)),
        cell(code(v.reference) if v.reference else "(reference)"),
        _speed(v),
        _identity(v),
        _quality(v.quality),
        _verification(v.verification),
    )


def _speed(v: Verdict) -> Cell:
    where = "" if v.concurrency == 1 else f" at concurrency {v.concurrency}"
    if v.reference is None:
        t = v.tokens_per_s
        shown = "n/a" if t is None else f"{fmt.per_s(t.value)} [{fmt.per_s(t.low)}, {fmt.per_s(t.high)}]"
        return cell(shown + where)
    s = v.speedup
    if s is None:
        return cell("not comparable", tone="neutral")
    if v.load is not None and v.load.unsteady:  # the machine, not the configuration, may explain it
        note = wording.load_note(v.load, v.reference, v.label)
        return cell(f"{fmt.speedup(s.value)}{where} — {note}", tone="warn")
    tone: Tone = "good" if s.low > 1 else "bad" if s.high < 1 else "neutral"
    if s.basis == "items":  # one run each: nothing says where a rerun would land
        tone = "neutral"
    note = f" — {wording.ONE_RUN_EACH}" if s.basis == "items" else ""
    if v.split:  # one number over suites that moved opposite ways: say so, and where each went
        each = ", ".join(
            f"{suite} {fmt.speedup(x.value)} [{fmt.speedup(x.low)}, {fmt.speedup(x.high)}]"
            for suite, x in v.split
        )
        note += f" — the suites differ: {each} (Speed)"
        tone = "warn"
    return cell(f"{fmt.speedup(s.value)} {wording.speedup_interval(s)}{where}{note}", tone=tone)


def _identity(v: Verdict) -> Cell:
    # The reference is judged by its own control (repeat against repeat), the others against it.
    shown = v.control if v.reference is None else v.identity
    if not shown:
        return cell("not compared", tone="neutral")
    word = "control " if v.reference is None else ""
    text = "; ".join(f"{word}{suite} {fmt.ratio(k, n)}" for suite, k, n in shown)
    same = all(k == n for _, k, n in shown)
    tone: Tone = "good" if same else "bad" if v.reference is None else "warn"
    return cell(text, tone=tone)


def _quality(qs: tuple[QualityDelta, ...]) -> Cell:
    if not qs:
        return cell("not scored", tone="neutral")
    text = "; ".join(
        f"{q.suite} {fmt.spp(q.delta)} pp [{fmt.spp(q.low)}, {fmt.spp(q.high)}] {q.verdict}" for q in qs
    )
    tones = {QUALITY_TONE.get(q.verdict, "neutral") for q in qs}
    tone: Tone = "bad" if "bad" in tones else "warn" if "warn" in tones else "good"
    return cell(text, tone=tone)


def _verification(text: str | None) -> Cell:
    if text is None:
        return cell("nothing claimed", tone="neutral")
    tone: Tone = "bad" if any(f in text for f in FLAGS) else "good" if "verified" in text else "neutral"
    return cell(text, tone=tone)
