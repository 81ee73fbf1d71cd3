"""What the HTML report shows about scored items, computed from a Study (records only).

    servediff report runs/*.jsonl --html report.html

Accuracy per configuration with a Wilson 95 % interval and, per pair, the exact McNemar test
and Newcombe's paired interval (both from ``compare.quality``, so the HTML and Markdown reports
state the same numbers); here are added the items whose correctness changed, answer agreement
per MMLU subject, and the matrix of byte-identical shares for three or more configurations.
Every number comes from the ``answer``/``gold``/``correct`` fields of the record lines; items
that errored are left out, never counted as wrong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servediff.compare import quality
from servediff.compare.study import PairResult, Study
from servediff.record import Item, Run

MARGIN = 0.01  # non-inferiority margin, as compare's default
SUBJECT_KEYS = ("subject", "category")  # where a suite's items name their MMLU subject


def scored(run: Run) -> dict[str, Item]:
    return {i: it for i, it in run.items.items() if it.error is None and it.correct is not None}


@dataclass(frozen=True, slots=True)
class Accuracy:
    suite: str
    label: str
    correct: int
    n: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.correct / self.n if self.n else float("nan")


def accuracies(study: Study) -> list[Accuracy]:
    """The first run of each scored configuration."""
    out = []
    for c in study.configurations:
        if quality.is_scored(c.runs[0]):
            a = quality.accuracy(c.runs[0])
            out.append(Accuracy(c.suite, c.label, a.correct, a.n, a.ci.low, a.ci.high))
    return out


@dataclass(frozen=True, slots=True)
class Changed:
    """A scored item right under one configuration and wrong under the other."""

    suite: str
    a: str
    b: str
    item_id: str
    subject: str | None
    gold: str | None
    a_answer: str | None
    b_answer: str | None
    a_correct: bool


@dataclass(frozen=True, slots=True)
class Paired:
    suite: str
    a: str
    b: str
    n: int  # items scored under both
    a_only: int  # right under A, wrong under B
    b_only: int
    p_value: float  # exact McNemar
    delta: float  # accuracy(B) - accuracy(A)
    delta_low: float  # Newcombe 95 %
    delta_high: float
    verdict: str  # at the study's non-inferiority margin
    changed: tuple[Changed, ...]


def subject(item: Item) -> str | None:
    for key in SUBJECT_KEYS:
        value = item.metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def paired(p: PairResult, margin: float = MARGIN) -> Paired | None:
    sa, sb = scored(p.a_run), scored(p.b_run)
    both = [i for i in p.a_run.header.suite.item_ids if i in sa and i in sb]
    if not both:
        return None
    changed = tuple(
        Changed(
            p.suite, p.a, p.b, i, subject(sa[i]), sa[i].gold, sa[i].answer, sb[i].answer, bool(sa[i].correct)
        )
        for i in both
        if sa[i].correct != sb[i].correct
    )
    q = quality.compare_scored(p, margin)
    t = q.table
    return Paired(
        p.suite,
        p.a,
        p.b,
        t.n,
        t.b,
        t.c,
        q.p_mcnemar,
        t.delta,
        q.delta_ci.low,
        q.delta_ci.high,
        q.verdict,
        changed,
    )


def paired_all(study: Study) -> list[Paired]:
    return [x for x in (paired(p, study.margin) for p in study.pairs) if x is not None]


@dataclass(frozen=True, slots=True)
class SubjectAgreement:
    subject: str
    n: int
    same_answer: int  # both configurations extracted the same answer
    a_correct: int
    b_correct: int


def subject_agreement(p: PairResult) -> list[SubjectAgreement]:
    """Per subject: how often A and B gave the same extracted answer (items scored under both)."""
    sa, sb = scored(p.a_run), scored(p.b_run)
    rows: dict[str, list[int]] = {}
    for i in p.a_run.header.suite.item_ids:
        if i not in sa or i not in sb or (name := subject(sa[i])) is None:
            continue
        r = rows.setdefault(name, [0, 0, 0, 0])
        r[0] += 1
        r[1] += sa[i].answer is not None and sa[i].answer == sb[i].answer
        r[2] += bool(sa[i].correct)
        r[3] += bool(sb[i].correct)
    return [SubjectAgreement(name, *r) for name, r in sorted(rows.items())]


@dataclass(frozen=True, slots=True)
class Matrix:
    suite: str
    labels: tuple[str, ...]
    identical: tuple[tuple[float, ...], ...]  # share of byte-identical completions; diagonal: control


def agreement_matrices(study: Study, minimum: int = 3) -> list[Matrix]:
    out = []
    for suite in study.suites:
        labels = tuple(c.label for c in study.configurations if c.suite == suite)
        if len(labels) < minimum:
            continue
        share = {
            (p.a, p.b): (p.identical / p.total if p.total else math.nan)
            for p in [*study.pairs, *study.controls]
            if p.suite == suite
        }
        cells = tuple(tuple(share.get((a, b), share.get((b, a), math.nan)) for b in labels) for a in labels)
        out.append(Matrix(suite, labels, cells))
    return out


def scored_suites(study: Study) -> Sequence[str]:
    return [s for s in study.suites if any(a.suite == s for a in accuracies(study))]
