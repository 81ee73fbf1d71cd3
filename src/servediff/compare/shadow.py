"""Shadow traffic in a comparison: what became of the requests ``servediff shadow`` mirrored, one
row per segment (the primary's and the candidate's records of one rotation of the session).

    servediff shadow --primary URL --candidate URL --out shadow/      # writes the records
    servediff compare shadow/*.jsonl --md report.md                   # the "Shadow traffic" section

A mirrored request is compared when both sides answered it and it was greedy or seeded; one
sampled without a seed is counted and never compared (nothing says its two answers should
agree), one that failed on either side is counted as an engine error. Requests dropped by a full
queue or sampled out never reached the records: the session's shadow.json counts them.
"""

from __future__ import annotations

from dataclasses import dataclass

from servediff.compare.study import PairResult, Study


@dataclass(frozen=True, slots=True)
class ShadowSegment:
    suite: str
    primary: str  # the label of the side clients were answered from
    candidate: str
    session: str
    segment: int
    mirrored: int  # requests in the primary's record
    compared: int
    identical: int
    noncomparable: int  # sampled without a seed: counted, not compared
    errors: int  # left out: an engine error on either side

    @property
    def diverged(self) -> int:
        return self.compared - self.identical


def is_shadow(p: PairResult) -> bool:
    return "shadow" in p.a_run.header.extra


def segment(p: PairResult) -> ShadowSegment:
    where = p.a_run.header.extra["shadow"]
    return ShadowSegment(
        suite=p.suite,
        primary=p.a,
        candidate=p.b,
        session=str(where.get("session", "")),
        segment=int(where.get("segment", 0)),
        mirrored=len(p.a_run.items),
        compared=p.total,
        identical=p.identical,
        noncomparable=p.noncomparable,
        errors=p.errors,
    )


def segments(study: Study) -> tuple[ShadowSegment, ...]:
    """Every shadow segment among the study's pairs, in the study's order."""
    return tuple(segment(p) for p in study.pairs if is_shadow(p))
