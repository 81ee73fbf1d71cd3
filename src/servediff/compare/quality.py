"""Accuracy and paired comparisons of scored runs, computed from the records only.

    servediff compare runs/mmlu-*.jsonl --margin 0.01

Each item line of a scored run carries the extracted answer, the gold answer and ``correct``.
Items that errored (or are missing) are excluded from accuracy and counted separately: an
engine failure is not a wrong answer. A pair is compared on the items scored in both runs.
Beside the numbers: which runs are not above chance, every item that changed correctness
between two configurations, and per subject how often they gave the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from servediff.compare import stats
from servediff.compare.stats import Interval, PairedCounts
from servediff.compare.study import PairResult, Study
from servediff.compare.vocabulary import Kind, QualityVerdict
from servediff.records import Item, Run


@dataclass(frozen=True, slots=True)
class Accuracy:
    suite: str
    label: str
    repeat: int
    correct: int
    n: int  # items scored
    errors: int  # errored or missing: excluded
    unanswered: int  # scored, but no answer could be extracted (counted wrong)
    ci: Interval  # Wilson 95 %
    clt: float  # CLT 95 % half-width
    cluster_se: float | None  # by subject, where items carry one
    clusters: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else float("nan")

    @property
    def cluster_half_width(self) -> float | None:
        """The subject-clustered 95 % half-width (1.96 standard errors), where items name a subject."""
        return None if self.cluster_se is None else 1.96 * self.cluster_se


@dataclass(frozen=True, slots=True)
class PairQuality:
    suite: str
    a: str
    b: str
    kind: Kind
    a_repeat: int
    b_repeat: int
    table: PairedCounts
    errors: int  # items left out: errored or missing on either side
    same_answer: int
    same_answer_ci: Interval
    identical: int  # byte-identical completions among the n scored items
    p_mcnemar: float
    delta_ci: Interval  # Newcombe 95 % on accuracy(B) − accuracy(A)
    verdict: QualityVerdict
    margin: float
    n_paired: int | None  # items for δ = margin at 80 % power, α = 0.05
    n_unpaired: int | None


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
class SubjectAgreement:
    subject: str
    n: int
    same_answer: int
    a_correct: int
    b_correct: int

    @property
    def same_share(self) -> float:
        """Share of the subject's items where A and B extracted the same answer (n ≥ 1 always)."""
        return self.same_answer / self.n


@dataclass(frozen=True, slots=True)
class Subjects:
    suite: str
    a: str
    b: str
    rows: tuple[SubjectAgreement, ...]


@dataclass(frozen=True, slots=True)
class Quality:
    accuracies: tuple[Accuracy, ...]
    pairs: tuple[PairQuality, ...]  # controls and pairs of scored runs
    margin: float
    chance: tuple[tuple[str, str, float], ...] = ()  # (label, suite, chance): not above chance
    changed: tuple[Changed, ...] = ()  # over the pairs (not the controls)
    subjects: tuple[Subjects, ...] = ()


CHANCE = {"mmlu": 0.25, "mmlu-letter": 0.25}  # four options


def is_scored(run: Run) -> bool:
    return run.items.scored()


def _counts(item: Item | None) -> bool:
    """Scored: the engine answered (no error) and the suite judged the answer."""
    return item is not None and item.error is None and item.correct is not None


SUBJECT_KEYS = ("subject", "category")  # where a suite's items name their MMLU subject


def subject(item: Item) -> str | None:
    """An item's subject (MMLU's, or a category): the one rule for clusters, tables and exports."""
    for key in SUBJECT_KEYS:
        value = item.metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _scored_item(run: Run, item_id: str) -> Item | None:
    item = run.items.get(item_id)
    return item if _counts(item) else None


def scored_items(run: Run) -> dict[str, Item]:
    """Every scored item of a run, by id."""
    return {i: it for i, it in run.items.items() if _counts(it)}


def accuracy(run: Run) -> Accuracy:
    items = [_scored_item(run, i) for i in run.header.suite.item_ids]
    scored = [it for it in items if it is not None]
    correct = sum(bool(it.correct) for it in scored)
    n = len(scored)
    subjects = [subject(it) for it in scored]
    clustered = n > 0 and all(s is not None for s in subjects)
    return Accuracy(
        suite=run.header.suite.name,
        label=run.label,
        repeat=run.header.repeat,
        correct=correct,
        n=n,
        errors=len(items) - n,
        unanswered=sum(it.answer is None for it in scored),
        ci=stats.wilson(correct, n),
        clt=stats.clt_halfwidth(correct / n, n) if n else float("nan"),
        cluster_se=stats.cluster_se([bool(it.correct) for it in scored], [str(s) for s in subjects])
        if clustered
        else None,
        clusters=len(set(subjects)) if clustered else 0,
    )


def scored_pairs(a: Run, b: Run, ids: Iterable[str]) -> tuple[list[tuple[Item, Item]], int]:
    """The items of ``ids`` scored under both runs, and how many were left out because either
    side errored, is missing or has no score: an engine failure is not a wrong answer."""
    pairs, errors = [], 0
    for item_id in ids:
        ia, ib = _scored_item(a, item_id), _scored_item(b, item_id)
        if ia is None or ib is None:
            errors += 1
        else:
            pairs.append((ia, ib))
    return pairs, errors


def paired_counts(pairs: Sequence[tuple[Item, Item]]) -> PairedCounts:
    """The paired 2×2 table (both right, only A, only B, neither): the one tally of the quality
    comparison and of the gate's sequence."""
    both = sum(bool(ia.correct and ib.correct) for ia, ib in pairs)
    b = sum(bool(ia.correct and not ib.correct) for ia, ib in pairs)
    c = sum(bool(ib.correct and not ia.correct) for ia, ib in pairs)
    return PairedCounts(both=both, b=b, c=c, neither=len(pairs) - both - b - c)


def compare_scored(p: PairResult, margin: float) -> PairQuality:
    pairs, errors = scored_pairs(p.a_run, p.b_run, p.a_run.header.suite.item_ids)
    # two failed extractions do not agree
    same = sum(ia.answer is not None and ia.answer == ib.answer for ia, ib in pairs)
    identical = sum(ia.sha256 == ib.sha256 for ia, ib in pairs)
    table = paired_counts(pairs)
    ci = stats.paired_ci(table)
    base = (table.both + table.b) / table.n if table.n else 0.5
    return PairQuality(
        suite=p.suite,
        a=p.a,
        b=p.b,
        kind=p.kind,
        a_repeat=p.a_run.header.repeat,
        b_repeat=p.b_run.header.repeat,
        table=table,
        errors=errors,
        same_answer=same,
        same_answer_ci=stats.wilson(same, table.n),
        identical=identical,
        p_mcnemar=stats.mcnemar_exact(table.b, table.c),
        delta_ci=ci,
        verdict=stats.verdict(ci, margin),
        margin=margin,
        n_paired=stats.n_paired(margin, table.discordance),
        n_unpaired=stats.n_unpaired(margin, base),
    )


def changed(p: PairResult) -> list[Changed]:
    """The items scored under both runs of a pair whose correctness differs, in suite order."""
    sa, sb = scored_items(p.a_run), scored_items(p.b_run)
    return [
        Changed(
            p.suite, p.a, p.b, i, subject(sa[i]), sa[i].gold, sa[i].answer, sb[i].answer, bool(sa[i].correct)
        )
        for i in p.a_run.header.suite.item_ids
        if i in sa and i in sb and sa[i].correct != sb[i].correct
    ]


def subject_agreement(p: PairResult) -> tuple[SubjectAgreement, ...]:
    """Per subject: how often A and B gave the same extracted answer (items scored under both)."""
    sa, sb = scored_items(p.a_run), scored_items(p.b_run)
    rows: dict[str, list[int]] = {}
    for i in p.a_run.header.suite.item_ids:
        if i not in sa or i not in sb or (name := subject(sa[i])) is None:
            continue
        r = rows.setdefault(name, [0, 0, 0, 0])
        r[0] += 1
        r[1] += sa[i].answer is not None and sa[i].answer == sb[i].answer  # two failures do not agree
        r[2] += bool(sa[i].correct)
        r[3] += bool(sb[i].correct)
    return tuple(SubjectAgreement(name, *r) for name, r in sorted(rows.items()))


def not_above_chance(accuracies: Iterable[Accuracy]) -> tuple[tuple[str, str, float], ...]:
    """(label, suite, chance) of each run whose Wilson 95 % interval reaches its suite's chance."""
    return tuple(
        (a.label, a.suite, CHANCE[a.suite])
        for a in accuracies
        if a.suite in CHANCE and a.n and a.ci.low <= CHANCE[a.suite]
    )


def quality(study: Study, margin: float) -> Quality:
    """Accuracy of every scored run, and every control and pair of scored runs.

    ``margin`` is both the non-inferiority margin and the δ the sample sizes are for.
    """
    # Each run asked once: an unscored run is scanned to its end (a million items, a second).
    asked: dict[int, bool] = {}

    def scored_run(r: Run) -> bool:
        if id(r) not in asked:
            asked[id(r)] = is_scored(r)
        return asked[id(r)]

    runs = [r for c in study.configurations for r in c.runs if scored_run(r)]
    pairs = [p for p in [*study.controls, *study.pairs] if scored_run(p.a_run) and scored_run(p.b_run)]
    accuracies = tuple(accuracy(r) for r in runs)
    scored = [p for p in study.pairs if scored_run(p.a_run) and scored_run(p.b_run)]
    return Quality(
        accuracies=accuracies,
        pairs=tuple(compare_scored(p, margin) for p in pairs),
        margin=margin,
        chance=not_above_chance(accuracies),
        changed=tuple(c for p in scored for c in changed(p)),
        subjects=tuple(Subjects(p.suite, p.a, p.b, rows) for p in scored if (rows := subject_agreement(p))),
    )
